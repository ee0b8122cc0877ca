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
channel alone gives more, nothing is added; with ``dp_noise`` 0 nothing is ever added (the
channel alone). Round t so carries noise of multiplier z̄_t = max(z, z_t), and the accountant
composes the rounds' own mechanisms (:class:`RoundAccountant`), z_t rounded down to a 1 %
grid (:func:`grid_down`: conservative, and equal multipliers share one computation): the
channel's noise is counted, round by round. A round in which nobody transmitted releases
nothing. The multipliers are state (:class:`PrivacyState`, in the checkpoint). The channel
draws do not depend on the data, so accounting at the realised z̄_t is valid (adaptive
composition). With transmit normalisation (``network.normalise``) the channel's noise scales
with the largest update's RMS, a level that depends on the data: then only the top-up is
counted (every round at z), and the channel alone is refused. Threat model: the server sees
only the received sum; the channel's noise is unknown to it.

**Adaptive clipping** (``dp_clip_quantile`` γ, central DP; Andrew et al., NeurIPS 2021): the
clip norm starts at ``dp_clip`` and follows the γ-quantile of the update norms,
C_{t+1} = C_t·exp(−η_C(b̃_t − γ)) (:func:`next_clip`), from the noisy count b̃_t of updates
within C_t; the count's noise σ_b (``dp_count_noise``, default K/20) is paid for by a larger
noise on the sum (:func:`update_noise`), so every round is still accounted at z. C_t is
state (:class:`ClipState`, in the checkpoint).
"""

from __future__ import annotations

import copy
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

__all__ = ["DP_MODES", "PrivacyState", "ClipState", "RoundAccountant", "epsilon", "grid_down",
           "library", "next_clip", "round_event", "top_up", "update_noise"]


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
class PrivacyState(AlgorithmState):
    """DP's state, carried from round to round (and checkpointed).

    ``clip`` is adaptive clipping's norm C_t; ``multipliers`` are over the air the noise
    multipliers z̄_t = max(z, z_t) of the rounds that released something (z_t on the 1 % grid).
    """

    clip: float | None = None
    multipliers: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.multipliers is not None:  # a checkpoint's list read back
            object.__setattr__(self, "multipliers", tuple(float(z) for z in self.multipliers))


ClipState = PrivacyState  # the earlier name (checkpoints of it hold only ``clip``)

#: The channel's multipliers z_t are rounded down to this relative grid before they are composed.
GRID = 0.01


def grid_down(z: float) -> float:
    """``z`` rounded down to the grid (1 + GRID)^k: a smaller multiplier, so a larger ε."""
    if not z > 0 or math.isinf(z):
        return max(float(z), 0.0) if not math.isnan(z) else 0.0
    k = math.floor(math.log(z) / math.log1p(GRID) + 1e-9)
    return float(math.exp(k * math.log1p(GRID)))


class RoundAccountant:
    """ε of rounds that each carry their own noise multiplier, composed as they come.

    The RDP accountant of ``dp-accounting`` with one round's event per multiplier, as
    :func:`round_event`; rounds are composed once (the accountant is kept and extended),
    a resumed run's rounds all at once, equal multipliers together.
    """

    def __init__(self, mode: str, population: int, sample: int, delta: float) -> None:
        self.mode, self.population, self.sample, self.delta = mode, population, sample, delta
        self._done: tuple[float, ...] = ()
        self._acc: Any = None

    def _accountant(self, multipliers: tuple[float, ...]) -> Any:
        dp = library()
        if self._acc is None or multipliers[:len(self._done)] != self._done:
            self._acc = dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)
            self._done = ()
            counts: dict[float, int] = {}
            for z in multipliers:
                counts[z] = counts.get(z, 0) + 1
            for z, n in counts.items():
                self._compose(self._acc, z, n)
        else:
            for z in multipliers[len(self._done):]:
                self._compose(self._acc, z, 1)
        self._done = multipliers
        return self._acc

    def _compose(self, acc: Any, z: float, count: int) -> None:
        if z <= 0:  # no noise: no privacy
            acc._rdp = acc._rdp + math.inf  # noqa: SLF001 - the library raises on σ = 0
            return
        event = round_event(self.mode, z, self.population, self.sample)
        acc.compose(library().SelfComposedDpEvent(event, count) if count > 1 else event)

    def epsilon(self, multipliers: tuple[float, ...]) -> float:
        """ε at δ after rounds of these multipliers (0 for none)."""
        if not multipliers:
            return 0.0
        return float(self._accountant(tuple(multipliers)).get_epsilon(self.delta))

    def next_epsilon(self, multipliers: tuple[float, ...], z: float) -> float:
        """ε after one more round of multiplier ``z`` (the rounds so far kept as they are)."""
        acc = copy.deepcopy(self._accountant(tuple(multipliers))) if multipliers else \
            library().rdp.RdpAccountant(
                neighboring_relation=library().NeighboringRelation.REPLACE_ONE)
        self._compose(acc, z, 1)
        return float(acc.get_epsilon(self.delta))


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
