"""Network cost: the link models, one seam: a round's payloads and local steps turned into time.

Every round-based algorithm reports what its clients moved and computed
(:class:`~wirelessfl.algorithms.base.RoundReport`: ``uplink_params`` and
``downlink_params`` per client, each client's ``steps``); a :class:`LinkModel` turns that
into the round's duration, so any algorithm runs under any link model
(``--set network.model=...``). Algorithms that model their own time exactly (HIST's (18)
and (35)) report ``latency_s`` themselves and are not re-timed.

A link model is one class behind :class:`LinkModel`, in a module of its own, registered by
name in :data:`LINK_MODELS` (or by :func:`register_link` from a user's code). It declares
its own settings as a frozen dataclass (``Settings``: fields, defaults and checks), which
a config's ``network`` section sets beside the common fields of :class:`NetworkConfig`;
fields whose metadata says ``shapes_learning`` change what a run learns, not only its clock
(re-timing refuses them, and a run under them needs an algorithm that takes such a link).
The models (``network.model``):

- ``none`` (default, :mod:`~wirelessfl.net.nolink`): no simulated time;
- ``fixed`` (:mod:`~wirelessfl.net.fixed`): independent links of ``rate_mbps`` per client in
  both directions (FAdamGC's 100 Mbps, ``docs/papers/fadamgc.md`` §4.6);
- ``tdma`` (:mod:`~wirelessfl.net.tdma`): HIST's OMA uplink (``docs/papers/hist.md`` §4.1,
  §6.4) over SIMO Rayleigh channels drawn each round, the clients one after another;
- ``fdma`` (:mod:`~wirelessfl.net.fdma`): the band split equally among the round's clients,
  all uploading at once (RA-Fed's FDMA);
- ``aircomp`` (:mod:`~wirelessfl.net.aircomp`): HIST's over-the-air uplink, eq. (34), and
  with ``aggregation: over_the_air`` its noisy aggregate (eqs. (21)–(28));
- ``shadowed`` (:mod:`~wirelessfl.net.shadowed`): ``fixed`` links whose rates carry
  log-normal shadowing, drawn per client and round;
- ``nr`` (:mod:`~wirelessfl.net.nr`): a 5G NR uplink with Sionna's radio: TR 38.901 cells,
  TS 38.213 power control, link adaptation and PUSCH BLER tables (the ``[nr]`` extra).

Digital links (``tdma``, ``fdma``: :mod:`wirelessfl.net.digital`) draw every client of the
population a channel each round, from the ``("network", t)`` stream for all N clients at
once (a client's channel does not depend on who else is sampled), so channel-aware
schedulers, deadlines and the clock read one channel state. With ``deadline_s``,
``scheduler`` or ``compression`` the link changes what is learned: clients that miss the
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

import dataclasses
import importlib
import inspect
import math
import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from channels.rates import BANDWIDTH_HZ, tdma_rate
from channels.rayleigh import simo_rayleigh
from channels.units import db_to_lin
from channels.validation import as_float, as_int
from wirelessfl.errors import ConfigError, plugin_hint, short

_N = "wirelessfl.net."
#: name → ``module:Class`` of every link model, imported when first asked for.
LINK_MODELS: dict[str, str] = {
    "none": _N + "nolink:NoLink",
    "fixed": _N + "fixed:FixedRate",
    "tdma": _N + "tdma:TDMA",
    "fdma": _N + "fdma:FDMA",
    "aircomp": _N + "aircomp:AirCompLink",
    "shadowed": _N + "shadowed:Shadowed",
    "nr": _N + "nr:NRLink",
}
_LOADED: dict[str, type[LinkModel]] = {}


def link_class(name: str) -> type[LinkModel]:
    """The :class:`LinkModel` registered as ``name`` (ValueError naming the known ones)."""
    if name in _LOADED:
        return _LOADED[name]
    if not isinstance(name, str) or name not in LINK_MODELS:
        raise ValueError(f"`model` must be one of {', '.join(LINK_MODELS)}, got {short(name)}"
                         f"{plugin_hint('link model')}")
    module, _, cls = LINK_MODELS[name].partition(":")
    _LOADED[name] = getattr(importlib.import_module(module), cls)
    return _LOADED[name]


def register_link(name: str, cls: type[LinkModel]) -> None:
    """Add a link model from a user's own code: ``network.model: <name>`` then runs it.

    ``cls`` subclasses :class:`LinkModel` (its ``Settings`` a frozen dataclass). A
    registered name is refused. Put the class and this line in a plug-in (``--plugin``, or
    an installed package's ``wirelessfl.plugins`` entry point): worker processes (``--jobs``,
    Ray tasks, the distributed engine's ranks) load the same plug-ins as their command, so
    the name is registered there too. Every
    clock reads the model's :meth:`LinkModel.seconds` through :meth:`LinkModel.timed`, which
    refuses a value that is not a finite number of seconds ≥ 0.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"`name` must be an identifier such as 'my_link', got {short(name)}")
    if name in LINK_MODELS:
        raise ValueError(f"`name` {name!r} is registered already; choose another name")
    if not (isinstance(cls, type) and issubclass(cls, LinkModel)):
        raise TypeError(f"`cls` must be a subclass of wirelessfl.net.links.LinkModel, got "
                        f"{short(cls)}")
    if not (dataclasses.is_dataclass(cls.Settings) and cls.Settings.__dataclass_params__.frozen):
        raise TypeError(f"{cls.__name__}.Settings must be a frozen dataclass (its settings)")
    LINK_MODELS[name] = f"{cls.__module__}:{cls.__qualname__}"
    _LOADED[name] = cls


