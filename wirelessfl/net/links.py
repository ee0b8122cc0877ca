"""Network cost: a round's payloads and local steps turned into simulated time.

Every round-based algorithm reports what its clients moved and computed
(:class:`~wirelessfl.algorithms.base.RoundReport`: ``uplink_params`` and
``downlink_params`` per client, each client's ``steps``); a :class:`LinkModel` turns that
into the round's duration, so any algorithm runs under any link model
(``--set network.model=...``). Algorithms that model their own time exactly (HIST's (18)
and (35)) report ``latency_s`` themselves and are not re-timed.

Models (``network.model``):

- ``none`` (default): no simulated time;
- ``fixed``: independent links of ``rate_mbps`` per client in both directions (FAdamGC's
  100 Mbps, ``docs/papers/fadamgc.md`` §4.6); a client takes down/R + steps·``step_seconds`` + up/R and
  the round lasts as long as its slowest client;
- ``tdma``: HIST's OMA uplink (``docs/papers/hist.md`` §4.1, §6.4): SIMO Rayleigh channels drawn
  each round, R_i = B log2(1 + SNR ‖h_i‖²), the clients upload one after another; the round
  takes max_i steps_i·``step_seconds`` + Σ_i up/R_i;
- ``fdma``: the band split equally among the round's S clients, all uploading at once at
  the same SNR (rate R_i/S, as RA-Fed's FDMA); the round takes max_i steps_i·``step_seconds``
  + max_i S·up/R_i;
- ``aircomp``: HIST's over-the-air uplink, eq. (34): max_i steps_i·``step_seconds`` +
  d t_s Δf / B, whatever the number of clients.

Under ``tdma`` and ``fdma`` every client of the population has a channel each round, drawn
from the ``("network", t)`` stream for all N clients at once (a client's channel does not
depend on who else is sampled), so channel-aware schedulers, deadlines and the clock read
one channel state (:mod:`wirelessfl.net.digital`). With ``deadline_s``, ``scheduler`` or
``compression`` the link changes what is learned, not only the clock: clients that miss the
deadline are dropped from the round's aggregate (:mod:`solvers.uplink`).

As in HIST, downlinks are free under ``tdma`` and ``aircomp`` (the server broadcasts);
payloads are ``bits_per_param`` bits per parameter (fp32).

Calibration to FAdamGC's Table 2 (§4.6, §5.4): one fp32 d-vector of the CIFAR ResNet-18
(d = 11,173,962) takes 3.58 s at 100 Mbit/s, so 2 / 3 / 3.5 / 5 vectors per round give
7.15 / 10.73 / 12.52 / 17.88 s against the implied 7.2 / 10.8 / 12.6 / 17.4 s (the paper's
SCAFFOLD-M figure is below its own 5-vector count; we keep the count, §7 item 11).
``params_per_vector`` times a smaller stand-in model as if each of its vectors had that many
parameters (e.g. the ResNet-18's d for a quick Fashion-MNIST run), so its minutes are
comparable with the paper's; the default is the model's own d.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from channels.rates import BANDWIDTH_HZ, SUBCARRIER_HZ, SYMBOL_S, tdma_rate
from channels.rayleigh import simo_rayleigh
from channels.units import db_to_lin
from channels.validation import as_float, as_int
from solvers.uplink import deadline_outage

LINK_MODELS = ("none", "fixed", "tdma", "fdma", "aircomp")
AGGREGATIONS = ("exact", "over_the_air")
DIGITAL = ("tdma", "fdma")
COMPRESSIONS = ("none", "quantize", "topk")
LATE = ("drop", "next_round")
#: Settings that change what a run learns, not only its clock (re-timing refuses them).
LEARNING_KEYS = ("aggregation", "beamforming", "truncation_db", "normalise", "deadline_s",
                 "scheduler", "compression", "max_bits", "late")


@dataclass(frozen=True)
class NetworkConfig:
    """The ``network`` section of a run.

    Attributes
    ----------
    model : str
        One of :data:`LINK_MODELS`.
    rate_mbps : float
        Per-client link rate of ``fixed`` [Mbit/s] (100, ``docs/papers/fadamgc.md`` §4.6).
    step_seconds : float
        Time of one local step [s] (0: communication only).
    bits_per_param : int
        Bits per parameter (32: fp32).
    snr_db : float
        Transmit SNR of ``tdma`` [dB] (30, ``docs/papers/hist.md`` §6.4).
    antennas : int
        Receive antennas M of ``tdma`` (maximum-ratio reception).
    bandwidth_hz : float
        Band B of ``tdma`` and ``aircomp`` [Hz] (9 MHz).
    params_per_vector : int or None
        Parameters one exchanged d-vector counts as (None: the model's d).
    aggregation : str
        ``exact`` (the link changes the clock only) or ``over_the_air`` (with ``model:
        aircomp``: every vector the clients upload is aggregated over drawn SIMO channels
        at ``snr_db`` with ``antennas``, :class:`~wirelessfl.server.aggregation.AirComp`).
        Deviation, stated: the issue asks for over-the-air learning under ``aircomp``
        itself; it is opt-in [default ``exact``] so that runs made before keep their numbers.
    beamforming : str
        Receive beamformer of ``over_the_air`` (``fast``, ``sca``, ``certified``, ...).
    truncation_db : float or None
        ``over_the_air``: clients whose average channel gain ‖h‖²/M is below this [dB]
        stay silent (truncated channel inversion; None: none).
    normalise : bool
        ``over_the_air``: one common scale makes every transmitted symbol of power ≤ 1 (the
        literature's transmit normalisation [default true]; false sends gradient-valued
        symbols as HIST does, whose noise accumulates in SCAFFOLD's c and FAdamGC's y).
    deadline_s : float or None
        ``tdma``/``fdma``: the round deadline T [s] from the round's start (computation
        included); a client whose upload ends later is dropped from the round's aggregate
        (None: no deadline) [default None].
    scheduler : str
        ``tdma``/``fdma``: who of the present clients transmits, K =
        ``algorithm.hparams.clients_per_round`` of them: ``uniform`` (the algorithm's own
        sampler), ``best_channel``, ``proportional_fair`` or ``age``
        (:func:`solvers.schedule`, reading the round's channels) [default uniform].
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

    model: str = "none"
    rate_mbps: float = 100.0
    step_seconds: float = 0.0
    bits_per_param: int = 32
    snr_db: float = 30.0
    antennas: int = 10
    bandwidth_hz: float = BANDWIDTH_HZ
    params_per_vector: int | None = None
    aggregation: str = "exact"
    beamforming: str = "fast"
    truncation_db: float | None = None
    normalise: bool = True
    deadline_s: float | None = None
    scheduler: str = "uniform"
    compression: str = "none"
    max_bits: int = 16
    late: str = "drop"

    def __post_init__(self) -> None:
        from solvers.beamforming import METHODS
        from solvers.scheduling import POLICIES

        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"`aggregation` must be one of {', '.join(AGGREGATIONS)}, got "
                             f"{self.aggregation!r}")
        if self.aggregation == "over_the_air" and self.model != "aircomp":
            raise ValueError("`aggregation` over_the_air needs model: aircomp (the clients "
                             "transmit at once over the air)")
        if self.beamforming not in METHODS:
            raise ValueError(f"`beamforming` must be one of {', '.join(METHODS)}, got "
                             f"{self.beamforming!r}")
        if self.truncation_db is not None:
            as_float("truncation_db", self.truncation_db, lo=-200, hi=200)
        inert = [k for k, v, d in (("beamforming", self.beamforming, "fast"),
                                   ("truncation_db", self.truncation_db, None),
                                   ("normalise", self.normalise, True)) if v != d]
        if inert and self.aggregation != "over_the_air":
            raise ValueError(f"`{inert[0]}` is a setting of over-the-air aggregation: add "
                             "aggregation: over_the_air (with model: aircomp) or remove it")
        if self.model not in LINK_MODELS:
            raise ValueError(f"`model` must be one of {', '.join(LINK_MODELS)}, got {self.model!r}")
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
        digital = [k for k, v, d in (("deadline_s", self.deadline_s, None),
                                     ("scheduler", self.scheduler, "uniform"),
                                     ("compression", self.compression, "none"),
                                     ("max_bits", self.max_bits, 16),
                                     ("late", self.late, "drop")) if v != d]
        if digital and self.model not in DIGITAL:
            raise ValueError(f"`{digital[0]}` is a setting of digital links: use it with model: "
                             "tdma or fdma")
        if (self.compression != "none" or self.max_bits != 16) and self.deadline_s is None:
            raise ValueError("`compression` is fitted to the deadline: set deadline_s too")
        if self.late != "drop" and self.deadline_s is None:
            raise ValueError("`late` says what happens to uploads that miss the deadline: set "
                             "deadline_s too")
        if self.late != "drop" and self.scheduler != "uniform":
            raise ValueError("`late: next_round` keeps late clients busy in the next round, "
                             "which the channel-aware schedulers do not model: use scheduler "
                             "uniform with it")
        as_float("rate_mbps", self.rate_mbps, lo=0, hi=1e9, lo_open=True)
        as_float("step_seconds", self.step_seconds, lo=0, hi=1e6)
        as_int("bits_per_param", self.bits_per_param, lo=1, hi=64)
        as_float("snr_db", self.snr_db, lo=-200, hi=200)
        as_int("antennas", self.antennas, lo=1, hi=4096)
        as_float("bandwidth_hz", self.bandwidth_hz, lo=0, hi=1e12, lo_open=True)
        if self.params_per_vector is not None:
            as_int("params_per_vector", self.params_per_vector, lo=1, hi=10**13)
        if self.max_bits != 16 and self.compression != "quantize":
            raise ValueError("`max_bits` is the most bits of quantize compression: set "
                             "compression: quantize with it, or remove it")
        if self.rate_mbps != 100.0 and self.model not in ("fixed", "none"):
            raise ValueError(f"`rate_mbps` is the link rate of model fixed; model {self.model} "
                             "draws its rates from the channel (snr_db, antennas, bandwidth_hz): "
                             "remove rate_mbps or use model: fixed")


