"""Per-client random numbers that are the same in the loop and the batched engine.

Augmentation draws come from :func:`uniform`, dropout masks from :func:`keep_mask` (the
threshold of the same draws, compiled on the CPU where Numba is). While a client's local step
runs under :func:`client_noise` (both engines do this), draws are a counter-based hash of
(client key, call counter, element index): the batched engine passes each client's key as a
``vmap``-ed input, so every stacked client draws exactly what the loop draws for it, step by
step and layer by layer. Outside that context (direct model calls) it is ``torch.rand``.

The hash is a 31-bit integer mixer: every sum and product is reduced to its low 31 bits, so
the per-element part runs in int32 (wrap-around keeps those bits exact) and the per-key part
in int64 or Python ints; its output is uniform on [0, 1) in steps of 2^-31.

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
import functools
import threading
from collections.abc import Iterator

import numpy as np
import torch

from wirelessfl.models import vmap_rules

_MASK = (1 << 31) - 1
_MULT = 0x45D9F3B  # the mixer's multiplier (:func:`_mix`, :func:`_mix_`)
_state = threading.local()


def _mix(h):
    """A 31-bit avalanche mixer on values in [0, 2^31): int64 tensors or Python ints alike."""
    h = ((h ^ (h >> 16)) * _MULT) & _MASK
    h = ((h ^ (h >> 16)) * _MULT) & _MASK
    return h ^ (h >> 16)


def _mix_(h: torch.Tensor) -> torch.Tensor:
    """:func:`_mix` in place on an integer tensor (the same numbers, fewer passes over memory)."""
    for _ in range(2):
        h.bitwise_xor_(h >> 16).mul_(_MULT).bitwise_and_(_MASK)
    return h.bitwise_xor_(h >> 16)


def _key(seed, step):
    return _mix((_mix((seed ^ (seed >> 31)) & _MASK) + (step & _MASK) * 0x2F5EF6D) & _MASK)


def step_key(seed: int, step: int) -> int:
    """The key of one client's local step (from its seed), a Python int in [0, 2^31).

    An int, not a tensor: the loop engine's draws then need no host-to-device copy (on a GPU
    each such copy waits for the device, every step).
    """
    return _key(int(seed), int(step))


def step_keys(seeds: list[int] | np.ndarray, steps: int | range | list[int],
              device: torch.device) -> torch.Tensor:
    """Keys of local steps of several clients: shape (C,) for one step, (S, C) for S steps.

    One vectorised computation (the batched engine asks for a whole round's keys at once);
    entry [s, c] equals ``step_key(seeds[c], steps[s])``.
    """
    seed = torch.as_tensor(np.asarray(seeds, dtype=np.int64))  # one conversion, no Python per client
    step = torch.as_tensor(steps if isinstance(steps, int) else list(steps), dtype=torch.int64)
    return _key(seed, step[..., None] if step.dim() else step).to(device)


@contextlib.contextmanager
def client_noise(key: int | torch.Tensor) -> Iterator[None]:
    """Draw from ``key`` (a client's step key; a tensor batched under ``vmap``) in the block."""
    saved = getattr(_state, "key", None), getattr(_state, "count", 0)
    _state.key, _state.count = key, 0
    try:
        yield
    finally:
        _state.key, _state.count = saved


def _base(key, device: torch.device):
    """The per-draw offset of the active client's next draw (counts the draw)."""
    _state.count += 1
    return _mix(((key.to(device) if isinstance(key, torch.Tensor) else key)
                 + _state.count * 0x632BE5A) & _MASK)


def uniform(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Uniform [0, 1) numbers of ``shape``: from the active client key, else ``torch.rand``."""
    key = getattr(_state, "key", None)
    if key is None:
        return torch.rand(shape, device=device)
    return _hashed(_base(key, device), _numel(shape), device).reshape(shape)


def keep_mask(shape: tuple[int, ...], p: float, device: torch.device) -> torch.Tensor:
    """Inverted dropout's float32 multiplier: 0 where ``uniform(shape) < p``, else ``1/(1-p)``.

    The same numbers as ``(uniform(shape, device) >= p).float().mul_(1 / (1 - p))`` (one draw
    of the client's stream). On the CPU, with Numba installed (extra ``[fast]``), the hash,
    the comparison and the scaling are one compiled pass per client (a ``vmap``-able
    operator), not fourteen tensor passes: 900,000 draws of 60 stacked clients measured
    5.2 -> 0.34 ms on 2 cores.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"keep_mask: p must lie in [0, 1), got {p!r}")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"keep_mask: shape must be non-negative ints, got {shape!r}")
    key = getattr(_state, "key", None)
    n = _numel(shape)
    if key is None or device.type != "cpu" or n >= 1 << 31 or not _kernel_ready():
        return (uniform(shape, device) >= p).to(torch.float32).mul_(1.0 / (1.0 - p))
    _state.count += 1  # the offset is mixed inside the operator (one call under vmap)
    keys = key if isinstance(key, torch.Tensor) else torch.tensor(key, dtype=torch.int64)
    # under vmap the stacked keys go to the kernel directly (vmap_rules), else the operator
    return vmap_rules.call_rule(_stacked_rule, (keys, _state.count, n, float(p)),
                                _keep_op).reshape(shape)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _hashed(base, n: int, device: torch.device) -> torch.Tensor:
    """Uniforms ``_mix(i + base) / 2^31`` for i < n, after the (batched) offsets ``base``."""
    # Elementwise in int32 where the count allows: the mixer keeps only the low 31 bits of
    # each sum and product, which wrap-around int32 arithmetic gets exactly (the same
    # numbers as int64; measured 9.6 -> 2.0 ms for 900,000 draws on 2 cores).
    wide = torch.int64 if n >= 1 << 31 else torch.int32
    idx = torch.arange(n, device=device, dtype=wide)
    base = base.to(wide) if isinstance(base, torch.Tensor) else base
    h = _mix_((idx + base).bitwise_and_(_MASK))
    return h.to(torch.float32).mul_(1.0 / (1 << 31))


# --- the compiled CPU path of keep_mask (Numba, optional) --------------------------------

_kernel = None  # the compiled kernel; False where Numba is missing


def _kernel_ready() -> bool:
    """Whether the Numba kernel is there (compiled at first use: about a second, once)."""
    global _kernel
    if _kernel is None:
        try:
            import numba
        except ImportError:
            _kernel = False
            return False
        try:
            jit = numba.njit(cache=True, nogil=True)
            _kernel = jit(_keep_kernel)
        except RuntimeError:  # "no locator available": nowhere to cache, compile in memory
            _kernel = numba.njit(cache=False, nogil=True)(_keep_kernel)
    return _kernel is not False


def _keep_kernel(keys, count, n, p, scale, out):  # pragma: no cover - compiled by Numba
    """``out[c, i] = scale if _mix(i + b_c) / 2^31 >= p else 0``, in uint32 arithmetic.

    ``b_c`` is the draw's offset of key ``keys[c]`` (:func:`_base`, in int64). Every
    intermediate of :func:`_mix` is < 2^31 after its mask, so the low 32 bits of each
    product (uint32 wrap-around) carry the same low 31 bits as :func:`_mix_`'s int32 ones.
    """
    mask, mult, sixteen = np.uint32(_MASK), np.uint32(_MULT), np.uint32(16)
    unit = np.float32(1.0 / (1 << 31))
    for c in range(keys.shape[0]):
        b = np.int64((keys[c] + count * 0x632BE5A) & _MASK)
        for _ in range(2):
            b = ((b ^ (b >> 16)) * _MULT) & _MASK
        b = np.uint32(b ^ (b >> 16))
        for i in range(n):
            h = (np.uint32(i) + b) & mask
            h = ((h ^ (h >> sixteen)) * mult) & mask
            h = ((h ^ (h >> sixteen)) * mult) & mask
            h = h ^ (h >> sixteen)
            out[c, i] = scale if np.float32(h) * unit >= p else np.float32(0.0)


@functools.lru_cache(maxsize=64)
def _scale(p: float) -> np.float32:
    """``1/(1-p)`` rounded as the tensor path rounds it (float32 ``mul_`` by a Python float)."""
    return np.float32(torch.ones((), dtype=torch.float32).mul_(1.0 / (1.0 - p)).item())


def _keep_stacked(keys: torch.Tensor, count: int, n: int, p: float) -> torch.Tensor:
    """:func:`keep_mask` of the CPU int64 client ``keys`` (any shape): (*keys.shape, n)."""
    flat = keys.reshape(-1).contiguous().numpy()
    out = torch.empty((flat.shape[0], n), dtype=torch.float32)
    _kernel(flat, count, n, np.float32(p), _scale(p), out.numpy())
    return out.reshape(*keys.shape, n)


def _stacked_rule(info, in_dims, keys: torch.Tensor, count: int, n: int, p: float,
                  mask=_keep_stacked):
    """Stacked clients: one call of ``mask`` over every client's key (batch dimension first).

    ``mask`` is the kernel's caller itself where :mod:`vmap_rules` calls this rule (eager),
    the operator in its registered rule (``torch.compile`` traces it with its fake).
    """
    dim = in_dims[0]
    if dim is None:
        return mask(keys, count, n, p), None
    return mask(keys.movedim(dim, 0), count, n, p), 0


@torch.library.custom_op("wirelessfl::keep_mask", mutates_args=())
def _keep_op(keys: torch.Tensor, count: int, n: int, p: float) -> torch.Tensor:
    """:func:`keep_mask` of the CPU int64 client ``keys`` (any shape): (*keys.shape, n)."""
    return _keep_stacked(keys, count, n, p)


@_keep_op.register_fake
def _(keys: torch.Tensor, count: int, n: int, p: float) -> torch.Tensor:
    return keys.new_empty((*keys.shape, n), dtype=torch.float32)


@_keep_op.register_vmap
def _(info, in_dims, keys: torch.Tensor, count: int, n: int, p: float):
    return _stacked_rule(info, in_dims, keys, count, n, p, mask=_keep_op)
