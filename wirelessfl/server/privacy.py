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

**Adaptive clipping** (``dp_clip_quantile`` γ, central DP and over the air; Andrew et al.,
NeurIPS 2021): the clip norm starts at ``dp_clip`` and follows the γ-quantile of the update
norms, C_{t+1} = C_t·exp(−η_C(b̃_t − γ)) (:func:`next_clip`), from the noisy count b̃_t of updates
within C_t; the count's noise σ_b (``dp_count_noise``, default K/20) is paid for by a larger
noise on the sum (:func:`update_noise`), so every round is still accounted at z. C_t is
state (:class:`PrivacyState`, in the checkpoint). Over the air the sum's noise is topped up
to z_Δ; a round whose channel gives more is accounted at the joint multiplier of its sum and
the count (:func:`joint_noise`). Local DP has no server-side count to release and keeps a
fixed clip.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from typing_extensions import override

from channels.validation import as_float
from wirelessfl.errors import ConfigError
from wirelessfl.models.base import Params
from wirelessfl.server.aggregation import Aggregator, Mean
from wirelessfl.server.robust import StackedRule, clip_rows
from wirelessfl.server.state import AlgorithmState

#: ``algorithm.dp``: no privacy, noise added by the server, by every client, or the
#: over-the-air channel's own noise topped up to the target.
DP_MODES = ("none", "central", "local", "over_the_air")

__all__ = ["DP_MODES", "PrivacySettings", "PrivateMean", "PrivacyState", "ClipState",
           "RoundAccountant", "epsilon", "gaussian", "grid_down", "joint_noise", "library",
           "next_clip", "round_event", "top_up", "update_noise"]


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


def _rdp_accountant() -> Any:
    """An empty RDP accountant of ``dp-accounting`` under replace-one adjacency."""
    dp = library()
    return dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)


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
    acc = _rdp_accountant()
    acc.compose(dp.SelfComposedDpEvent(round_event(mode, noise_multiplier, population, sample),
                                       int(rounds)))
    return float(acc.get_epsilon(delta))


@dataclass(frozen=True)
class PrivacySettings:
    """The settings of differential privacy an algorithm's hyperparameters take (a mixin).

    Attributes
    ----------
    dp : str
        Differential privacy: ``none`` (default), ``central`` (the server adds N(0, (zC)²) to
        the sum of the clipped updates), ``local`` (each client adds it to its own) or
        ``over_the_air`` (the channel's noise, topped up by the clients to multiplier z).
    dp_clip : float
        C, the norm every Δ_i is scaled down to under ``dp`` [1.0].
    dp_noise : float
        z, the noise's standard deviation in units of C; over the air 0 adds nothing (the
        channel's noise alone, where the algorithm accounts it) [1.0].
    dp_delta : float
        δ of the (ε, δ) the rows report [1e-5].
    dp_target_epsilon : float or None
        Stop before a round that would spend more than this ε (None: run every round).
    """

    dp: str = "none"
    dp_clip: float = 1.0
    dp_noise: float = 1.0
    dp_delta: float = 1e-5
    dp_target_epsilon: float | None = None

    def check_privacy(self, also: tuple[str, ...] = ()) -> None:
        """Refuse bad privacy settings in one line each (``also``: the class's own DP keys)."""
        if self.dp not in DP_MODES:
            raise ValueError(f"`dp` must be one of {', '.join(DP_MODES)}, got {self.dp!r}")
        as_float("dp_clip", self.dp_clip, lo=0, hi=1e12, lo_open=True)
        as_float("dp_noise", self.dp_noise, lo=0, hi=1e6)
        if self.dp_noise == 0 and self.dp != "over_the_air":
            raise ValueError("`dp_noise` 0 adds no noise: give a noise multiplier > 0 (0 is for "
                             "dp: over_the_air, where it accounts the channel's noise alone)")
        as_float("dp_delta", self.dp_delta, lo=0, hi=1, lo_open=True, hi_open=True)
        if self.dp_target_epsilon is not None:
            as_float("dp_target_epsilon", self.dp_target_epsilon, lo=0, hi=1e6, lo_open=True)
        base = type(self)
        for key in ("dp_clip", "dp_noise", "dp_delta", "dp_target_epsilon", *also):
            if getattr(self, key) != getattr(base, key) and self.dp == "none":
                raise ValueError(f"`{key}` is a setting of differential privacy: set dp: "
                                 "central or local, or remove it")


