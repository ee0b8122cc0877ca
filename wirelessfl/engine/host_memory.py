"""The host memory a run may take: Linux's ``MemAvailable``.

Read by the batched engine's memory budget (:meth:`~wirelessfl.engine.batched.BatchedExecutor.memory_budget`)
and the client store's ``state_store: auto`` (:func:`~wirelessfl.engine.client_store.backend_for`).
"""

from __future__ import annotations

__all__ = ["FALLBACK_BYTES", "available_bytes"]

#: What :func:`available_bytes` answers where ``/proc/meminfo`` cannot be read (not Linux).
FALLBACK_BYTES = 16 << 30


def available_bytes(meminfo: str = "/proc/meminfo") -> int:
    """Bytes available to new work without swapping (``MemAvailable``).

    :data:`FALLBACK_BYTES` where the file is missing or has no such line.
    """
    try:
        with open(meminfo) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return FALLBACK_BYTES
