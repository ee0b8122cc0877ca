"""How many CPU threads a run computes with (``threads: auto``).

PyTorch starts one OpenMP thread per core and lets idle threads spin before they sleep. On
a machine other jobs keep busy those threads wait for cores that are not free: measured on
a 2-core VM with six processes spinning beside it (``benchmarks/threads.py``), a plain FCNN
SGD step took 40.9 ms with PyTorch's default against 3.3 ms on one thread, while on the
quiet machine two threads were best (0.55 ms against 0.70 ms on one).

``threads: auto`` (the default) therefore counts the cores that are free when the run
starts: the idle share of each CPU this process may use, sampled over a fifth of a second
from ``/proc/stat`` (the one-minute load average where that file is missing), rounded, at
least one; a CPU quota of the container (cgroup ``cpu.max``) caps it. Where OpenMP's idle
threads sleep at once (``OMP_WAIT_POLICY=PASSIVE``, which ``import wirelessfl`` sets on a
busy machine: :mod:`wirelessfl.openmp`), the batched engine takes every usable CPU instead.
``OMP_NUM_THREADS``, when set, is the user's choice and wins. An integer sets the count
outright.

Where Linux shares the CPU between *sessions* first (autogroup scheduling,
``/proc/sys/kernel/sched_autogroup_enabled`` = 1, for processes outside a CPU cgroup of
their own: most desktops and many servers), a run's share of a busy machine does not grow
with its threads: each session busy with work gets an equal part (a session with fewer
runnable threads than that part leaves the rest to the others). The batched engine then
takes as many threads as its session's part of the CPUs (:func:`session_share`, at least
one), counted from the runnable threads of the other sessions (:func:`busy_sessions`): more
threads would only wait for each other at every operation. Measured on the 2-core VM beside
4 busy processes started as one background job (``benchmarks/peers/run.py --load 4``), the
1,000-client FCNN round took 1.53 s on one thread against 1.75 s on two (medians of 3), the
60-client round 0.81 s on both but 0.79-1.12 s on two against 0.79-0.82 s on one (5 runs
each). Busy processes of the run's own session share its part instead, thread by thread:
there every usable CPU is still best (1.68 s against 2.55 s on one thread, above) among
counts up to the CPUs. More threads than CPUs take a larger part of that session from the
other busy processes: on a 2-core AVX2 VM beside 4 spinning processes of the same session
(``benchmarks/threads.py --round --load 4``, 2026-11-25) the round took 3.89 s on one
thread, 2.27 s on two and 1.48 s on four, as a thread-fair share predicts ((N + 4)/N: 5, 3,
2). ``auto`` does not take more threads than CPUs: runs started side by side from one shell
(a sweep) would each take as many as the others' threads and crowd the cores, each parallel
region waiting for its last thread's turn.

A run does not keep its first count whatever happens: :class:`ThreadGovernor` applies the
same rule again between rounds, to the load measured over the rounds since (a spike when
the run starts no longer holds it to one thread; a load that comes and goes is followed).

The count changes the order of floating-point sums in some kernels (the loop engine's
parameters moved by about 1e-8 between one and two threads; the batched engine's FCNN
rounds were equal bit for bit on 1, 2 and 4), so a run records the count it started with in
its ``meta.json`` and the current count with every change in its checkpoints, and a resumed
run starts from the recorded ones: resume still gives the numbers of an uninterrupted run.
For numbers equal to the last bit across machines and loads set ``threads`` to an integer.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterable

import torch

from wirelessfl.engine.cores import MAX_THREADS, torch_threads, usable_cpus
from wirelessfl.openmp import threads_sleep_when_idle

__all__ = ["MAX_THREADS", "ThreadGovernor", "busy_sessions", "choose_threads", "free_cores",
           "session_share", "sessions_share_the_cpu", "torch_threads", "usable_cpus"]

def _cpu_times() -> dict[int, tuple[int, int]]:
    """(idle, total) jiffies of each CPU this process may use, from ``/proc/stat``."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = None
    out = {}
    with open("/proc/stat") as fh:
        for line in fh:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit():
                vals = [int(v) for v in fields[:8]]
                if allowed is None or int(name[3:]) in allowed:
                    out[int(name[3:])] = (vals[3] + vals[4], sum(vals))  # idle + iowait
    return out


def free_cores(sample_s: float = 0.2) -> float:
    """How many of this process's CPUs were idle over the last ``sample_s`` seconds."""
    try:
        before = _cpu_times()
        time.sleep(sample_s)
        after = _cpu_times()
        free = 0.0
        for cpu, (idle, total) in after.items():
            if cpu in before:
                d_total = total - before[cpu][1]
                if d_total > 0:
                    free += (idle - before[cpu][0]) / d_total
        if after:
            return free
    except (OSError, ValueError, IndexError):
        pass
    try:
        return max(0.0, usable_cpus() - os.getloadavg()[0])
    except OSError:
        return float(usable_cpus())


