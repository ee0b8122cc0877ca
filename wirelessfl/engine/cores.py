"""The CPU cores a process may compute on, and PyTorch's thread count within a block.

Shared by the run's thread choice (:mod:`wirelessfl.run.threads`) and the distributed
executor's share of cores per rank (:mod:`wirelessfl.engine.distributed`). The usable CPUs
and OpenMP's wait policy, which must be chosen before torch loads, are in
:mod:`wirelessfl.openmp`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from wirelessfl.openmp import usable_cpus

__all__ = ["MAX_THREADS", "torch_threads", "usable_cpus"]

#: The most threads a run or a rank may be given.
MAX_THREADS = 4096


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
