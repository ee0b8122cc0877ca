"""Channel-aware client scheduling: which K of N clients transmit in a round.

The policies wireless FL studies compare (Yang, Arafa, Quek, Poor, "Scheduling policies for
federated learning in wireless networks", IEEE TCOM 2020; proportional fair as in
cellular schedulers):

- ``uniform``: K clients uniformly at random, without replacement;
- ``best_channel``: the K highest rates R_i;
- ``proportional_fair``: the K highest R_i / R̄_i, R̄_i a client's average rate
  (:func:`update_average`, an exponential average over the rounds, counting a round in which
  the client was not scheduled as rate 0);
- ``age``: the K clients longest unscheduled (:func:`update_age`), ties to the higher rate.

Everything is batched over leading dims (rounds, cells): rates have shape (..., N) and the
result (..., K). Ties go to the lower client index, so a schedule is a pure function of
its inputs (``uniform`` of its ``rng``).

Examples
--------
>>> r = np.array([3.0, 9.0, 1.0, 5.0])
>>> schedule(r, 2, "best_channel").selected.tolist()
[1, 3]
>>> schedule(r, 2, "proportional_fair", average_bps=np.array([1.0, 9.0, 0.5, 5.0])).selected.tolist()
[0, 2]
>>> schedule(r, 2, "age", age=np.array([0, 4, 4, 1])).selected.tolist()
[1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from channels.validation import as_finite, as_float, as_int, as_mask

POLICIES = ("uniform", "best_channel", "proportional_fair", "age")


@dataclass(frozen=True)
class ScheduleResult:
    """A round's schedule.

    Attributes
    ----------
    selected : ndarray, shape (..., K), int
        The scheduled clients, highest priority first.
    mask : ndarray, shape (..., N), bool
        True for a scheduled client.
    score : ndarray, shape (..., N), float
        The priority each client had (``uniform``: its random key).
    policy : str
        The policy used.
    """

    selected: np.ndarray
    mask: np.ndarray
    score: np.ndarray
    policy: str


def _schedule_iv(rate_bps: ArrayLike, k: int, policy: str) -> tuple[np.ndarray, int]:
    if policy not in POLICIES:
        raise ValueError(f"`policy` must be one of {', '.join(POLICIES)}, got {policy!r}")
    rate = as_finite("rate_bps", rate_bps, lo=0)
    if rate.ndim < 1 or rate.shape[-1] < 1:
        raise ValueError(f"`rate_bps` must have shape (..., N) with N >= 1, got {rate.shape}")
    k = as_int("k", k, lo=1, hi=rate.shape[-1])
    return rate, k


def schedule(rate_bps: ArrayLike, k: int, policy: str = "best_channel", *,
             average_bps: ArrayLike | None = None, age: ArrayLike | None = None,
             rng: np.random.Generator | None = None) -> ScheduleResult:
    """The K clients ``policy`` schedules, given this round's rates.

    Parameters
    ----------
    rate_bps : array_like, shape (..., N), float [bit/s]
        Each client's achievable uplink rate this round (e.g. :func:`channels.tdma_rate`).
    k : int
        Clients to schedule, 1 ≤ K ≤ N.
    policy : str
        One of :data:`POLICIES`.
    average_bps : array_like, shape (..., N), float [bit/s], optional
        ``proportional_fair``: each client's average rate R̄_i (> 0).
    age : array_like, shape (..., N), int, optional
        ``age``: rounds since each client was last scheduled (≥ 0).
    rng : numpy.random.Generator, optional
        ``uniform``: the random stream.

    Returns
    -------
    ScheduleResult
    """
    rate, k = _schedule_iv(rate_bps, k, policy)
    if policy == "uniform":
        if not isinstance(rng, np.random.Generator):
            raise ValueError("policy uniform needs `rng`, a numpy.random.Generator")
        score = rng.random(rate.shape)
    elif policy == "best_channel":
        score = rate
    elif policy == "proportional_fair":
        if average_bps is None:
            raise ValueError("policy proportional_fair needs `average_bps`, each client's average rate")
        avg = as_finite("average_bps", average_bps, lo=0, lo_open=True, shape=rate.shape)
        with np.errstate(over="ignore"):
            score = rate / avg
        if not np.isfinite(score).all():
            raise ValueError("`average_bps` is so small that rate / average_bps overflows "
                             f"(smallest {avg.min():g} bit/s): give average rates in bit/s, "
                             "e.g. the rates themselves before any client has been scheduled")
    else:
        if age is None:
            raise ValueError("policy age needs `age`, the rounds since each client was scheduled")
        a = as_finite("age", age, lo=0, shape=rate.shape)
        # the oldest first; among equal ages the higher rate (rate / (1 + max rate) < 1)
        score = np.floor(a) + rate / (1.0 + rate.max(-1, keepdims=True))
    order = np.argsort(-score, axis=-1, kind="stable")[..., :k]
    mask = np.zeros(rate.shape, bool)
    np.put_along_axis(mask, order, True, axis=-1)
    return ScheduleResult(order, mask, np.asarray(score, float), policy)


def update_average(average_bps: ArrayLike, rate_bps: ArrayLike, mask: ArrayLike, *,
                   window: float = 10.0) -> np.ndarray:
    """R̄ ← (1 − 1/w) R̄ + (1/w) R·1[scheduled]: proportional fair's average [bit/s], (..., N)."""
    w = as_float("window", window, lo=1, hi=1e9)
    avg = as_finite("average_bps", average_bps, lo=0)
    rate = as_finite("rate_bps", rate_bps, lo=0, shape=avg.shape)
    return (1 - 1 / w) * avg + (1 / w) * rate * as_mask("mask", mask, avg.shape)


def update_age(age: ArrayLike, mask: ArrayLike) -> np.ndarray:
    """Rounds since last scheduled: 0 for the scheduled clients, one more for the others."""
    a = as_finite("age", age, lo=0)
    return np.where(as_mask("mask", mask, a.shape), 0, a + 1)
