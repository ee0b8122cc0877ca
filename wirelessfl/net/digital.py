"""Digital uplinks that shape learning: deadline outage, channel-aware scheduling, fitted compression.

Under ``network.model: tdma`` or ``fdma`` every client of the population has a SIMO Rayleigh
channel each round, drawn for all N clients at once from the run's ``("network", t)`` stream
(t the round that ends: round 0 reads t = 1, as the clock does), so that the scheduler that
picks the round's clients, the deadline that drops them and the clock that times the round
read one channel state, and a client's channel does not depend on who else is sampled.

- **Scheduling** (``network.scheduler``): K = ``clients_per_round`` of the present clients
  by :func:`solvers.schedule` on the round's rates (``best_channel``, ``proportional_fair``
  with R̄ an exponential average over 10 rounds started at the first round's mean rate,
  ``age``). Its state (R̄, ages) is a pure function of the channels and the population, so
  it is replayed, not checkpointed: a resumed run schedules as an uninterrupted one.
- **Deadline** (``network.deadline_s``): each client uploads what its algorithm sends
  (:meth:`~wirelessfl.algorithms.base.FederatedAlgorithm.upload_vectors` d-vectors) after
  the round's computation; :func:`solvers.uplink.deadline_outage` says who finishes by T
  (``tdma``: one after another, shortest first; ``fdma``: at once on B/S) and the others are
  dropped from the aggregate, as if not sampled (their client states stay). The round lasts
  until the last arrival, or T when someone missed it. With ``network.late: next_round`` a
  client whose upload ends by 2T instead joins the next round's aggregate with its own
  round's update (stale by one round) and is not sampled in that round; the channel time its
  upload takes beyond T is not charged to the next round.
- **Compression** (``network.compression``): the model update of each client is quantised
  (stochastic b-bit) or sparsified (top-k) with RA-Fed's operator C
  (:func:`wirelessfl.net.compression.compress`), the widths fitted so its upload meets the
  deadline (:func:`solvers.uplink.fit_bit_widths`); the clock counts the compressed bits.
  Other uploaded vectors (SCAFFOLD's Δc_i, FAdamGC's Δy_i) go uncompressed.

A run whose every client meets the deadline equals the run without one exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from solvers.scheduling import schedule, update_age, update_average
from solvers.uplink import deadline_outage, fit_bit_widths
from wirelessfl.net.compression import compress
from wirelessfl.net.links import LinkModel

#: R̄'s averaging window of proportional fair [rounds].
PF_WINDOW = 10.0


@dataclass(frozen=True)
class Delivery:
    """What reached the server in a round.

    Attributes
    ----------
    arrived, dropped : tuple of int
        The clients whose uploads met the deadline, and those that did not (nor arrive late).
    seconds : float
        The round's duration [s].
    bits_per_param : tuple of float or None
        With compression, the bits per parameter each arrived client's update was sent with
        (fp32: 32; top-k counts its kept values).
    keep : tuple of float or None
        With ``topk``, the fraction of entries each arrived client sent.
    late : tuple of int
        With ``late: next_round``, the clients whose uploads join the next round.
    sent_params, delivered_params : float or None
        Per client of the round, the mean upload in fp32-parameter units (bits / 32): every
        transmitted upload at its compressed width (dropped and late ones used the channel
        too), and only those that arrived (0 for the others).
    """

    arrived: tuple[int, ...]
    dropped: tuple[int, ...]
    seconds: float
    bits_per_param: tuple[float, ...] | None = None
    keep: tuple[float, ...] | None = None
    late: tuple[int, ...] = ()
    sent_params: float | None = None
    delivered_params: float | None = None

    def logged(self) -> dict[str, Any]:
        """The fields logged in a metrics row (the round's arrivals and widths)."""
        out: dict[str, Any] = {"arrived": list(self.arrived), "dropped": list(self.dropped)}
        if self.late:
            out["late"] = list(self.late)
        if self.bits_per_param is not None:
            out["bits_per_param"] = list(self.bits_per_param)
            out["mean_bits_per_param"] = (float(np.mean(self.bits_per_param))
                                          if self.bits_per_param else float("nan"))
        if self.keep is not None:
            out["keep"] = list(self.keep)
            out["mean_keep"] = float(np.mean(self.keep)) if self.keep else float("nan")
        return out


class DigitalUplink:
    """One run's digital uplink: the round's channels, its scheduler, deadline and compression.

    Parameters
    ----------
    link : LinkModel
        The run's link (its ``cfg`` a ``tdma``/``fdma`` network; ``scale`` its
        ``params_per_vector`` scaling).
    num_clients : int
        N, the clients of the population.
    seeds : wirelessfl.rng.Seeds
        The run's streams (channels: ``network``; uniform ties: none; quantisation:
        ``compression``).
    """

    def __init__(self, link: LinkModel, num_clients: int, seeds: Any) -> None:
        self.link, self.cfg, self.n, self.seeds = link, link.cfg, int(num_clients), seeds
        self._rates: dict[int, np.ndarray] = {}
        self._sched: tuple[int, np.ndarray, np.ndarray] | None = None  # (next round, R̄, ages)

    @property
    def schedules(self) -> bool:
        """Whether the round's clients are chosen by their channels."""
        return self.cfg.scheduler != "uniform"

    def rates(self, t: int) -> np.ndarray:
        """Full-band rates of all N clients in round t (0-based), shape (N,)."""
        if t not in self._rates:
            if len(self._rates) > 4:
                self._rates.pop(min(self._rates))
            self._rates[t] = self.link.rates(self.n, self.seeds.generator("network", t + 1))
        return self._rates[t]

    # ------------------------------------------------------------------ scheduling
    def schedule(self, t: int, k: int, active: Callable[[int], np.ndarray]) -> np.ndarray:
        """The K clients of round t among ``active(t)``, by the configured policy (sorted)."""
        state = self._sched
        if state is None or state[0] > t:  # replay from the first round
            r0 = self.rates(0)
            state = (0, np.full(self.n, float(r0.mean())), np.zeros(self.n))
        tau, avg, age = state
        while True:
            available = np.asarray(active(tau), dtype=int)
            picked = np.zeros(self.n, bool)
            if len(available):
                got = schedule(self.rates(tau)[available], min(k, len(available)),
                               self.cfg.scheduler, average_bps=avg[available],
                               age=age[available])
                picked[available[got.selected]] = True
            if tau == t:
                self._sched = (tau, avg, age)
                return np.flatnonzero(picked)
            avg = update_average(avg, self.rates(tau), picked, window=PF_WINDOW)
            age = update_age(age, picked)
            tau += 1
            self._sched = (tau, avg, age)

    # ------------------------------------------------------------------ delivery
    def deliver(self, t: int, results: Sequence[Any], vectors: Sequence[float],
                num_params: int) -> tuple[list[Any], Delivery, list[Any]]:
        """Round t's arrived results (compressed), its :class:`Delivery`, and the late ones.

        The late results join the next round (``late: next_round``). ``vectors`` are the
        d-vectors each client uploads (in the order of ``results``), ``num_params`` d.
        """
        cfg, scale = self.cfg, self.link.scale
        ids = np.array([int(r.client) for r in results], dtype=int)
        if not len(ids):
            return [], Delivery((), (), 0.0), []
        rates = self.rates(t)[ids]
        compute = max(r.num_steps for r in results) * cfg.step_seconds
        d = num_params * scale
        payload = np.asarray(vectors, float) * d * cfg.bits_per_param
        widths = None
        if cfg.compression != "none":
            n_tensors = len(results[0].delta)
            widths = fit_bit_widths(rates, max(1, round(d)), cfg.deadline_s,
                                    operator=cfg.compression, access=cfg.model,
                                    compute_s=compute, full_bits=cfg.bits_per_param,
                                    max_bits=min(cfg.max_bits, cfg.bits_per_param),
                                    other_bits=payload - d * cfg.bits_per_param,
                                    num_tensors=n_tensors)
            payload = widths.payload_bits
        out = deadline_outage(rates, payload, cfg.deadline_s, access=cfg.model, compute_s=compute)
        arrived = out.arrived if widths is None else out.arrived & widths.fits
        late = ~arrived & (out.finish_s <= 2 * cfg.deadline_s) if cfg.late == "next_round" \
            else np.zeros_like(arrived)
        if widths is not None:
            late &= widths.fits
        kept = [self._compressed(t, r, widths, i) if widths is not None else r
                for i, r in enumerate(results) if arrived[i]]
        later = [self._compressed(t, r, widths, i) if widths is not None else r
                 for i, r in enumerate(results) if late[i]]
        delivery = Delivery(
            tuple(int(c) for c in ids[arrived]), tuple(int(c) for c in ids[~arrived & ~late]),
            float(out.seconds),
            None if widths is None else tuple(float(b) for b in widths.bits[arrived]),
            None if widths is None or cfg.compression != "topk"
            else tuple(float(k) for k in widths.keep[arrived]),
            tuple(int(c) for c in ids[late]),
            float(np.mean(payload)) / cfg.bits_per_param / scale,
            float(np.mean(np.where(arrived, payload, 0.0))) / cfg.bits_per_param / scale)
        return kept, delivery, later

    def _compressed(self, t: int, result: Any, widths: Any, i: int) -> Any:
        """``result`` with its update C(Δ) at client i's fitted width (as is when fp32 fits)."""
        if widths.bits[i] >= self.cfg.bits_per_param and widths.keep[i] >= 1:
            return result
        gen = torch.Generator().manual_seed(self.seeds.int_seed("compression", t, int(result.client)))
        delta = compress(result.delta, self.cfg.compression, bits=int(widths.bits[i]),
                         keep=float(widths.keep[i]), gen=gen)
        return replace(result, delta=delta)
