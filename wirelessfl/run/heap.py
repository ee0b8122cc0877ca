"""The C heap of a training worker: large CPU tensors reused, not mapped afresh each time.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves a request above its
mmap threshold (at most 32 MiB) with a fresh mapping, unmapped again when the tensor is
freed, and a thread's own arena serves at most 64 MiB from its heap, so a larger tensor is
mapped, faulted in page by page (the kernel zeroes every 4 KiB page) and unmapped at each
use. A run's stacks mostly stay below that (30 FCNN clients: 28 MB); a lockstep group's are
several runs' (six such runs: 170 MB), made anew in every engine call. Measured on 2 cores,
HIST's quick Fig. 3 with ``--jobs 2 --batch-runs 6``: 11.5 million minor page faults and
17 s of system time, against 1.1 million and 3.1 s with ``--jobs 2`` (one run at a time),
and 0.9 million and 3.7 s for the groups with :data:`REUSE`.

:data:`REUSE` keeps freed memory in one arena for the next tensor: every thread allocates
from the main heap (``MALLOC_ARENA_MAX=1``; the group's runs are threads), nothing is
mapped on its own (``MALLOC_MMAP_MAX_=0``) and the heap's top is not given back
(``MALLOC_TRIM_THRESHOLD_``). A worker then holds its peak memory until it ends, and a
tensor of one size made and freed over and over grows the heap for its first few times
(PyTorch's 64-byte alignment asks a little more than the freed block): 80 MB churned 60
times held 853 MB, against 303 MB by default. glibc reads these settings when a process
starts; ``mallopt`` in a running one (even before torch loads) left a thread's faults
growing with its tensors, so they are given to the worker processes a command spawns
(:func:`spawning_workers`), not set in a running one.
This module loads no torch.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator, Mapping, MutableMapping

#: The C library settings a training worker starts with (glibc's names).
REUSE: dict[str, str] = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_MAX_": "0",
                         "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


def worker_environment(environ: Mapping[str, str] = os.environ,
                       libc: str | None = None) -> dict[str, str]:
    """The variables to add to a training worker's environment: :data:`REUSE`, or none.

    None where ``environ`` sets a ``MALLOC_`` variable already (the user's own choice) or
    where the C library (``libc``, default: this Python's) is not glibc.
    """
    libc = platform.libc_ver()[0] if libc is None else libc
    if libc != "glibc" or any(k.startswith("MALLOC_") for k in environ):
        return {}
    return dict(REUSE)


@contextlib.contextmanager
def spawning_workers(environ: MutableMapping[str, str] | None = None) -> Iterator[dict[str, str]]:
    """``environ`` (default ``os.environ``) with :func:`worker_environment` added, for a block.

    The block spawns worker processes; ``environ`` is restored after. Yields what was added.
    """
    environ = os.environ if environ is None else environ
    extra = worker_environment(environ)
    try:
        environ.update(extra)
        yield extra
    finally:
        for k in extra:
            environ.pop(k, None)
