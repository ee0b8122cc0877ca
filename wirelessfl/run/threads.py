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

The count changes the order of floating-point sums in some kernels (the loop engine's
parameters moved by about 1e-9 between one and two threads), so a run records the count it
chose in its ``meta.json`` and checkpoints, and a resumed run uses the recorded one: resume
still gives the numbers of an uninterrupted run. For numbers equal to the last bit across
machines set ``threads`` to an integer.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable

from wirelessfl.engine.cores import MAX_THREADS, torch_threads, usable_cpus
from wirelessfl.openmp import threads_sleep_when_idle

__all__ = ["MAX_THREADS", "busy_sessions", "choose_threads", "free_cores", "session_share",
           "sessions_share_the_cpu", "torch_threads", "usable_cpus"]

def _cpu_times() -> dict[int, tuple[int, int]]:
    """(idle, total) jiffies of each CPU from ``/proc/stat``."""
    out = {}
    with open("/proc/stat") as fh:
        for line in fh:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit():
                vals = [int(v) for v in fields[:8]]
                out[int(name[3:])] = (vals[3] + vals[4], sum(vals))  # idle + iowait
    return out


def free_cores(sample_s: float = 0.2) -> float:
    """How many of this process's CPUs were idle over the last ``sample_s`` seconds."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = None
    try:
        before = _cpu_times()
        time.sleep(sample_s)
        after = _cpu_times()
        free = 0.0
        for cpu, (idle, total) in after.items():
            if (allowed is None or cpu in allowed) and cpu in before:
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
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and 1 <= int(env) <= MAX_THREADS:
        return int(env)
    cpus = usable_cpus()
    if engine != "loop" and threads_sleep_when_idle():
        if share is None and sessions_share_the_cpu():
            share = session_share(cpus, busy_sessions().values())
        return cpus if share is None else max(1, min(cpus, int(share + 0.5)))
    free = free_cores() if free is None else free
    return max(1, min(cpus, int(free + 0.5)))
