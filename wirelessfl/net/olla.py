"""Outer-loop link adaptation (OLLA) and the long-run law of its SINR offset.

OLLA [Pedersen05; Sionna's ``OuterLoopLinkAdaptation``] chooses each slot's MCS by inner-loop
link adaptation on the base station's SINR estimate lowered by an offset Δ [dB], and moves
the offset with each HARQ feedback:

    Δ ← clip(Δ − δ_down, Δ_min, Δ_max) on an ACK,   Δ ← clip(Δ + δ_up, Δ_min, Δ_max) on a NACK,

with δ_down = δ_up · p*/(1 − p*) for the BLER target p* [Sampath97]. Where the estimate is
biased or the channel fades between estimate and slot, the offset settles where the blocks'
error rate is the target: away from the clip, the offset's mean drift, δ_up·BLER −
δ_down·(1 − BLER), is zero exactly when BLER = p*.

When the estimate does not change from slot to slot (a client's mean SINR) and each slot
fades independently, Δ is a Markov chain: from offset Δ the slot's MCS is m(Δ) and it fails
with that MCS's error rate averaged over the fading, p̄(Δ). :func:`stationary_law` gives the
chain's stationary distribution π over a lattice of offsets (the clip's range in steps of
the smaller of δ_down and δ_up, or of a 1/:data:`MAX_STATES` of the range where that step
is finer). Where a step is not a whole number of lattice units it is taken as the two
nearest whole numbers with the probabilities that keep its mean, so the drift balance, and
with it the achieved BLER, is that of the continuous offset. Over an upload of many slots
the fraction of slots at each offset tends to π, so the upload's mean goodput per slot is
Σ_Δ π(Δ)·TBS(m(Δ))·(1 − p̄(Δ)) and its achieved BLER Σ_Δ π(Δ)·p̄(Δ).
"""

from __future__ import annotations

import math

import numpy as np
import torch

#: Sionna's defaults for the offset's clip [dB] and its NACK step δ_up [dB].
OFFSET_MIN_DB = -20.0
OFFSET_MAX_DB = 20.0
DELTA_UP_DB = 1.0
#: At most this many lattice steps across the clip's range.
MAX_STATES = 400


def delta_down(delta_up: float, bler_target: float) -> float:
    """δ_down = δ_up · p*/(1 − p*) [dB]: the ACK step that balances the NACK step at p*."""
    return delta_up * bler_target / (1.0 - bler_target)


def offsets(delta_up: float, bler_target: float, lo: float = OFFSET_MIN_DB,
            hi: float = OFFSET_MAX_DB) -> torch.Tensor:
    """The lattice of offsets Δ_k = lo + k·unit [dB], k = 0 … K (float64)."""
    if not (lo < hi and delta_up > 0 and 0 < bler_target < 1):
        raise ValueError(f"OLLA needs lo < hi, delta_up > 0 and 0 < bler_target < 1, got "
                         f"{lo}, {hi}, {delta_up}, {bler_target}")
    unit = max(min(delta_up, delta_down(delta_up, bler_target)), (hi - lo) / MAX_STATES)
    count = int(round((hi - lo) / unit))
    return torch.linspace(lo, hi, count + 1, dtype=torch.float64)


def _moves(states: int, step: float, sign: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Where a move of ``step`` lattice units (``sign`` ±1) takes every state, clipped.

    The floor's and the ceiling's targets, and the probability of the ceiling.
    """
    k = torch.arange(states)
    low, frac = math.floor(step), step - math.floor(step)
    near = (k + sign * low).clamp(0, states - 1)
    far = (k + sign * (low + 1)).clamp(0, states - 1)
    return near, far, frac


def _check(bler: torch.Tensor, lattice: torch.Tensor) -> None:
    """Refuse error rates that are not probabilities on the lattice's offsets."""
    if not isinstance(bler, torch.Tensor) or not bler.is_floating_point():
        raise TypeError(f"bler must be a floating-point tensor, got {type(bler).__name__}")
    if lattice.dim() != 1 or lattice.numel() < 2:
        raise ValueError("lattice must be the 1-D offsets of olla.offsets(...)")
    if bler.dim() < 1 or bler.shape[-1] != lattice.numel():
        raise ValueError(f"bler must have shape (..., {lattice.numel()}) (one error rate per "
                         f"offset of the lattice), got {tuple(bler.shape)}")
    if not bool(((bler >= 0) & (bler <= 1)).all()):
        raise ValueError("bler must hold probabilities in [0, 1] (no NaN)")


def transitions(bler: torch.Tensor, delta_up: float, bler_target: float,
                lattice: torch.Tensor) -> torch.Tensor:
    """(…, K+1, K+1) the offset chain's transition matrix on ``lattice``.

    ``bler`` (…, K+1): p̄ at each offset, the slot's error rate averaged over the fading.
    """
    _check(bler, lattice)
    unit = float(lattice[1] - lattice[0])
    states = lattice.numel()
    out = torch.zeros((*bler.shape, states), dtype=bler.dtype)
    moves = ((1.0 - bler, _moves(states, delta_down(delta_up, bler_target) / unit, -1)),
             (bler, _moves(states, delta_up / unit, +1)))
    for weight, (near, far, frac) in moves:
        shape = (*bler.shape, 1)
        out.scatter_add_(-1, near.expand(*bler.shape[:-1], states)[..., None],
                         (weight * (1.0 - frac)).reshape(shape))
        if frac > 0:
            out.scatter_add_(-1, far.expand(*bler.shape[:-1], states)[..., None],
                             (weight * frac).reshape(shape))
    return out


def stationary_law(bler: torch.Tensor, delta_up: float, bler_target: float,
                   lattice: torch.Tensor) -> torch.Tensor:
    """(…, K+1) π, the offset chain's stationary distribution, solved exactly.

    πP = π with Σπ = 1: the transposed system with its last equation replaced by the sum.
    p̄ is non-increasing in the offset (a higher offset, a lower MCS), so the chain has one
    closed class and π is unique.
    """
    p = transitions(bler, delta_up, bler_target, lattice)
    states = lattice.numel()
    system = p.transpose(-1, -2) - torch.eye(states, dtype=p.dtype)
    system[..., -1, :] = 1.0
    rhs = np.zeros((*bler.shape[:-1], states, 1))
    rhs[..., -1, 0] = 1.0
    # NumPy's LAPACK: PyTorch's (MKL's batched LU) failed on these systems in some processes
    # ("Parameter 6 was incorrect on entry to DLASWP") and solved them in others
    law = torch.as_tensor(np.linalg.solve(system.numpy(), rhs)[..., 0]).clamp_min(0.0)
    return law / law.sum(-1, keepdim=True)