def unregister_link(name: str) -> None:
    """Remove a link model added by :func:`register_link` (the project's own stay)."""
    if name not in _LOADED or LINK_MODELS.get(name, "").startswith(_N):
        raise ValueError(f"{name!r} was not added by register_link(); only those can be removed")
    del _LOADED[name], LINK_MODELS[name]


#: Field metadata of a link setting that changes what a run learns, not only its clock:
#: ``field(default=..., metadata=SHAPES_LEARNING)``.
SHAPES_LEARNING = {"shapes_learning": True}


def shaping_fields(settings_cls: type) -> tuple[str, ...]:
    """The fields of a ``Settings`` class whose metadata says they shape learning."""
    return tuple(f.name for f in dataclasses.fields(settings_cls)
                 if f.metadata.get("shapes_learning"))


def learning_keys() -> set[str]:
    """Every setting of every registered link model that changes what a run learns."""
    return {k for name in LINK_MODELS for k in shaping_fields(link_class(name).Settings)}


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


@dataclass(frozen=True)
class NoSettings:
    """A link model without settings of its own."""


@dataclass(frozen=True)
class ChannelSettings:
    """Settings of a link over drawn SIMO Rayleigh channels (``tdma``, ``fdma``, ``aircomp``).

    Attributes
    ----------
    snr_db : float
        Transmit SNR [dB] (30, ``docs/papers/hist.md`` §6.4).
    antennas : int
        Receive antennas M (maximum-ratio reception).
    bandwidth_hz : float
        Band B [Hz] (9 MHz).
    """

    snr_db: float = 30.0
    antennas: int = 10
    bandwidth_hz: float = BANDWIDTH_HZ

    def __post_init__(self) -> None:
        as_float("snr_db", self.snr_db, lo=-200, hi=200)
        as_int("antennas", self.antennas, lo=1, hi=4096)
        as_float("bandwidth_hz", self.bandwidth_hz, lo=0, hi=1e12, lo_open=True)


