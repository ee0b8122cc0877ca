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

The count changes the order of floating-point sums in some kernels (the loop engine's
parameters moved by about 1e-9 between one and two threads), so a run records the count it
chose in its ``meta.json`` and checkpoints, and a resumed run uses the recorded one: resume
still gives the numbers of an uninterrupted run. For numbers equal to the last bit across
machines set ``threads`` to an integer.
"""

from __future__ import annotations

import os
import time

from wirelessfl.engine.cores import MAX_THREADS, torch_threads, usable_cpus
from wirelessfl.openmp import threads_sleep_when_idle

__all__ = ["MAX_THREADS", "choose_threads", "free_cores", "torch_threads", "usable_cpus"]

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


def choose_threads(setting: int | str = "auto", *, free: float | None = None,
                   engine: str = "auto") -> int:
    """The thread count for ``setting``: an integer as it is, ``"auto"`` as the module says.

    ``free`` (cores idle, e.g. from :func:`free_cores`) may be given instead of sampled.
    When OpenMP's idle threads sleep at once (``OMP_WAIT_POLICY=PASSIVE``, which ``import
    wirelessfl`` sets on a busy machine: :func:`~wirelessfl.openmp.choose_wait_policy`),
    the batched engine's large steps take every usable CPU (a waiting thread costs nothing,
    and each thread gets its share of a busy machine: 1.68 s against 2.55 s on one thread
    for a 60-client FCNN round beside 4 busy processes on 2 cores); the loop engine's small
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
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and 1 <= int(env) <= MAX_THREADS:
        return int(env)
    cpus = usable_cpus()
    if engine != "loop" and threads_sleep_when_idle():
        return cpus
    free = free_cores() if free is None else free
    return max(1, min(cpus, int(free + 0.5)))
