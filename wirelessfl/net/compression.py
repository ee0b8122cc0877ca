"""The operator C applied to the global model before it is masked and sent (``docs/papers/rafed.md`` §2.1.4).

The seed leaves C undefined and assumes only E‖C(θ) − θ‖² ≤ w₂² E‖θ‖² (A4). Here:

- ``none`` (default): the identity, w₂ = 0;
- ``quantize``: unbiased stochastic b-bit quantisation, per tensor, on the uniform grid of
  2^b levels spanning [min θ, max θ]: each entry rounds to one of its two neighbouring
  levels with the probabilities that keep its mean (E C(θ) = θ). With grid step
  s = (max − min)/(2^b − 1) the error of an entry has variance p(1 − p)s² ≤ s²/4, so
  ‖C(θ) − θ‖² ≤ Σ_tensors n s²/4 in expectation (:func:`quantize_bound`);
- ``topk``: keep the ⌈k d⌉ entries of largest magnitude of each tensor (``keep`` = k),
  zero the rest; deterministic, w₂² ≤ 1 − k.

The server always keeps the uncompressed θ_q; each round logs the measured relative error
w₂² = ‖C(θ) − θ‖²/‖θ‖².

Examples
--------
>>> p = {"w": torch.tensor([3.0, -1.0, 0.5, 2.0])}
>>> compress(p, "topk", keep=0.5, gen=None)["w"].tolist()
[3.0, 0.0, 0.0, 2.0]
"""

from __future__ import annotations

import math

import torch

from channels.validation import as_float, as_int
from wirelessfl.errors import short
from wirelessfl.models.base import Params, check_tree

OPERATORS = ("none", "quantize", "topk")


def compress(params: Params, operator: str, *, bits: int = 8, keep: float = 0.1,
             gen: torch.Generator | None) -> Params:
    """C(θ) for ``operator`` (``bits`` for ``quantize``, ``keep`` for ``topk``)."""
    check_tree("params", params, finite=False, floating=True)
    if gen is not None and not isinstance(gen, torch.Generator):
        raise TypeError(f"`gen` must be a torch.Generator or None, got {type(gen).__name__}")
    if operator == "none":
        return params
    if operator == "quantize":
        bits = as_int("bits", bits, lo=1, hi=24)
        return {k: _quantize(v, bits, gen) for k, v in _finite(params).items()}
    if operator == "topk":
        keep = as_float("keep", keep, lo=0, hi=1, lo_open=True)
        return {k: _topk(v, keep) for k, v in _finite(params).items()}
    raise ValueError(f"`operator` (the compression) must be one of {', '.join(OPERATORS)}, "
                     f"got {short(operator)}")


def _finite(params: Params) -> Params:
    """``params`` if every entry is finite (one read of the device for all tensors)."""
    ok = torch.stack([torch.isfinite(v).all() for v in params.values()]) if params else None
    if ok is not None and not bool(ok.all()):
        name = next(k for k, v in params.items() if not bool(torch.isfinite(v).all()))
        raise ValueError(f"`params`[{name!r}] holds NaN or Inf; it cannot be compressed")
    return params


def _quantize(v: torch.Tensor, bits: int, gen: torch.Generator | None) -> torch.Tensor:
    if v.numel() == 0:  # nothing to quantise
        return v.clone()
    if not bool(torch.isfinite(v.max() - v.min())):  # the span overflows its dtype (±3e38)
        return _quantize(v.double(), bits, gen).clamp(torch.finfo(v.dtype).min,
                                                      torch.finfo(v.dtype).max).to(v.dtype)
    lo, hi = v.min(), v.max()
    step = (hi - lo) / (2**bits - 1)
    if float(step) == 0.0:
        return v.clone()
    pos = (v - lo) / step
    low = pos.floor()
    u = torch.rand(v.shape, generator=gen, dtype=v.dtype, device="cpu").to(v.device)
    return lo + step * (low + (u < pos - low).to(v.dtype))


def _topk(v: torch.Tensor, keep: float) -> torch.Tensor:
    k = math.ceil(keep * v.numel())
    if k >= v.numel():
        return v.clone()
    flat = v.reshape(-1)
    out = torch.zeros_like(flat)
    idx = flat.abs().topk(k).indices
    out[idx] = flat[idx]
    return out.view_as(v)


def quantize_bound(params: Params, bits: int) -> float:
    """The bound Σ_tensors n s²/4 on E‖C(θ) − θ‖² of ``quantize`` (s its grid step)."""
    bits = as_int("bits", bits, lo=1, hi=24)
    check_tree("params", params, floating=True)
    return sum(v.numel() * float((v.max() - v.min()) / (2**bits - 1)) ** 2 / 4
               for v in params.values() if v.numel())


def relative_error(params: Params, compressed: Params) -> float:
    """Measured w₂² = ‖C(θ) − θ‖² / ‖θ‖²."""
    check_tree("params", params, floating=True)
    check_tree("compressed", compressed, params)
    num = sum(float((compressed[k] - v).pow(2).sum()) for k, v in params.items())
    den = sum(float(v.pow(2).sum()) for v in params.values())
    return num / den if den > 0 else 0.0