@dataclass(frozen=True)
class NetworkConfig:
    """The ``network`` section of a run: the fields every link model has, and its own.

    A config writes them all at one level (``network: {model: tdma, snr_db: 20,
    step_seconds: 0.01}``); :meth:`from_raw` sorts them. A setting of another link model at
    its default is accepted and left out (run folders written before this seam hold every
    field); at any other value it is refused, as an inert setting.

    Attributes
    ----------
    model : str
        A registered link model (:data:`LINK_MODELS`).
    step_seconds : float
        Time of one local step [s] (0: communication only). Every client of a round is
        clocked as computing the round's most local steps: with unequal steps (clients of
        unequal data under an epoch budget) the round time is an upper bound on the slowest
        client's, since a client with fewer steps could upload earlier.
    bits_per_param : int
        Bits per parameter (32: fp32).
    params_per_vector : int or None
        Parameters one exchanged d-vector counts as (None: the model's d).
    settings : dataclass
        The model's own ``Settings`` (None: its defaults).
    """

    model: str = "none"
    step_seconds: float = 0.0
    bits_per_param: int = 32
    params_per_vector: int | None = None
    settings: Any = field(default=None, metadata={"flat": True})

    def __post_init__(self) -> None:
        cls = link_class(self.model)
        if self.settings is None:
            object.__setattr__(self, "settings", cls.Settings())
        elif type(self.settings) is not cls.Settings:
            raise ValueError(f"`settings` of model {self.model} must be a "
                             f"{cls.Settings.__name__}, got {type(self.settings).__name__}")
        as_float("step_seconds", self.step_seconds, lo=0, hi=1e6)
        as_int("bits_per_param", self.bits_per_param, lo=1, hi=64)
        if self.params_per_vector is not None:
            as_int("params_per_vector", self.params_per_vector, lo=1, hi=10**13)

    @classmethod
    def of(cls, model: str = "none", **settings: Any) -> NetworkConfig:
        """A network from flat keyword settings, e.g. ``NetworkConfig.of("tdma", snr_db=20)``."""
        common = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("flat")}
        own = link_class(model).Settings(**{k: v for k, v in settings.items() if k not in common})
        return cls(model, **{k: v for k, v in settings.items() if k in common}, settings=own)

    @classmethod
    def from_raw(cls, raw: Any, prefix: str, build: Any) -> NetworkConfig:
        """The section from a flat mapping (every key and value checked; ConfigError).

        ``build`` is the config builder
        (:func:`wirelessfl.run.configtypes.build_dataclass`), which calls this hook.
        """
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ConfigError(f"'{prefix}' must be a mapping, got {short(raw)}")
        raw = dict(raw)
        model = raw.get("model", "none")
        try:
            own = link_class(model).Settings
        except ValueError as exc:
            raise ConfigError(f"{prefix}.{str(exc).replace('`', '')}") from None
        common = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("flat")}
        mine = {f.name for f in dataclasses.fields(own)}
        for key in [k for k in raw if k not in common and k not in mine]:
            owners = {name: f for name in LINK_MODELS
                      for f in dataclasses.fields(link_class(name).Settings) if f.name == key}
            if not owners:
                valid = sorted((common | mine) - {"settings"})
                raise ConfigError(f"unknown config key '{prefix}.{str(key)[:40]}'; valid keys "
                                  f"under '{prefix}' with model {model}: {', '.join(valid)}")
            if all(raw[key] == _default(f) for f in owners.values()):
                del raw[key]  # another model's setting at its default: inert, as old folders hold
                continue
            raise ConfigError(f"{prefix}.{key} is a setting of link model "
                              f"{' / '.join(owners)}, not of {model}: use it with model: "
                              f"{next(iter(owners))} or remove it")
        settings = build(own, {k: raw.pop(k) for k in mine if k in raw}, prefix)
        return build(cls, raw, prefix, built={"settings": settings})

