"""Per-client random numbers that are the same in the loop and the batched engine.

Dropout masks and augmentation draws come from :func:`uniform`. While a client's local step
runs under :func:`client_noise` (both engines do this), draws are a counter-based hash of
(client key, call counter, element index): the batched engine passes each client's key as a
``vmap``-ed input, so every stacked client draws exactly what the loop draws for it, step by
step and layer by layer. Outside that context (direct model calls) it is ``torch.rand``.

The hash is a 31-bit integer mixer (products stay below 2^62, so int64 never overflows);
its output is uniform on [0, 1) in steps of 2^-31.

Examples
--------
>>> key = step_key(7, 0)
>>> with client_noise(key):
...     a = uniform((3,), torch.device("cpu"))
>>> with client_noise(key):
...     b = uniform((3,), torch.device("cpu"))
>>> bool(torch.equal(a, b)) and bool(((a >= 0) & (a < 1)).all())
True
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

_MASK = (1 << 31) - 1
_state = threading.local()


def _mix(h: torch.Tensor) -> torch.Tensor:
    """A 31-bit avalanche mixer on int64 tensors holding values in [0, 2^31)."""
    h = ((h ^ (h >> 16)) * 0x45D9F3B) & _MASK
    h = ((h ^ (h >> 16)) * 0x45D9F3B) & _MASK
    return h ^ (h >> 16)


def step_key(seed: int, step: int) -> torch.Tensor:
    """The key of one client's local step (from its seed), an int64 scalar tensor."""
    s = torch.tensor([(seed ^ (seed >> 31)) & _MASK, step & _MASK], dtype=torch.int64)
    return _mix((_mix(s[0]) + s[1] * 0x2F5EF6D) & _MASK)


def step_keys(seeds: list[int], step: int, device: torch.device) -> torch.Tensor:
    """Keys of one local step of several clients, shape (C,)."""
    return torch.stack([step_key(s, step) for s in seeds]).to(device)


@contextlib.contextmanager
def client_noise(key: torch.Tensor) -> Iterator[None]:
    """Draw from ``key`` (a client's step key; batched under ``vmap``) inside the block."""
    saved = getattr(_state, "key", None), getattr(_state, "count", 0)
    _state.key, _state.count = key, 0
    try:
        yield
    finally:
        _state.key, _state.count = saved


def uniform(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Uniform [0, 1) numbers of ``shape``: from the active client key, else ``torch.rand``."""
    key = getattr(_state, "key", None)
    if key is None:
        return torch.rand(shape, device=device)
    _state.count += 1
    n = 1
    for d in shape:
        n *= int(d)
    idx = torch.arange(n, device=device, dtype=torch.int64)
    base = _mix((key.to(device) + _state.count * 0x632BE5A) & _MASK)
    h = _mix((idx + base) & _MASK)
    return (h.to(torch.float32) * (1.0 / (1 << 31))).reshape(shape)
