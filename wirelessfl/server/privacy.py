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
import dataclasses
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
from wirelessfl.server.robust import StackedRule, clip_rows, row_norms
from wirelessfl.server.state import AlgorithmState

#: ``algorithm.dp``: no privacy, noise added by the server, by every client, or the
#: over-the-air channel's own noise topped up to the target.
DP_MODES = ("none", "central", "local", "over_the_air")

__all__ = ["DP_MODES", "Privacy", "PrivacySettings", "PrivateMean", "PrivacyState", "ClipState",
           "RoundAccountant", "calibrate", "epsilon", "gaussian", "grid_down", "joint_noise",
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
    """ε at ``delta`` after ``rounds`` rounds (RDP accountant of ``dp-accounting``).

    With sampling (K < N, central) the smaller of two valid bounds: the sampled Gaussian's
    and the plain Gaussian's without amplification. Each holds for the sampled mechanism (a
    sample differs from its neighbour's in at most the one client), and at small z the
    sampled RDP bound is the looser one (since 2026-11-28; rows written before carry the
    sampled bound alone).
    """
    if rounds <= 0:
        return 0.0
    dp = library()
    acc = _rdp_accountant()
    acc.compose(dp.SelfComposedDpEvent(round_event(mode, noise_multiplier, population, sample),
                                       int(rounds)))
    eps = float(acc.get_epsilon(delta))
    if mode != "local" and sample < population:
        eps = min(eps, epsilon(mode, noise_multiplier, rounds, population, population, delta))
    return eps


def calibrate(mode: str, target_epsilon: float, rounds: int, population: int, sample: int,
              delta: float, vectors: int = 1) -> float:
    """The noise multiplier z whose ``rounds`` rounds spend ``target_epsilon`` at ``delta``.

    ``dp-accounting``'s own calibration (``calibrate_dp_mechanism``, a bracketed search on
    the accountant of :func:`epsilon`) over the same events, each round's ``vectors``
    releases at z together (:func:`round_event`); the ε of the z returned is at most the
    target and within 1 % of it (tested). A ConfigError when no z up to 10⁴ reaches it.
    """
    dp = library()
    rounds = int(rounds)

    def event(z: float) -> Any:
        return dp.SelfComposedDpEvent(
            round_event(mode, z / math.sqrt(vectors), population, sample), rounds)

    def plain(z: float) -> Any:  # the bound without amplification (see :func:`epsilon`)
        return dp.SelfComposedDpEvent(
            round_event(mode, z / math.sqrt(vectors), population, population), rounds)

    found = []
    for make in ((event, plain) if mode != "local" and sample < population else (event,)):
        try:
            found.append(dp.calibrate_dp_mechanism(
                _rdp_accountant, make, float(target_epsilon), float(delta),
                dp.LowerEndpointAndGuess(1e-3, 1.0), tol=1e-4))
        except (ValueError, RuntimeError) as exc:  # the library's "no noise reaches it"
            raise ConfigError(f"algorithm.dp_epsilon {target_epsilon:g} cannot be reached in "
                              f"{rounds} rounds at delta {delta:g} ({str(exc)[:60]}): raise it, "
                              "or run fewer rounds") from None
    return float(min(found))  # the smaller z meets the target under the tighter bound


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
        # over the air the received mean is over the k clients that transmitted
        silent = int(info.silent) if self.mode == "over_the_air" else 0
        std = zc / max(len(weights) - silent, 1)
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
    a resumed run's rounds all at once, equal multipliers together. With sampling, ε is the
    smaller of the sampled bound and the plain one (as :func:`epsilon`).
    """

    def __init__(self, mode: str, population: int, sample: int, delta: float) -> None:
        self.mode, self.population, self.sample, self.delta = mode, population, sample, delta
        self._done: tuple[float, ...] = ()
        self._acc: Any = None
        #: The same rounds without amplification by sampling (None: no sampling).
        self.plain = (RoundAccountant(mode, population, population, delta)
                      if mode != "local" and sample < population else None)

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
        eps = float(self._accountant(tuple(multipliers)).get_epsilon(self.delta))
        return eps if self.plain is None else min(eps, self.plain.epsilon(multipliers))

    def next_epsilon(self, multipliers: tuple[float, ...], z: float) -> float:
        """ε after one more round of multiplier ``z`` (the rounds so far kept as they are)."""
        acc = copy.deepcopy(self._accountant(tuple(multipliers))) if multipliers \
            else _rdp_accountant()
        self._compose(acc, z, 1)
        eps = float(acc.get_epsilon(self.delta))
        return eps if self.plain is None else min(eps, self.plain.next_epsilon(multipliers, z))


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


class Privacy:
    """Differential privacy of everything a round's clients send: one server-side component.

    Every vector a client uploads passes :meth:`release`: each row of its stack is clipped to
    its vector's norm (the model update's C_t, a second vector's ``dp_clip_second``), then
    ``local`` noise is added to every row, the vector is aggregated, and ``central`` noise
    (over the air: the top-up of the channel's own) is added to the aggregate. The FedAvg
    family's model update, SCAFFOLD's control-variate changes Δc_i and FAdamGC's tracking
    changes Δy_i all take this path, so no vector escapes the accountant.

    **Accounting of several vectors.** A client that sends v vectors a round, each clipped to
    its own C_j and noised at z·C_j, releases one Gaussian mechanism on the concatenation
    (x_1/C_1, …, x_v/C_v) of sensitivity √v (in units of its clip) at noise z: a round is
    accounted at the multiplier z/√v (exact for the joint release of one sample; v = 1 is
    DP-FedAvg's). Over the air (the channel's own noise, one multiplier per round) and
    adaptive clipping (a third release, the count) are accounted for the model update only,
    so an algorithm whose clients send a second vector refuses them (one line).

    **Calibration.** With ``dp_epsilon`` the multiplier z is not given but derived from the
    target (ε, δ) for the run's rounds and sampling (:func:`calibrate`); the top-up over the
    air uses it too. **Noise cohort** (``dp_noise_cohort`` M, central DP): the noise added
    to the mean is that of a cohort of M clients, zC/M, while K < M train, and the
    accountant samples M of the population: a simulation device (pfl-research's
    ``noise_cohort_size``) to study a large deployment's noise at a small run's cost. The
    model it trains is not the one M clients would train.

    **Over the air with truncation.** The received mean is over the k clients that
    transmitted (:mod:`channels.aircomp`: silent clients do not count in k), so its
    sensitivity is 2C/k: the channel's multiplier is z_t = σ_t·k/C and the top-up aims at
    zC/k, with k = K − silent.
    """

    def __init__(self, hp: PrivacySettings, *, population: int, sample: int,
                 rounds: int | None, uplink: Aggregator | None = None, seeds: Any = None,
                 second: str | None = None) -> None:
        self.hp, self.mode, self.seeds = hp, hp.dp, seeds
        #: What a client's second upload is (None: it sends only its model update).
        self.second = second
        self.vectors = 2 if (second is not None and hp.dp != "none"
                             and getattr(hp, "dp_vectors", "all") == "all") else 1
        cohort = getattr(hp, "dp_noise_cohort", None)
        #: K of the accountant: the round's sample, or the simulated noise cohort M.
        self.population, self.sample = population, (int(cohort) if cohort else sample)
        self.check(sample)
        target = getattr(hp, "dp_epsilon", None)
        #: z: ``dp_noise``, or calibrated from ``dp_epsilon`` for the run's rounds.
        self.z = float(hp.dp_noise)
        if target is not None and hp.dp != "none":
            if not rounds:
                raise ConfigError("algorithm.dp_epsilon calibrates the noise for the run's "
                                  "rounds, but none were given")
            self.z = calibrate("local" if hp.dp == "local" else "central", target, rounds,
                               population, self.sample, hp.dp_delta, self.vectors)
        #: Over the air: the rounds' own multipliers, composed as they come.
        self.accountant = (RoundAccountant("central", population, self.sample, hp.dp_delta)
                           if hp.dp == "over_the_air" else None)
        #: Over the air: whether the channel's noise is counted (not with ``normalise``,
        #: which scales it with the updates: a noise level that depends on the data).
        self.channel_counted = not getattr(uplink, "normalise", False)

    def check(self, sample: int) -> None:
        """Refuse, in one line, what this component cannot account (see the class docs)."""
        hp, second = self.hp, self.second
        if hp.dp == "none":
            return
        if second is not None and getattr(hp, "dp_vectors", "all") != "all":
            raise ConfigError(f"algorithm.dp_vectors {hp.dp_vectors}: this algorithm's clients "
                              f"also send their {second}, which would reach the server without "
                              "clipping or noise, outside epsilon (runs made before 2026-11-28 did "
                              "so); start a new run with dp_vectors: all")
        if second is not None and hp.dp == "over_the_air":
            raise ConfigError(f"algorithm.dp over_the_air accounts the channel's noise on the "
                              f"model update only, but this algorithm's clients also send their "
                              f"{second} over the air: use dp central or local")
        if second is not None and getattr(hp, "dp_clip_quantile", None) is not None:
            raise ConfigError(f"algorithm.dp_clip_quantile (adaptive clipping) is accounted for "
                              f"the model update alone, but this algorithm's clients also send "
                              f"their {second}: use a fixed dp_clip (and dp_clip_second)")
        cohort = getattr(hp, "dp_noise_cohort", None)
        if cohort is not None and not sample <= cohort <= self.population:
            raise ConfigError(f"algorithm.dp_noise_cohort {cohort} must be between the round's "
                              f"{sample} clients and the population's {self.population}")

    # ------------------------------------------------------------------ mechanism
    def clip_norm(self, state: Any = None, vector: int = 0) -> float:
        """C of ``vector``: the model update's C_t, a second vector's ``dp_clip_second``.

        C_t is ``dp_clip``, or adaptive clipping's, held in ``state.privacy``;
        ``dp_clip_second`` defaults to ``dp_clip``.
        """
        if vector:
            c2 = getattr(self.hp, "dp_clip_second", None)
            return float(c2) if c2 is not None else float(self.hp.dp_clip)
        held = getattr(getattr(state, "privacy", None), "clip", None)
        return float(held) if held is not None else float(self.hp.dp_clip)

    def count_noise(self, clients: int) -> float:
        """σ_b: ``dp_count_noise``, or K/20 for a round of K clients (Andrew et al.)."""
        given = getattr(self.hp, "dp_count_noise", None)
        return given if given is not None else max(clients, 1) / 20.0

    def noise_multiplier(self, clients: int) -> float:
        """The sum's noise multiplier: z, or with adaptive clipping z_Δ ≥ z (the count's share)."""
        if getattr(self.hp, "dp_clip_quantile", None) is None:
            return self.z
        return update_noise(self.z, self.count_noise(clients))

    def noise(self, tree: Params, t: int, std: float, vector: int = 0) -> Params:
        """``tree`` plus N(0, std²) per entry, from round t's ``dp`` stream (vector j > 0: its own)."""
        keys = (t,) if not vector else (t, vector)
        return gaussian(tree, std, torch.Generator().manual_seed(self.seeds.int_seed("dp", *keys)))

    def release(self, stack: Params, aggregate: Any, state: Any, t: int, *, vector: int = 0,
                scale: float = 1.0) -> tuple[Params, Any]:
        """One vector of the round's clients, privatised: ``aggregate(stack)`` of the clipped rows.

        ``aggregate`` sums the clipped (``local``: and noised) stack as the algorithm does
        and returns ``(update, AggregateInfo)``; ``scale`` is the update's sum of
        coefficients (1 for a mean). ``central`` adds N(0, (z·C·scale/K)²) to it (K the
        round's clients, or the noise cohort); over the air the channel's noise is topped
        up to z·C/k for the k transmitters. Returns the update and the info (with adaptive
        clipping, how many rows were within C before clipping).
        """
        rows = len(next(iter(stack.values())))
        clip, within = self.clip_norm(state, vector), None
        norms = row_norms(stack)
        if not vector and getattr(self.hp, "dp_clip_quantile", None) is not None:
            within = int((norms <= clip).sum())  # counted before clipping (one host read)
        stack = clip_rows(stack, clip, norms)
        zc = self.noise_multiplier(rows) * clip  # the noise's std on one clipped row
        if self.mode == "local":
            stack = self.noise(stack, t, zc, vector)
        update, info = aggregate(stack)
        if within is not None:
            info = dataclasses.replace(info, within_clip=within)
        cohort = max(self.sample if getattr(self.hp, "dp_noise_cohort", None) else rows, 1)
        if self.mode == "central":
            update = self.noise(update, t, zc * scale / cohort, vector)
        elif self.mode == "over_the_air" and info.noise_std is not None:
            k = max(rows - int(info.silent), 1)  # the mean is over the transmitters
            extra = top_up(info.noise_std, zc * scale / k)
            if extra > 0:  # the clients' own shares, summed: one draw on the received mean
                update = self.noise(update, t, extra, vector)
        return update, info

    def noisy_mean(self, mean: Params, rows: int, t: int) -> Params:
        """Central DP's noise on a mean of ``rows`` clipped rows summed elsewhere (a fold).

        The same draw as :meth:`release` of the model update: N(0, (zC/K)²), K the rows or
        the noise cohort.
        """
        cohort = max(self.sample if getattr(self.hp, "dp_noise_cohort", None) else rows, 1)
        return self.noise(mean, t, self.noise_multiplier(rows) * self.clip_norm() / cohort)

    # ------------------------------------------------------------------ state and accounting
    def channel_multiplier(self, state: Any, infos: Any, clients: int) -> float | None:
        """z_t = σ_t·k/C of the round's first (the model's) aggregation (None: no channel noise).

        k is the number of clients that transmitted (the received mean is over them).
        """
        std = infos[0].noise_std if infos else None
        if std is None:
            return None
        return std * max(clients - int(infos[0].silent), 1) / self.clip_norm(state)

    def next_state(self, state: Any, infos: Any, clients: int) -> PrivacyState | None:
        """DP's next state (None without one).

        The clip norm learned from this round's count (adaptive clipping), and over the air
        the multipliers with this round's z̄_t = max(z, z_t).
        """
        hp = self.hp
        quantile = getattr(hp, "dp_clip_quantile", None)
        if quantile is None and hp.dp != "over_the_air":
            return None
        held = state.privacy if isinstance(state.privacy, PrivacyState) else PrivacyState()
        clip = self.clip_norm(state)
        if quantile is not None:
            within = infos[0].within_clip if infos and infos[0].within_clip is not None else None
            if within is not None and clients:  # (nothing aggregated: C stays)
                clip = next_clip(clip, within, clients, quantile, hp.dp_clip_lr,
                                 self.count_noise(clients),
                                 self.seeds.generator("dp_count", state.round))
        mults = held.multipliers
        if hp.dp == "over_the_air":
            mults = mults or ()
            if clients and not (infos and infos[0].received_nothing):  # something released
                z_t = self.channel_multiplier(state, infos, clients) or 0.0
                floor = self.noise_multiplier(clients)  # z, or z_Δ beside a noisy count
                z_sum = max(floor, grid_down(z_t)) if self.channel_counted else floor
                mults = (*mults, self.z if z_sum == floor else
                         joint_noise(z_sum, self.count_noise(clients))
                         if quantile is not None else z_sum)
        return PrivacyState(clip if quantile is not None else None, mults)

    def epsilon(self, rounds: int, state: Any = None) -> float | None:
        """ε at ``dp_delta`` spent by ``rounds`` rounds (None without ``dp``).

        Over the air with ``state``: its rounds' own multipliers composed
        (:class:`RoundAccountant`); without it, every round at z (an upper bound: no round
        carries less). A round of v vectors is one release at z/√v.
        """
        hp = self.hp
        if hp.dp == "none":
            return None
        if self.accountant is not None and state is not None:
            return self.accountant.epsilon(getattr(state.privacy, "multipliers", None) or ())
        if self.z == 0:
            return math.inf
        return epsilon("local" if hp.dp == "local" else "central",
                       self.z / math.sqrt(self.vectors), int(rounds), self.population,
                       self.sample, hp.dp_delta)

    def spent(self, rounds_done: int, state: Any = None) -> bool:
        """Whether one more round would spend more than ``dp_target_epsilon``.

        Over the air the next round is taken at z (no round carries less), or with the
        channel alone (``dp_noise`` 0) at the last round's multiplier: an estimate, which
        the next row's ε replaces by the round's own.
        """
        target = self.hp.dp_target_epsilon
        if target is None or self.hp.dp == "none":
            return False
        if self.accountant is None or state is None:
            return self.epsilon(rounds_done + 1) > target
        mults = getattr(state.privacy, "multipliers", None) or ()
        z = self.z if self.z > 0 else (mults[-1] if mults else None)
        if z is None:  # the channel alone, before its first round: nothing to go by
            return False
        return self.accountant.next_epsilon(mults, z) > target