@dataclass(frozen=True)
class RoundCost:
    """What a link model needs of one round: enough to time it again under another model.

    Payloads are per participating client, in parameters as timed (already scaled by
    ``params_per_vector``); ``max_steps`` the most local steps any client took; ``clients``
    how many took part; ``ids`` which (sorted) and ``population`` N, so ``tdma``/``fdma``
    read each client's own channel of the round's N (None in rows written before: the
    channels of an S-client draw, as those runs were timed).

    A hierarchical round (HFedAvg, HIST) adds its cells: ``cells[i]`` is the cell of
    ``ids[i]``, ``cell_uplink[j]`` what each client of cell j uploads per edge round (HIST's
    submodels differ by cell), ``edge_rounds`` E. :meth:`LinkModel.timed` then times it per
    cell (:meth:`LinkModel.cells_seconds`); ``max_steps`` is per edge round.
    """

    uplink: float
    downlink: float
    max_steps: float
    clients: int
    population: int | None = None
    ids: tuple[int, ...] | None = None
    cells: tuple[int, ...] | None = None
    cell_uplink: tuple[float, ...] | None = None
    edge_rounds: int = 1

    @classmethod
    def from_report(cls, report: Any, scale: float = 1.0,
                    population: int | None = None) -> RoundCost:
        """The cost of a :class:`~wirelessfl.algorithms.base.RoundReport` (payloads × scale)."""
        diag = report.clients
        if hasattr(diag, "steps") and hasattr(diag, "ids"):  # ClientDiagnostics: arrays
            steps = diag.steps.astype(float).tolist() or [0.0]
            ids = tuple(np.sort(diag.ids).tolist())
        else:
            steps = [float(c.get("steps", 0)) for c in diag.values()] or [0.0]
            ids = tuple(sorted(int(c) for c in diag))
        up = report.uplink_params
        down = up if report.downlink_params is None else report.downlink_params
        known = population is not None and ids and ids[-1] < population
        cell_of = getattr(report, "cell_of", None)
        if known and cell_of is not None:  # a hierarchical round: its cells, per edge round
            ids = tuple(sorted(set(ids)))  # (each client once: it trained in every edge round)
            sizes = getattr(report, "cell_params", None) or ()
            return cls(float(up) * scale, float(down) * scale, max(steps), len(ids), population,
                       ids, tuple(int(cell_of[i]) for i in ids),
                       tuple(float(v) * scale for v in sizes), int(report.edge_rounds))
        return cls(float(up) * scale, float(down) * scale, max(steps), len(steps),
                   population if known else None, ids if known else None)

    def as_list(self) -> list[Any]:
        """``[uplink, downlink, max_steps, clients(, N, ids(, cells, cell_uplink, E))]``, as logged."""
        head = [self.uplink, self.downlink, self.max_steps, self.clients]
        if self.ids is None:
            return head
        head = [*head, self.population, list(self.ids)]
        return head if self.cells is None else [*head, list(self.cells), list(self.cell_uplink),
                                                self.edge_rounds]

    @classmethod
    def from_list(cls, values: Any) -> RoundCost:
        """The inverse of :meth:`as_list` (checked: a damaged row raises ValueError)."""
        if not isinstance(values, (list, tuple)) or len(values) not in (4, 6, 9):
            raise ValueError(f"a round cost is [uplink, downlink, max_steps, clients(, N, "
                             f"ids(, cells, cell_uplink, E))], got {str(values)[:60]}")
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
        if len(values) == 6:
            return cls(up, down, steps, clients, n, tuple(ids))
        cells, sizes = values[6], values[7]
        edge = as_int("edge_rounds", values[8], lo=1, hi=10**6)
        if (not isinstance(cells, (list, tuple)) or len(cells) != clients
                or not isinstance(sizes, (list, tuple))
                or not all(isinstance(c, int) and 0 <= c < len(sizes) for c in cells)):
            raise ValueError(f"a round cost's cells must give each of its {clients} clients a "
                             f"cell with an upload size, got {str(values[6:8])[:60]}")
        sizes = tuple(as_float("cell_uplink", v, lo=0, hi=1e15) for v in sizes)
        return cls(up, down, steps, clients, n, tuple(ids), tuple(cells), sizes, edge)


#: Longest round a link may report [s] (about 30,000 years: past it, a clock is broken).
MAX_ROUND_SECONDS = 1e12


