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
"""

from __future__ import annotations

import functools
from typing import Any

from wirelessfl.errors import ConfigError

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


def top_up(channel_std: float, target_std: float) -> float:
    """The standard deviation of the noise that brings ``channel_std`` up to ``target_std``."""
    return float(max(0.0, target_std**2 - channel_std**2) ** 0.5)