@dataclass(frozen=True)
class RoundCost:
    """What a link model needs of one round: enough to time it again under another model.

    Payloads are per participating client, in parameters as timed (already scaled by
    ``params_per_vector``); ``max_steps`` the most local steps any client took; ``clients``
    how many took part; ``ids`` which (sorted) and ``population`` N, so ``tdma``/``fdma``
    read each client's own channel of the round's N (None in rows written before: the
    channels of an S-client draw, as those runs were timed).
    """

    uplink: float
    downlink: float
    max_steps: float
    clients: int
    population: int | None = None
    ids: tuple[int, ...] | None = None

    @classmethod
    def from_report(cls, report: Any, scale: float = 1.0,
                    population: int | None = None) -> RoundCost:
        """The cost of a :class:`~wirelessfl.algorithms.base.RoundReport` (payloads × scale)."""
        steps = [float(c.get("steps", 0)) for c in report.clients.values()] or [0.0]
        up = report.uplink_params
        down = up if report.downlink_params is None else report.downlink_params
        ids = tuple(sorted(int(c) for c in report.clients))
        known = population is not None and ids and ids[-1] < population
        return cls(float(up) * scale, float(down) * scale, max(steps), len(steps),
                   population if known else None, ids if known else None)

    def as_list(self) -> list[Any]:
        """``[uplink, downlink, max_steps, clients(, N, ids)]``, as logged in metrics rows."""
        head = [self.uplink, self.downlink, self.max_steps, self.clients]
        return head if self.ids is None else [*head, self.population, list(self.ids)]

    @classmethod
    def from_list(cls, values: Any) -> RoundCost:
        """The inverse of :meth:`as_list` (checked: a damaged row raises ValueError)."""
        if not isinstance(values, (list, tuple)) or len(values) not in (4, 6):
            raise ValueError(f"a round cost is [uplink, downlink, max_steps, clients(, N, "
                             f"ids)], got {str(values)[:60]}")
        up = as_float("uplink", values[0], lo=0, hi=1e15)
        down = as_float("downlink", values[1], lo=0, hi=1e15)
        steps = as_float("max_steps", values[2], lo=0, hi=1e12)
        clients = as_int("clients", values[3], lo=1, hi=10**9)
        if len(values) == 4:
            return cls(up, down, steps, clients)
        n = as_int("population", values[4], lo=1, hi=10**9)
        ids = values[5]
        if (not isinstance(ids, (list, tuple)) or len(ids) != clients
                or not all(isinstance(i, int) and 0 <= i < n for i in ids)):
            raise ValueError(f"a round cost's ids must be {clients} client ids below {n}, got "
                             f"{str(ids)[:60]}")
        return cls(up, down, steps, clients, n, tuple(ids))