class LinkModel(ABC):
    """A link: how long a round takes and, for some, who arrives and what the server receives.

    Subclasses set ``Settings`` (a frozen dataclass of their own settings; fields with
    ``metadata={"shapes_learning": True}`` change what a run learns) and implement
    :meth:`seconds`. A digital link that drops, schedules or compresses returns its
    :class:`~wirelessfl.net.digital.DigitalUplink` from :meth:`digital_uplink`; an
    over-the-air one its aggregator from :meth:`aggregator`.

    Parameters
    ----------
    cfg : NetworkConfig
        The run's network (``cfg.settings`` this model's ``Settings``).
    num_params : int or None
        d, the model's parameters (``params_per_vector`` scales payloads by its ratio to d).
    num_clients : int or None
        N, the clients of the population (channels are drawn for all N each round).
    seeds : wirelessfl.rng.Seeds or None
        The run's streams, for a link with draws fixed for the run (``nr``'s deployment);
        the others read only each round's generator.
    """

    Settings: ClassVar[type] = NoSettings
    #: Whether the link keeps a clock (``none`` does not: no simulated time).
    clocked: ClassVar[bool] = True

    def __init__(self, cfg: NetworkConfig, num_params: int | None = None,
                 num_clients: int | None = None, seeds: Any = None) -> None:
        if type(cfg.settings) is not self.Settings:
            raise ValueError(f"{type(self).__name__} takes {self.Settings.__name__} settings, got "
                             f"{type(cfg.settings).__name__} (network.model {cfg.model})")
        self.cfg, self.settings = cfg, cfg.settings
        self.scale = (1.0 if cfg.params_per_vector is None or not num_params
                      else cfg.params_per_vector / num_params)
        self.num_clients, self.seeds = num_clients, seeds

    def cost(self, report: Any) -> RoundCost:
        """The round's :class:`RoundCost` with this model's ``params_per_vector`` scaling."""
        return RoundCost.from_report(report, self.scale, self.num_clients)

    def round_seconds(self, report: Any, rng: np.random.Generator) -> float | None:
        """Seconds of the round ``report`` describes (None: the link keeps no clock)."""
        return self.timed(self.cost(report), rng)

    def timed(self, cost: RoundCost, rng: np.random.Generator) -> float | None:
        """:meth:`seconds`, checked: what every clock reads (runs, re-timing, FedAST, groups).

        A link model of one's own may return anything; a value that is not a finite number
        of seconds ≥ 0 (NaN, inf, a negative, ``True``, a string, an array) or an exception
        stops the run with one line naming the model, rather than a clock gone null or
        negative without a word.
        """
        if cost.cells is not None:
            return self.cells_seconds(cost, rng)
        return self._checked(cost, rng)

    def cells_seconds(self, cost: RoundCost, rng: np.random.Generator) -> float | None:
        """A hierarchical round: E edge rounds, each as long as its slowest cell.

        The cells are separate base stations (or sectors) with their own band, so they
        upload in parallel; within cell j its clients upload ``cell_uplink[j]`` each as this
        link times a round of those clients alone (``tdma``: one after another on the cell's
        band; ``nr``: the sector's scheduler). Every edge round draws its channels anew, cell
        after cell, from ``rng``.
        """
        ids, cells = np.asarray(cost.ids), np.asarray(cost.cells)
        members = [ids[cells == j] for j in range(len(cost.cell_uplink))]
        total = 0.0
        for _ in range(cost.edge_rounds):
            slowest = 0.0
            for j, mine in enumerate(members):
                if not len(mine):
                    continue
                size = cost.cell_uplink[j]
                got = self._checked(RoundCost(size, size, cost.max_steps, len(mine),
                                              cost.population, tuple(mine.tolist())), rng)
                if got is None:
                    return None
                slowest = max(slowest, got)
            total += slowest
        return total

    def _checked(self, cost: RoundCost, rng: np.random.Generator) -> float | None:
        """One :meth:`seconds`, checked (:meth:`timed`)."""
        name = getattr(self.cfg, "model", type(self).__name__)
        try:
            got = self.seconds(cost, rng)
        except Exception as exc:  # noqa: BLE001 - a plug-in's failure, named and reported
            raise ValueError(f"network.model {short(name)}: its seconds() failed: "
                             f"{type(exc).__name__}: {str(exc)[:120]}") from None
        if got is None:
            return None
        if isinstance(got, bool) or not isinstance(got, numbers.Real) \
                or not math.isfinite(float(got)) or not 0 <= float(got) <= MAX_ROUND_SECONDS:
            raise ValueError(f"network.model {short(name)}: its seconds() gave {short(got)}; a "
                             f"round's time must be a finite number of seconds in [0, "
                             f"{MAX_ROUND_SECONDS:g}] (None: a link without a clock)")
        return float(got)

    @abstractmethod
    def seconds(self, cost: RoundCost, rng: np.random.Generator) -> float | None:
        """Seconds of a round of cost ``cost``, its draws from ``rng`` only (None: no clock)."""

    def shaping(self) -> list[str]:
        """The settings, away from their defaults, by which this link changes what is learned."""
        return [f.name for f in dataclasses.fields(self.settings)
                if f.metadata.get("shapes_learning")
                and getattr(self.settings, f.name) != _default(f)]

    def aggregator(self, lr: float) -> Any:
        """The aggregator every upload goes through (None: the algorithm's own, exact)."""
        return None

    def digital_uplink(self, num_clients: int, seeds: Any) -> Any:
        """The :class:`~wirelessfl.net.digital.DigitalUplink` that decides who arrives (None)."""
        return None

    def check_reachable(self, steps: int, num_clients: int, rounds: int) -> None:
        """Refuse (ValueError, one line) a link under which no upload can ever be aggregated.

        ``steps`` are the fewest local steps of any client, over ``num_clients`` clients and
        ``rounds`` rounds. Such runs used to train nothing and report the initial model's
        accuracy without a word. A link that always delivers has nothing to refuse.
        """
        return

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings})"


