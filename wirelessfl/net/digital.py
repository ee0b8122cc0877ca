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
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import torch
from typing_extensions import override

from channels.rates import SYMBOL_S
from channels.units import db_to_lin
from channels.validation import as_float, as_int
from solvers.scheduling import POLICIES, schedule, update_age, update_average
from solvers.uplink import DeadlineResult, deadline_outage, fit_bit_widths
from wirelessfl.net.compression import compress
from wirelessfl.net.links import NEVER, SHAPES_LEARNING, ChannelLink, ChannelSettings, RoundCost

#: R̄'s averaging window of proportional fair [rounds].
PF_WINDOW = 10.0
COMPRESSIONS = ("none", "quantize", "topk")
LATE = ("drop", "next_round")


@dataclass(frozen=True)
class ShapingSettings:
    """How a digital uplink shapes learning: deadline, scheduler, compression, late uploads.

    The settings every digital link has beside its radio's (``tdma`` and ``fdma``:
    :class:`DigitalSettings`; ``nr``: :class:`~wirelessfl.net.nr.NRSettings`).

    Attributes
    ----------
    deadline_s : float or None
        The round deadline T [s] from the round's start (computation included); a client
        whose upload ends later is dropped from the round's aggregate (None: no deadline)
        [default None].
    scheduler : str
        Who of the present clients transmits, K = ``algorithm.hparams.clients_per_round`` of
        them: ``uniform`` (the algorithm's own sampler), ``best_channel``,
        ``proportional_fair`` or ``age`` (:func:`solvers.schedule`, reading the round's
        channels) [default uniform].
    compression : str
        With ``deadline_s``: ``quantize`` (stochastic b-bit quantisation) or ``topk`` of each
        client's model update, fitted per client so its upload meets the deadline in its
        equal share of the link (:func:`solvers.uplink.fit_bit_widths`); ``none`` sends fp32
        [default none].
    max_bits : int
        The most bits per entry of fitted quantisation (16; fp32 when the whole vector fits).
    late : str
        With ``deadline_s``: ``drop`` a client that misses the deadline, or let it arrive
        ``next_round`` when its upload ends by 2T (it joins the next round's aggregate with
        the update of its own round and is not sampled meanwhile; later ones are dropped)
        [default drop].
    """

    deadline_s: float | None = field(default=None, metadata=SHAPES_LEARNING)
    scheduler: str = field(default="uniform", metadata=SHAPES_LEARNING)
    compression: str = field(default="none", metadata=SHAPES_LEARNING)
    max_bits: int = field(default=16, metadata=SHAPES_LEARNING)
    late: str = field(default="drop", metadata=SHAPES_LEARNING)

    def __post_init__(self) -> None:
        radio = getattr(super(), "__post_init__", None)
        if radio is not None:  # the radio's own checks first (its settings' class)
            radio()
        if self.deadline_s is not None:
            as_float("deadline_s", self.deadline_s, lo=0, hi=1e12, lo_open=True)
        if self.scheduler not in POLICIES:
            raise ValueError(f"`scheduler` must be one of {', '.join(POLICIES)}, got "
                             f"{self.scheduler!r}")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"`compression` must be one of {', '.join(COMPRESSIONS)}, got "
                             f"{self.compression!r}")
        as_int("max_bits", self.max_bits, lo=1, hi=24)
        if self.late not in LATE:
            raise ValueError(f"`late` must be one of {', '.join(LATE)}, got {self.late!r}")
        if (self.compression != "none" or self.max_bits != 16) and self.deadline_s is None:
            raise ValueError("`compression` is fitted to the deadline: set deadline_s too")
        if self.late != "drop" and self.deadline_s is None:
            raise ValueError("`late` says what happens to uploads that miss the deadline: set "
                             "deadline_s too")
        if self.late != "drop" and self.scheduler != "uniform":
            raise ValueError("`late: next_round` keeps late clients busy in the next round, "
                             "which the channel-aware schedulers do not model: use scheduler "
                             "uniform with it")
        if self.max_bits != 16 and self.compression != "quantize":
            raise ValueError("`max_bits` is the most bits of quantize compression: set "
                             "compression: quantize with it, or remove it")


@dataclass(frozen=True)
class DigitalSettings(ShapingSettings, ChannelSettings):
    """Settings of a digital uplink (``tdma``, ``fdma``): its channels and how it shapes learning.

    Attributes
    ----------
    snr_db, antennas, bandwidth_hz
        The channels (:class:`~wirelessfl.net.links.ChannelSettings`).
    deadline_s, scheduler, compression, max_bits, late
        How it shapes learning (:class:`ShapingSettings`).
    """