def sessions_share_the_cpu() -> bool:
    """Whether the scheduler shares the CPU between sessions first (autogroup in effect).

    Autogroup is on (``/proc/sys/kernel/sched_autogroup_enabled``) and this process sits in
    the root of the CPU controller (cgroup v1 ``cpu`` or v2 hierarchy at ``/``), where the
    kernel applies it; False where either cannot be read.
    """
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as fh:
            if fh.read().strip() != "1":
                return False
        with open("/proc/self/cgroup") as fh:
            entries = [line.rstrip("\n").split(":", 2) for line in fh if line.count(":") >= 2]
    except OSError:
        return False
    for _, controllers, path in entries:
        if "cpu" in controllers.split(","):
            return path == "/"
    return any(controllers == "" and path == "/" for _, controllers, path in entries)


def busy_sessions(samples: int = 4, interval_s: float = 0.05) -> dict[int, float]:
    """Runnable threads of each session but this process's, averaged over ``samples`` readings.

    From the ``R`` states in ``/proc/<pid>/task/<tid>/stat`` (an empty dict where ``/proc``
    cannot be read); kernel threads (session 0) are left out.
    """
    if not 1 <= samples <= 100 or not 0.0 <= interval_s <= 1.0:
        raise ValueError(f"samples must be in [1, 100] and interval_s in [0, 1], got "
                         f"{samples!r}, {interval_s!r}")
    try:
        own = os.getsid(0)
        pids = os.listdir("/proc")
    except OSError:
        return {}
    counts: Counter[int] = Counter()
    for i in range(samples):
        for pid in pids:
            if not pid.isdigit():
                continue
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                        stat = fh.read()
                    state, _, _, sid = stat[stat.rindex(")") + 2:].split(" ", 4)[:4]
                except (OSError, ValueError):
                    continue
                if state == "R" and int(sid) not in (0, own):
                    counts[int(sid)] += 1
        if i + 1 < samples:
            time.sleep(interval_s)
            try:
                pids = os.listdir("/proc")
            except OSError:
                break
    return {sid: n / samples for sid, n in counts.items()}


def session_share(cpus: float, others: Iterable[float]) -> float:
    """CPUs one session gets beside sessions with ``others`` runnable threads each.

    Fair sharing between busy sessions: each gets an equal part of ``cpus``, and a session
    that cannot use its part (fewer runnable threads) leaves the rest to the others.

    >>> session_share(2, [4.0])         # one background job of 4 processes: half the machine
    1.0
    >>> session_share(2, [1, 1, 1, 1])  # four single-thread jobs: a fifth each
    0.4
    >>> session_share(8, [1.0])         # one busy thread leaves seven CPUs
    7.0
    """
    if not 0 < cpus < float("inf"):
        raise ValueError(f"cpus must be a positive finite number, got {cpus!r}")
    demands = sorted(min(float(d), float(cpus)) for d in others if d >= 0.5)
    left, groups = float(cpus), len(demands) + 1
    for d in demands:
        if d >= left / groups:
            break  # it and every larger one take a full part, as this session does
        left, groups = left - d, groups - 1
    return left / groups


def choose_threads(setting: int | str = "auto", *, free: float | None = None,
                   engine: str = "auto", share: float | None = None) -> int:
    """The thread count for ``setting``: an integer as it is, ``"auto"`` as the module says.

    ``free`` (cores idle, e.g. from :func:`free_cores`) may be given instead of sampled.
    When OpenMP's idle threads sleep at once (``OMP_WAIT_POLICY=PASSIVE``, which ``import
    wirelessfl`` sets on a busy machine: :func:`~wirelessfl.openmp.choose_wait_policy`),
    the batched engine's large steps take every usable CPU (a waiting thread costs nothing,
    and each thread gets its share of a busy machine: 1.68 s against 2.55 s on one thread
    for a 60-client FCNN round beside 4 busy processes on 2 cores), or, where the CPU is
    shared between sessions first, its session's part of them (``share``, CPUs; sampled
    with :func:`busy_sessions` and :func:`session_share` when None); the loop engine's small
    steps keep the free cores (waking a sleeping thread costs more than they compute).

    >>> choose_threads(3)
    3
    >>> 1 <= choose_threads("auto") <= usable_cpus()
    True
    """
    if engine not in ("auto", "loop", "batched", "distributed"):
        raise ValueError(f"engine must be auto, loop, batched or distributed, got {engine!r}")
    if setting != "auto":
        if isinstance(setting, bool) or not isinstance(setting, int) \
                or not 1 <= setting <= MAX_THREADS:
            raise ValueError(f"threads must be 'auto' or an integer in [1, {MAX_THREADS}], "
                             f"got {setting!r}")
        return setting
    if share is not None and (isinstance(share, bool) or not 0 < share < float("inf")):
        raise ValueError(f"share must be None or a positive number of CPUs, got {share!r}")
    if (user := _user_count()) is not None:
        return user
    if engine != "loop" and threads_sleep_when_idle():
        if share is None and sessions_share_the_cpu():
            share = session_share(usable_cpus(), busy_sessions().values())
        return _decide(share=share)
    return _decide(free=free_cores() if free is None else free)