class ChannelLink(LinkModel):
    """A link over SIMO Rayleigh channels drawn each round (:class:`ChannelSettings`)."""

    Settings: ClassVar[type] = ChannelSettings

    def rates(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Full-band rates R_i = B log2(1 + SNR ‖h_i‖²) of n clients' drawn channels, (n,)."""
        s = self.settings
        h = simo_rayleigh((), n, s.antennas, rng)
        return tdma_rate(h, db_to_lin(s.snr_db), s.bandwidth_hz)

    def round_rates(self, cost: RoundCost, rng: np.random.Generator) -> np.ndarray:
        """The rates of a round's clients: each its own of the N drawn (S drawn in old rows)."""
        return (self.rates(cost.clients, rng) if cost.ids is None
                else self.rates(cost.population, rng)[list(cost.ids)])


def make_link(cfg: NetworkConfig, num_params: int | None = None,
              num_clients: int | None = None, seeds: Any = None) -> LinkModel:
    """The :class:`LinkModel` of a run's network (its registered class; ``seeds`` the run's)."""
    cls = link_class(cfg.model)
    params = inspect.signature(cls.__init__).parameters
    if "seeds" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return cls(cfg, num_params, num_clients)  # a plug-in's __init__ from before the seeds
    return cls(cfg, num_params, num_clients, seeds=seeds)


def retime(rows: list[dict[str, Any]], link: LinkModel, seeds: Any) -> list[float | None]:
    """Simulated time at each metrics row of a finished run, under another link model.

    ``rows`` are a round-based run's metrics rows, each with the ``round_costs`` of the
    rounds since the previous row (payloads as the run timed them: its ``params_per_vector``
    stays); ``seeds`` the run's :class:`~wirelessfl.rng.Seeds`; ``link`` the new model. Round
    t draws its channels from the same ``("network", t)`` stream a live run uses, so a run
    re-timed under a link model reports exactly the times a run trained under it would
    (training never reads the link's streams).
    """
    if not link.clocked:
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
            seconds = link.timed(RoundCost.from_list(values),
                                 seeds.generator("network", first + i + 1))
            if seconds is None:  # a link without a clock
                return [None] * len(rows)
            total += seconds
        out.append(total)
    return out


#: A run is refused when the chance that any client ever clears the truncation threshold
#: over the whole run is below this.
NEVER = 1e-9