class DigitalLink(ChannelLink):
    """A digital uplink over drawn channels: TDMA or FDMA access (``access``).

    The round takes max_i steps_i·``step_seconds`` plus the uploads of
    :func:`solvers.uplink.deadline_outage` (``tdma``: one after another, shortest first;
    ``fdma``: at once on B/S). With ``deadline_s``, ``scheduler`` or ``compression`` it
    decides who arrives (:meth:`digital_uplink`).
    """

    Settings: ClassVar[type] = DigitalSettings
    #: ``tdma`` or ``fdma``.
    access: ClassVar[str] = "tdma"

    @override
    def seconds(self, cost: RoundCost, rng: np.random.Generator) -> float:
        compute = cost.max_steps * self.cfg.step_seconds  # the slowest client's compute
        up = cost.uplink * self.cfg.bits_per_param
        if cost.ids is None:  # rows written before ids: the channels of an S-client draw
            channels, ids = self.channels(cost.clients, rng), np.arange(cost.clients)
        else:
            channels, ids = self.channels(cost.population, rng), np.asarray(cost.ids, int)
        return float(channels.uplink(ids, np.full(len(ids), up), None, compute).seconds)

    def channels(self, n: int, rng: np.random.Generator) -> RoundChannels:
        """The round's channels of n clients (their rates alone, and how they share the link)."""
        return RoundChannels(self.rates(n, rng), self.access)

    @override
    def digital_uplink(self, num_clients: int, seeds: Any) -> DigitalUplink | None:
        return DigitalUplink(self, num_clients, seeds) if self.shaping() else None

    @override
    def check_reachable(self, steps: int, num_clients: int, rounds: int) -> None:
        """Refuse a deadline no client meets, or an ``snr_db`` whose rates round to 0 bit/s.

        The deadline is missed by computing alone, or leaves less than one symbol to upload;
        at such an SNR no upload would ever end.
        """
        self.check_deadline(steps)
        s = self.settings
        from scipy.stats import gamma

        strong = gamma.isf(NEVER, a=s.antennas)  # ‖h‖² of Rayleigh over M antennas, its tail
        with np.errstate(over="ignore"):
            best = s.bandwidth_hz * np.log2(1.0 + db_to_lin(s.snr_db) * strong)
        if not best > 0:
            raise ValueError(f"network.snr_db = {s.snr_db:g} dB is so low that every "
                             f"{self.access} rate rounds to 0 bit/s (log2(1 + SNR |h|^2) "
                             "underflows): no upload would ever end; raise snr_db")

    def check_deadline(self, steps: int) -> None:
        """Refuse a deadline that computing alone misses or that leaves no symbol to upload."""
        s, step_s = self.settings, self.cfg.step_seconds
        if s.deadline_s is not None:
            compute = steps * step_s
            if compute >= s.deadline_s:
                raise ValueError(f"network.deadline_s = {s.deadline_s:g} s is met by no client: "
                                 f"{steps} local steps x step_seconds {step_s:g} s = "
                                 f"{compute:g} s of computing alone; raise deadline_s or lower "
                                 "step_seconds")
            if s.deadline_s - compute < SYMBOL_S:
                raise ValueError(f"network.deadline_s = {s.deadline_s:g} s leaves less than one "
                                 f"symbol ({SYMBOL_S:.3g} s) to upload after computing: no "
                                 "upload can arrive; raise deadline_s")


@dataclass(frozen=True)
class Upload(DeadlineResult):
    """A round's uploads: who met the deadline, when each ended, and who was in outage.

    Attributes
    ----------
    outage : ndarray, shape (S,), bool
        Clients whose upload failed on the radio (``nr``: not associated, or a block lost
        after every HARQ and RLC transmission); they are never ``arrived``.
    radio : dict or None
        Per-client radio diagnostics of the round (``nr``), in the clients' order.
    """

    outage: np.ndarray | None = None
    radio: dict[str, Any] | None = None


@dataclass(frozen=True)
class RoundChannels:
    """One round's channels: each client's rate alone, and how the round's uploads share the link.

    Attributes
    ----------
    rates : ndarray, shape (N,), [bit/s]
        Each client's rate when it has the link alone (what the schedulers read).
    access : str
        How the uploads share it (:func:`solvers.uplink.deadline_outage`'s ``access``).
    """

    rates: np.ndarray
    access: str

    def uplink(self, ids: np.ndarray, payload_bits: np.ndarray, deadline_s: float | None,
               compute_s: float) -> Upload:
        """Who of clients ``ids`` uploading ``payload_bits`` meets the deadline, and when."""
        out = deadline_outage(self.rates[ids], payload_bits, deadline_s, access=self.access,
                              compute_s=compute_s)
        return Upload(out.arrived, out.finish_s, out.seconds, out.access)

    def fit_rates(self, ids: np.ndarray) -> np.ndarray:
        """Rates R_i whose equal share R_i (T − c)/S is each client's budget for fitting widths."""
        return self.rates[ids]

    @property
    def fit_access(self) -> str:
        """The access :func:`solvers.uplink.fit_bit_widths` is told (its equal share)."""
        return self.access


