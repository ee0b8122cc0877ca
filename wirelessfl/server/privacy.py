"""Differential privacy of the FedAvg family (``algorithm.dp``): clipping, Gaussian noise, accounting.

DP-FedAvg (McMahan et al., ICLR 2018; Andrew et al. 2021's fixed-clipping case): every
client's pseudo-gradient Δ_i is scaled to norm ≤ C (``clip``, all its tensors together),
and Gaussian noise of standard deviation z·C (``noise_multiplier`` z) is added

- ``central``: once, by the server, to the sum of the K clipped updates of the round (so the
  mean carries N(0, (zC/K)²) per entry);
- ``local``: by each client, to its own clipped update before it leaves (the mean carries
  N(0, (zC)²/K) per entry).

The rounds' clients are the algorithm's sample, K of the N without replacement (all N with
``clients_per_round`` unset). The privacy spent after t rounds, ε at δ = ``dp_delta``, is
computed by Google's ``dp-accounting`` library (the ``[privacy]`` extra), not by formulas
written here. Its Rényi-DP accountant is used because it supports this sampler (a fixed-size
sample without replacement); its PLD accountant, tighter, does not. That analysis is under
replace-one adjacency, where the clipped sum's sensitivity is 2C, so each round is a
``GaussianDpEvent(z / 2)`` amplified by ``SampledWithoutReplacementDpEvent(N, K, ·)``. Local
DP counts each client's own releases with no amplification from sampling (conservative).

``over_the_air`` (Liu & Simeone, JSAC 2021; Seif, Tandon, Li, ISIT 2020): the clipped updates
are aggregated over the air, and the noise the receiver adds, of standard deviation
σ_t = u·√MSE_t per entry of the received mean (eqs. (22)–(28)), is the Gaussian mechanism's
noise. Its noise multiplier, relative to the mean's sensitivity C/K, is z_t = σ_t·K/C, logged
each round (``dp_channel_noise``). Where z_t < z the clients top it up with noise of their own
(K independent shares, simulated as one draw on the received mean) to exactly z; where the
channel alone gives more, nothing is added. Every round so carries noise of multiplier at
least z and is accounted as the central mechanism at z (conservative when the channel gives
more). Threat model: the server sees only the received sum; the channel's noise is unknown to
it.

**Adaptive clipping** (``dp_clip_quantile`` γ, central DP; Andrew et al., NeurIPS 2021): the
clip norm starts at ``dp_clip`` and follows the γ-quantile of the update norms,
C_{t+1} = C_t·exp(−η_C(b̃_t − γ)) (:func:`next_clip`), from the noisy count b̃_t of updates
within C_t; the count's noise σ_b (``dp_count_noise``, default K/20) is paid for by a larger
noise on the sum (:func:`update_noise`), so every round is still accounted at z. C_t is
state (:class:`ClipState`, in the checkpoint).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from wirelessfl.errors import ConfigError
from wirelessfl.server.state import AlgorithmState

#: ``algorithm.dp``: no privacy, noise added by the server, by every client, or the
#: over-the-air channel's own noise topped up to the target.
DP_MODES = ("none", "central", "local", "over_the_air")


@functools.cache
def library() -> Any:
    """``dp_accounting``, imported once (without it: a ConfigError naming the extra)."""
    try:
        import logging

        import dp_accounting
        logging.getLogger("absl").setLevel(logging.ERROR)  # its per-order convergence notes
    except ImportError as exc:
        raise ConfigError("algorithm.dp needs Google's dp-accounting: pip install "
                          f"'wirelessfl[privacy]' ({type(exc).__name__}: {str(exc)[:60]})") from None
    return dp_accounting


def round_event(mode: str, noise_multiplier: float, population: int, sample: int) -> Any:
    """One round's ``DpEvent`` (replace-one adjacency: sensitivity 2C, multiplier z/2)."""
    dp = library()
    base = dp.GaussianDpEvent(noise_multiplier / 2.0)
    if mode == "local" or sample >= population:  # (over_the_air: as central, below)
        return base
    return dp.SampledWithoutReplacementDpEvent(population, sample, base)


@functools.lru_cache(maxsize=4096)
def epsilon(mode: str, noise_multiplier: float, rounds: int, population: int, sample: int,
            delta: float) -> float:
    """ε at ``delta`` after ``rounds`` rounds (RDP accountant of ``dp-accounting``)."""
    if rounds <= 0:
        return 0.0
    dp = library()
    acc = dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp.SelfComposedDpEvent(round_event(mode, noise_multiplier, population, sample),
                                       int(rounds)))
    return float(acc.get_epsilon(delta))


@dataclass(frozen=True)
class ClipState(AlgorithmState):
    """Adaptive clipping's norm C_t, carried from round to round (and checkpointed)."""

    clip: float | None = None


def update_noise(noise_multiplier: float, count_noise: float) -> float:
    """z_Δ, the update's noise multiplier that keeps the round at z with the count released.

    Adaptive clipping releases the noisy count of updates within C_t beside the noisy sum
    (Andrew et al. 2021, Thm. 1): with the count's noise σ_b, the sum gets
    z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) ≥ z, so the two together are one Gaussian mechanism of
    multiplier z and the accounting is unchanged. Needs 2σ_b > z (ValueError otherwise).
    """
    if not 2.0 * count_noise > noise_multiplier:
        raise ValueError(f"dp_count_noise {count_noise:g} is too small for dp_noise "
                         f"{noise_multiplier:g}: adaptive clipping needs 2·dp_count_noise > "
                         "dp_noise (raise dp_count_noise, or lower dp_noise)")
    return float((noise_multiplier ** -2 - (2.0 * count_noise) ** -2) ** -0.5)


def next_clip(clip: float, within: int, clients: int, quantile: float, lr: float,
              count_noise: float, rng: np.random.Generator) -> float:
    """C_{t+1} = C_t · exp(−η_C (b̃ − γ)), b̃ = (within + N(0, σ_b²)) / K (Andrew et al. 2021).

    ``within`` of the round's K ``clients`` sent updates of norm ≤ C_t; the geometric step
    moves C toward the γ-quantile of the update norms.
    """
    noisy = (within + count_noise * float(rng.standard_normal())) / max(clients, 1)
    return float(clip * math.exp(-lr * (noisy - quantile)))


def top_up(channel_std: float, target_std: float) -> float:
    """The standard deviation of the noise that brings ``channel_std`` up to ``target_std``."""
    return float(max(0.0, target_std**2 - channel_std**2) ** 0.5)