class PrivateMean(StackedRule):
    """The clipped mean of a stack with Gaussian noise: DP at an edge server or a server.

    Every row is scaled to norm ≤ C (``clip``); then ``local``: each row gets N(0, (zC)²)
    per entry before ``inner`` sums; ``central``: the mean gets N(0, (zC/K)²);
    ``over_the_air``: the inner (over-the-air) aggregation's own noise on the mean is topped
    up to zC/K (:func:`top_up`). The noise comes from a generator seeded by ``rng`` after
    ``inner`` has drawn from it (``local``: before), so an inner over-the-air aggregation
    draws the channel it draws without DP. Uniform weights (every client one vote of norm
    ≤ C) are the caller's.
    """

    exact = False

    def __init__(self, mode: str, clip: float, noise: float, inner: Aggregator | None = None
                 ) -> None:
        if mode not in DP_MODES or mode == "none":
            raise ValueError(f"PrivateMean's mode must be central, local or over_the_air, got "
                             f"{mode!r}")
        self.mode, self.clip, self.noise = mode, float(clip), float(noise)
        self.inner = inner or Mean()
        if mode == "over_the_air" and self.inner.exact:
            raise ValueError("dp over_the_air counts the channel's noise, but this aggregation "
                             "is exact: aggregate over the air (network.aggregation "
                             "over_the_air, HIST's aggregation: aircomp) or use dp central")
        if mode != "over_the_air" and not self.inner.exact:
            raise ValueError(f"dp {mode} adds its noise to an exact sum, but this aggregation is "
                             "over the air (its noise would go uncounted): use dp over_the_air")
        self.needs_clients = self.inner.needs_clients

    @override
    def aggregate_stack(self, stack, weights, rng, **kwargs):
        stack = clip_rows(stack, self.clip)
        zc = self.noise * self.clip
        if self.mode == "local":
            stack = gaussian(stack, zc, _generator(rng))
        update, info = self.inner.aggregate_stack(stack, weights, rng, **kwargs)
        std = zc / max(len(weights), 1)
        if self.mode == "over_the_air" and info.noise_std is not None:
            std = top_up(info.noise_std, std)
        if self.mode != "local" and std > 0:
            update = gaussian(update, std, _generator(rng))
        return update, info

    def __repr__(self) -> str:
        return (f"PrivateMean({self.mode}, clip={self.clip}, noise={self.noise}, "
                f"inner={self.inner!r})")


def gaussian(tree: Params, std: float, gen: torch.Generator) -> Params:
    """``tree`` plus N(0, std²) per entry, drawn on the CPU from ``gen``.

    A tree on any device gets the same numbers.
    """
    return {k: v + std * torch.randn(v.shape, generator=gen, dtype=v.dtype).to(v.device)
            for k, v in tree.items()}


def _generator(rng: np.random.Generator) -> torch.Generator:
    """A CPU generator seeded from ``rng``'s next draw."""
    return torch.Generator().manual_seed(int(rng.integers(2**62)))


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
        if self._acc is None or multipliers[:len(self._done)] != self._done:
            self._acc = _rdp_accountant()
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
        acc = copy.deepcopy(self._accountant(tuple(multipliers))) if multipliers \
            else _rdp_accountant()
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


def joint_noise(sum_noise: float, count_noise: float) -> float:
    """The one multiplier of a sum at ``sum_noise`` released beside a count at σ_b.

    The inverse of :func:`update_noise`: (z_Δ⁻² + (2σ_b)⁻²)^(−1/2) (Andrew et al. 2021,
    Thm. 1); without a count (σ_b = ∞) the sum's own.
    """
    if math.isinf(count_noise):
        return float(sum_noise)
    return float((sum_noise ** -2 + (2.0 * count_noise) ** -2) ** -0.5)


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
