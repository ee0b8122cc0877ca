"""The CPU cores a process may compute on, and PyTorch's thread count within a block.

Shared by the run's thread choice (:mod:`wirelessfl.run.threads`) and the distributed
executor's share of cores per rank (:mod:`wirelessfl.engine.distributed`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

#: The most threads a run or a rank may be given.
MAX_THREADS = 4096


def usable_cpus() -> int:
    """CPUs this process may run on, capped by the container's CPU quota if it has one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as fh:
            quota, period = fh.read().split()[:2]
        if quota != "max" and int(period) > 0:
            cpus = min(cpus, max(1, int(int(quota) / int(period) + 0.5)))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """PyTorch computes with ``count`` threads inside the block (None: unchanged)."""
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