@dataclass(frozen=True)
class Delivery:
    """What reached the server in a round.

    Attributes
    ----------
    arrived, dropped : tuple of int
        The clients whose uploads met the deadline, and those that did not (nor arrive late;
        the clients in outage among them).
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
    outage : tuple of int
        The clients whose upload failed on the radio (``nr``'s HARQ/RLC limits, association).
    radio : dict or None
        ``nr``: the round's per-client radio diagnostics (:meth:`wirelessfl.net.nr.NRRound.uplink`).
    """

    arrived: tuple[int, ...]
    dropped: tuple[int, ...]
    seconds: float
    bits_per_param: tuple[float, ...] | None = None
    keep: tuple[float, ...] | None = None
    late: tuple[int, ...] = ()
    sent_params: float | None = None
    delivered_params: float | None = None
    outage: tuple[int, ...] = ()
    radio: dict[str, Any] | None = None

    def logged(self) -> dict[str, Any]:
        """The fields logged in a metrics row (the round's arrivals, widths and radio)."""
        out: dict[str, Any] = {"arrived": list(self.arrived), "dropped": list(self.dropped)}
        if self.late:
            out["late"] = list(self.late)
        if self.radio is not None:
            out["outage"] = list(self.outage)
            out["radio"] = self.radio
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
    link : DigitalLink
        The run's link (its ``settings`` the deadline, scheduler and compression; ``scale``
        its ``params_per_vector`` scaling).
    num_clients : int
        N, the clients of the population.
    seeds : wirelessfl.rng.Seeds
        The run's streams (channels: ``network``; uniform ties: none; quantisation:
        ``compression``).
    """

    def __init__(self, link: DigitalLink, num_clients: int, seeds: Any) -> None:
        self.link, self.cfg, self.n, self.seeds = link, link.settings, int(num_clients), seeds
        self._channels: dict[int, RoundChannels] = {}
        self._sched: tuple[int, np.ndarray, np.ndarray] | None = None  # (next round, R̄, ages)

    @property
    def schedules(self) -> bool:
        """Whether the round's clients are chosen by their channels."""
        return self.cfg.scheduler != "uniform"

    @property
    def takes_late(self) -> bool:
        """Whether a late upload joins the next round (``late: next_round``)."""
        return self.cfg.late != "drop"

    def channels(self, t: int) -> RoundChannels:
        """Round t's (0-based) channels of all N clients."""
        if t not in self._channels:
            if len(self._channels) > 4:
                self._channels.pop(min(self._channels))
            self._channels[t] = self.link.channels(self.n, self.seeds.generator("network", t + 1))
        return self._channels[t]

    def rates(self, t: int) -> np.ndarray:
        """Rates alone of all N clients in round t (0-based), shape (N,)."""
        return self.channels(t).rates

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
        cfg, net, scale = self.cfg, self.link.cfg, self.link.scale
        ids = np.array([int(r.client) for r in results], dtype=int)
        if not len(ids):
            return [], Delivery((), (), 0.0), []
        channels = self.channels(t)
        compute = max(r.num_steps for r in results) * net.step_seconds
        d = num_params * scale
        payload = np.asarray(vectors, float) * d * net.bits_per_param
        widths = None
        if cfg.compression != "none":
            n_tensors = len(results[0].delta)
            widths = fit_bit_widths(channels.fit_rates(ids), max(1, round(d)), cfg.deadline_s,
                                    operator=cfg.compression, access=channels.fit_access,
                                    compute_s=compute, full_bits=net.bits_per_param,
                                    max_bits=min(cfg.max_bits, net.bits_per_param),
                                    other_bits=payload - d * net.bits_per_param,
                                    num_tensors=n_tensors)
            payload = widths.payload_bits
        out = channels.uplink(ids, payload, cfg.deadline_s, compute)
        lost = np.zeros(len(ids), bool) if out.outage is None else out.outage
        arrived = out.arrived if widths is None else out.arrived & widths.fits
        late = ~arrived & ~lost & (out.finish_s <= 2 * cfg.deadline_s) \
            if cfg.late == "next_round" else np.zeros_like(arrived)
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
            float(np.mean(payload)) / net.bits_per_param / scale,
            float(np.mean(np.where(arrived, payload, 0.0))) / net.bits_per_param / scale,
            tuple(int(c) for c in ids[lost]), out.radio)
        return kept, delivery, later

    def _compressed(self, t: int, result: Any, widths: Any, i: int) -> Any:
        """``result`` with its update C(Δ) at client i's fitted width (as is when fp32 fits)."""
        if widths.bits[i] >= self.link.cfg.bits_per_param and widths.keep[i] >= 1:
            return result
        gen = torch.Generator().manual_seed(self.seeds.int_seed("compression", t, int(result.client)))
        delta = compress(result.delta, self.cfg.compression, bits=int(widths.bits[i]),
                         keep=float(widths.keep[i]), gen=gen)
        return replace(result, delta=delta)