class LinkModel:
    """Round duration from a round's report under one :class:`NetworkConfig`."""

    def __init__(self, cfg: NetworkConfig, num_params: int | None = None,
                 num_clients: int | None = None) -> None:
        self.cfg = cfg
        self.scale = (1.0 if cfg.params_per_vector is None or not num_params
                      else cfg.params_per_vector / num_params)
        self.num_clients = num_clients

    def cost(self, report: Any) -> RoundCost:
        """The round's :class:`RoundCost` with this model's ``params_per_vector`` scaling."""
        return RoundCost.from_report(report, self.scale, self.num_clients)

    def rates(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Full-band rates R_i = B log2(1 + SNR ‖h_i‖²) of n clients' drawn channels, (n,)."""
        cfg = self.cfg
        h = simo_rayleigh((), n, cfg.antennas, rng)
        return tdma_rate(h, db_to_lin(cfg.snr_db), cfg.bandwidth_hz)

    def round_seconds(self, report: Any, rng: np.random.Generator) -> float | None:
        """Seconds of the round ``report`` describes (None for ``none``)."""
        return self.seconds(self.cost(report), rng)

    def seconds(self, cost: RoundCost, rng: np.random.Generator) -> float | None:
        """Seconds of a round of cost ``cost`` (None for ``none``)."""
        cfg = self.cfg
        if cfg.model == "none":
            return None
        compute = cost.max_steps * cfg.step_seconds  # the slowest client's compute
        up = cost.uplink * cfg.bits_per_param
        down = cost.downlink * cfg.bits_per_param
        if cfg.model == "fixed":  # every client has the same payloads and its own link
            rate = cfg.rate_mbps * 1e6
            return float(down / rate + compute + up / rate)
        if cfg.model in DIGITAL:
            rates = (self.rates(cost.clients, rng) if cost.ids is None
                     else self.rates(cost.population, rng)[list(cost.ids)])
            return float(deadline_outage(rates, up, None, access=cfg.model,
                                         compute_s=compute).seconds)
        # aircomp, eq. (34): one symbol per uploaded entry, all clients at once
        return float(compute + cost.uplink * SYMBOL_S * SUBCARRIER_HZ / cfg.bandwidth_hz)


def retime(rows: list[dict[str, Any]], link: LinkModel, seeds: Any) -> list[float | None]:
    """Simulated time at each metrics row of a finished run, under another link model.

    ``rows`` are a round-based run's metrics rows, each with the ``round_costs`` of the
    rounds since the previous row (payloads as the run timed them: its ``params_per_vector``
    stays); ``seeds`` the run's :class:`~wirelessfl.rng.Seeds`; ``link`` the new model. Round
    t draws its channels from the same ``("network", t)`` stream a live run uses, so a run
    re-timed under a link model reports exactly the times a run trained under it would
    (training never reads the link's streams).
    """
    if link.cfg.model == "none":
        return [None] * len(rows)
    total, out, total_rounds = 0.0, [], 0
    for row in rows:
        costs = row.get("round_costs")
        if row["round"] > 0 and not isinstance(costs, list):
            raise ValueError(f"row of round {row['round']} has no round_costs: the run predates "
                             "per-round costs; train it again to re-time it")
        first = row["round"] - len(costs or [])
        if first < 0 or first < total_rounds:
            raise ValueError(f"row of round {row['round']} claims {len(costs or [])} round costs, "
                             "more than the rounds since the previous row: the run folder is "
                             "damaged")
        total_rounds = row["round"]
        for i, values in enumerate(costs or []):
            seconds = link.seconds(RoundCost.from_list(values),
                                   seeds.generator("network", first + i + 1))
            total += seconds
        out.append(total)
    return out


#: A run is refused when the chance that any client ever clears the truncation threshold
#: over the whole run is below this.
NEVER = 1e-9


def check_reachable(cfg: NetworkConfig, steps: int, num_clients: int, rounds: int) -> None:
    """Refuse (ValueError, one line) a link under which no upload can ever be aggregated.

    - A deadline (``deadline_s``) that the fewest local ``steps`` of any client already miss
      at ``step_seconds`` each, or that leaves less than one symbol (t_s) to upload: every
      client is dropped every round.
    - Under ``tdma``/``fdma``, an ``snr_db`` so low that every rate rounds to 0 bit/s (the
      round time would be infinite, and ``sim_time_s`` null).
    - Over the air, a ``truncation_db`` no client's average channel gain ‖h‖²/M reaches: the
      gain of a unit Rayleigh channel over M antennas is Gamma(M, 1/M), so the chance that
      any of ``num_clients`` clients clears it in any of ``rounds`` rounds is at most
      N T P(Gamma(M, 1/M) ≥ g); below :data:`NEVER` every client stays silent.

    Such runs used to train nothing and report the initial model's accuracy without a word.
    """
    if cfg.deadline_s is not None:
        compute = steps * cfg.step_seconds
        if compute >= cfg.deadline_s:
            raise ValueError(f"network.deadline_s = {cfg.deadline_s:g} s is met by no client: "
                             f"{steps} local steps x step_seconds {cfg.step_seconds:g} s = "
                             f"{compute:g} s of computing alone; raise deadline_s or lower "
                             "step_seconds")
        if cfg.deadline_s - compute < SYMBOL_S:
            raise ValueError(f"network.deadline_s = {cfg.deadline_s:g} s leaves less than one "
                             f"symbol ({SYMBOL_S:.3g} s) to upload after computing: no upload "
                             "can arrive; raise deadline_s")
    if cfg.model in DIGITAL:  # a rate that rounds to 0 bit/s: no upload ever ends
        from scipy.stats import gamma

        strong = gamma.isf(NEVER, a=cfg.antennas)  # ‖h‖² of Rayleigh over M antennas, its tail
        with np.errstate(over="ignore"):
            best = cfg.bandwidth_hz * np.log2(1.0 + db_to_lin(cfg.snr_db) * strong)
        if not best > 0:
            raise ValueError(f"network.snr_db = {cfg.snr_db:g} dB is so low that every {cfg.model} "
                             "rate rounds to 0 bit/s (log2(1 + SNR |h|^2) underflows): no upload "
                             "would ever end; raise snr_db")
    if cfg.aggregation == "over_the_air" and cfg.truncation_db is not None:
        from scipy.stats import gamma

        m = cfg.antennas
        p = gamma.sf(db_to_lin(cfg.truncation_db), a=m, scale=1.0 / m)
        if p * num_clients * rounds < NEVER:
            raise ValueError(f"network.truncation_db = {cfg.truncation_db:g} dB silences every "
                             f"client: the average gain of a Rayleigh channel over {m} antennas "
                             f"exceeds it with probability {p:.2g}, so no client would transmit "
                             f"in {rounds} rounds; lower truncation_db")