def _user_count() -> int | None:
    """``OMP_NUM_THREADS`` when it is set to a valid count (the user's choice), else None."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(env) if env.isdigit() and 1 <= int(env) <= MAX_THREADS else None


def _decide(*, free: float | None = None, share: float | None = None) -> int:
    """The count from free cores (spinning or loop engine) or a session's share (sleeping).

    Neither given: every usable CPU (sleeping OpenMP threads, no session sharing).
    """
    cpus = usable_cpus()
    cores = free if free is not None else share
    return cpus if cores is None else max(1, min(cpus, int(cores + 0.5)))


class _LoadMeter:
    """The CPUs other processes kept busy between two readings, measured without waiting.

    ``/proc/stat``'s busy time of this process's CPUs minus this process's own CPU time;
    the interval is the rounds that ran between the readings.
    """

    def __init__(self) -> None:
        self._last = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        try:
            times = _cpu_times()
        except (OSError, ValueError, IndexError):
            return None
        busy = sum(total - idle for idle, total in times.values())
        return busy / _TICKS, time.process_time(), time.perf_counter()

    def others(self) -> float | None:
        """CPUs the other processes kept busy, on average, since the last call (None: unknown)."""
        now, last = self._read(), self._last
        self._last = now
        if now is None or last is None or now[2] - last[2] <= 0:
            return None
        return max(0.0, (now[0] - last[0]) - (now[1] - last[1])) / (now[2] - last[2])


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ThreadGovernor:
    """``threads: auto`` decided at the start and again between rounds, as the load changes.

    At the start the count is :func:`choose_threads`'s. Then, between rounds, at most once
    every ``interval_s`` wall seconds, the same rule is applied again to the load *measured
    over the rounds that ran since* (not sampled over a fifth of a second): with spinning
    OpenMP threads (or the loop engine) the free cores are the usable CPUs minus the CPU
    time other processes took (``/proc/stat`` minus this process's own), and with sleeping
    threads where sessions share the CPU the session's part is counted from the other
    sessions' runnable threads, sampled between rounds and averaged. A spike when a run
    starts therefore no longer holds a whole run to one thread, and a load that comes and
    goes is followed within an interval or two.

    An integer ``threads``, ``OMP_NUM_THREADS`` or sleeping threads without session sharing
    (every CPU, whatever the load) fix the count: :attr:`fixed`. Each change is recorded as
    ``(progress, count)`` in :attr:`changes`; the run's checkpoints hold the count and the
    changes, and a resumed run starts from them, so it computes each round with the count
    the uninterrupted run used up to the interruption. (The batched engine's numbers did not
    depend on the count on the machines measured; the loop engine's moved by about 1e-8.)

    ``fixed=True`` keeps the first count whatever the setting (the runs of a lockstep group,
    threads of one process). ``measure`` (tests): a callable giving ``{"free": cores}`` or
    ``{"share": cpus}`` for the interval, in place of the machine's load.
    """

    #: Least wall seconds between two readings of the other sessions' runnable threads.
    SAMPLE_S = 0.25

    def __init__(self, setting: int | str = "auto", engine: str = "auto", *,
                 interval_s: float = 2.0, measure: Callable[[], dict[str, float]] | None = None,
                 count: int | None = None, fixed: bool = False) -> None:
        if not 0.0 <= interval_s < float("inf"):
            raise ValueError(f"interval_s must be a finite number >= 0, got {interval_s!r}")
        self.count = count if count is not None else choose_threads(setting, engine=engine)
        self.fixed = (fixed or setting != "auto" or _user_count() is not None
                      or (measure is None and engine != "loop" and threads_sleep_when_idle()
                          and not sessions_share_the_cpu()))
        self.sleeping = engine != "loop" and threads_sleep_when_idle()
        self.interval_s, self.changes = float(interval_s), []
        self._measure = measure
        self._meter = None if self.fixed or measure is not None else _LoadMeter()
        self._shares: list[float] = []
        self._last = self._sampled = time.perf_counter()

    def restore(self, count: int, changes: Iterable[Iterable[float]] = ()) -> None:
        """Continue from a checkpoint's ``count`` and ``changes``."""
        self.count, self.changes = int(count), [list(c) for c in changes]

    def _measured(self) -> dict[str, float] | None:
        if self._measure is not None:
            return self._measure()
        if self.sleeping:
            share = (sum(self._shares) / len(self._shares)) if self._shares else None
            self._shares = []
            return None if share is None else {"share": share}
        others = self._meter.others()
        return None if others is None else {"free": usable_cpus() - others}

    def between(self, progress: float) -> int:
        """Called between rounds, at ``progress``: the count for the next round (applied)."""
        if self.fixed:
            return self.count
        now = time.perf_counter()
        if self.sleeping and self._measure is None and now - self._sampled >= self.SAMPLE_S:
            self._sampled = now  # one reading of /proc's runnable threads: about a millisecond
            self._shares.append(session_share(usable_cpus(), busy_sessions(1, 0.0).values()))
        if now - self._last < self.interval_s:
            return self.count
        self._last = now
        load = self._measured()
        if load:
            new = _decide(**load)
            if new != self.count:
                self.count = new
                self.changes.append([progress, new])
                torch.set_num_threads(new)
        return self.count
