"""Client populations: which clients exist (are available) in each round.

FedAvg and HIST use a static population. The dynamic-clients paper
(``docs/papers/dynamic_clients.md`` §1, §4.2) works in *sessions*: maximal runs of rounds with an
unchanged client set. Its experiments alternate two groups A, B (at each transition all
active clients leave and the other group arrives); any list of join/leave events is a
population too (§7 item 9), each change of the active set starting a new session.
Algorithms ask ``population.active(round)`` and sample among those (all of them by
default: full participation); the runner calls the algorithm's session-start hook
(:meth:`~wirelessfl.algorithms.base.FederatedAlgorithm.start_session`) at the first round of
every session after the first, and marks each metrics row with its session.

Configured by the run's ``population`` section (:class:`PopulationConfig`):
``{kind: static}`` (default), ``{kind: alternating, groups: 2, rounds_per_session: T}``
(clients split into ``groups`` equal blocks by index, A = the first block, as
:class:`~wirelessfl.data.partition.TwoGroupOverlap` numbers them) or ``{kind: events,
events: [{round: 0, join: [...]}, {round: 50, leave: [...], join: [...]}, ...]}``.

Examples
--------
>>> p = AlternatingGroups(groups=((0, 1), (2, 3)), rounds_per_session=2)
>>> [p.active(t).tolist() for t in range(5)]
[[0, 1], [0, 1], [2, 3], [2, 3], [0, 1]]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from typing_extensions import override

from channels.validation import as_int

KINDS = ("static", "alternating", "events")


@dataclass(frozen=True)
class PopulationConfig:
    """The run's ``population`` section (see the module docstring).

    Attributes
    ----------
    kind : str
        ``static``, ``alternating`` or ``events``.
    groups : int
        Groups that take turns (``alternating``; 2 in the paper).
    rounds_per_session : int or None
        T, rounds per session (``alternating``; required there).
    events : tuple of mapping
        ``{round, join, leave}`` entries (``events``), the first at round 0.
    order : tuple of int
        ``alternating``: the group of each session, repeated when the run is longer (empty:
        0, 1, ..., groups-1, 0, ...); e.g. ``[0, 1, 0, 1, 0, 2]`` brings a third group in
        for the last of six sessions (Table 12's unseen labels).
    """

    kind: str = "static"
    groups: int = 2
    rounds_per_session: int | None = None
    events: tuple[dict, ...] = ()
    order: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"`kind` must be one of {', '.join(KINDS)}, got {self.kind!r}")
        as_int("groups", self.groups, lo=1, hi=10**6)
        if self.kind == "alternating" and self.groups < 2:
            raise ValueError("`groups` must be >= 2 for kind alternating (a session starts when "
                             "the client set changes)")
        if self.kind == "alternating" and self.rounds_per_session is None:
            raise ValueError("`rounds_per_session` is needed for kind alternating (the paper's "
                             "T, e.g. 50)")
        if self.rounds_per_session is not None:
            as_int("rounds_per_session", self.rounds_per_session, lo=1, hi=10**7)
        if self.kind == "events" and not self.events:
            raise ValueError("kind events needs `events`, e.g. [{round: 0, join: [0, 1]}]")
        if self.kind != "events" and self.events:
            raise ValueError(f"`events` are for kind events, not {self.kind}")
        if self.order and self.kind != "alternating":
            raise ValueError(f"`order` is for kind alternating, not {self.kind}")
        for i, g in enumerate(self.order):
            as_int(f"order[{i}]", g, lo=0, hi=self.groups - 1)
        if any(a == b for a, b in zip(self.order, self.order[1:])):
            raise ValueError(f"`order` {list(self.order)} repeats a group in consecutive "
                             "sessions; a session starts only when the client set changes")
        if len(set(self.order)) == 1:
            raise ValueError("`order` needs at least two groups")

    @property
    def dynamic(self) -> bool:
        """Whether the active set can change (sessions are marked in the records)."""
        return self.kind != "static"


def make_population(cfg: PopulationConfig, num_clients: int) -> Population:
    """The :class:`Population` of ``cfg`` over clients ``0..num_clients-1`` (checked)."""
    if not isinstance(cfg, PopulationConfig):
        raise TypeError(f"`cfg` must be a PopulationConfig, got {type(cfg).__name__}")
    num_clients = as_int("num_clients", num_clients, lo=1, hi=10**9)
    if cfg.kind == "static":
        return Static(clients=np.arange(num_clients))
    if cfg.kind == "alternating":
        if num_clients % cfg.groups:
            raise ValueError(f"population.groups = {cfg.groups} does not divide the "
                             f"{num_clients} clients into equal groups; change data.num_clients "
                             "or population.groups")
        return AlternatingGroups(groups=np.arange(num_clients).reshape(cfg.groups, -1).tolist(),
                                 rounds_per_session=cfg.rounds_per_session,
                                 order=cfg.order or None)
    return EventSessions(events=cfg.events, num_clients=num_clients)


def check_round(t: object) -> int:
    """``t`` as a round index: an integer ≥ 0 (ValueError naming ``t`` otherwise)."""
    return as_int("t", t, lo=0, hi=10**12)  # the message names `t`, the round


class Population(ABC):
    """Which clients are present in a round.

    Contract: :meth:`active` returns a sorted array of client ids for round ``t`` (a pure
    function of ``t``); :meth:`session` is an integer that changes exactly when the set of
    present clients changes by arrival or departure.
    """

    @abstractmethod
    def active(self, t: int) -> np.ndarray:
        """Clients present in round ``t``."""

    def session(self, t: int) -> int:
        """Index of the session round ``t`` belongs to (0 for a static population)."""
        return 0

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Static(Population):
    """The same clients every round."""

    def __init__(self, *, clients: Sequence[int]) -> None:
        self.clients = np.sort(np.asarray(clients, dtype=np.int64))

    @override
    def active(self, t: int) -> np.ndarray:
        check_round(t)
        return self.clients


class AlternatingGroups(Population):
    """Groups take turns, ``rounds_per_session`` rounds each: A, B, A, B, ... (or ``order``)."""

    def __init__(self, *, groups: Sequence[Sequence[int]], rounds_per_session: int,
                 order: Sequence[int] | None = None) -> None:
        if len(groups) < 1 or rounds_per_session < 1:
            raise ValueError("need >= 1 group and `rounds_per_session` >= 1")
        self.groups = tuple(tuple(int(u) for u in g) for g in groups)
        empty = [i for i, g in enumerate(self.groups) if not g]
        if empty:
            raise ValueError(f"`groups`[{empty[0]}] is empty: every group needs at least one "
                             "client (its sessions would train nobody)")
        self.rounds_per_session = int(rounds_per_session)
        self.order = tuple(int(g) for g in (order if order is not None else range(len(self.groups))))
        bad = [g for g in self.order if not 0 <= g < len(self.groups)]
        if bad or not self.order:
            raise ValueError(f"`order` must list group indices in 0..{len(self.groups) - 1}, got "
                             f"{list(self.order)[:8]}")

    @override
    def session(self, t: int) -> int:
        return check_round(t) // self.rounds_per_session

    @override
    def active(self, t: int) -> np.ndarray:
        group = self.groups[self.order[self.session(t) % len(self.order)]]
        return np.sort(np.asarray(group, dtype=np.int64))


class EventSessions(Population):
    """Clients join and leave at given rounds; each change of the active set opens a session.

    ``events`` are ``{round, join, leave}`` mappings in increasing round order, the first at
    round 0 (who is there at the start). A client that leaves at round r trains last in round
    r − 1; one that joins at r trains from round r (§1's rules at round granularity).

    Examples
    --------
    >>> p = EventSessions(events=[{"round": 0, "join": [0, 1]}, {"round": 2, "join": [2]},
    ...                           {"round": 3, "leave": [0, 1]}], num_clients=3)
    >>> [(p.session(t), p.active(t).tolist()) for t in range(4)]
    [(0, [0, 1]), (0, [0, 1]), (1, [0, 1, 2]), (2, [2])]
    """

    def __init__(self, *, events: Sequence[Mapping[str, Any]], num_clients: int) -> None:
        as_int("num_clients", num_clients, lo=1, hi=10**9)
        if not isinstance(events, (list, tuple)) or not events:
            raise ValueError("population.events must be a non-empty list of {round, join, leave}")
        starts, sets, active, last = [], [], set(), -1
        for i, ev in enumerate(events):
            where = f"population.events[{i}]"
            if not isinstance(ev, Mapping) or not set(ev) <= {"round", "join", "leave"} \
                    or "round" not in ev:
                raise ValueError(f"{where} must be a mapping with round and join and/or leave")
            t = as_int(f"{where}.round", ev["round"], lo=0, hi=10**9)
            if (i == 0 and t != 0) or t <= last:
                raise ValueError(f"{where}.round = {t}: the first event is at round 0 and rounds "
                                 "increase strictly")
            join, leave = (self._ids(ev.get(k, []), num_clients, f"{where}.{k}")
                           for k in ("join", "leave"))
            if join & active or leave - active:
                raise ValueError(f"{where}: clients {sorted(join & active or leave - active)[:5]} "
                                 "join while present or leave while absent")
            active = (active | join) - leave
            if not active or not (join or leave):
                raise ValueError(f"{where} leaves no client active or changes nothing")
            starts.append(t)
            sets.append(np.array(sorted(active), dtype=np.int64))
            last = t
        self.starts, self.sets = np.array(starts), tuple(sets)

    @staticmethod
    def _ids(values: Any, n: int, where: str) -> set[int]:
        if not isinstance(values, (list, tuple)):
            raise ValueError(f"{where} must be a list of client ids")
        ids = {as_int(where, v, lo=0, hi=n - 1) for v in values}
        if len(ids) != len(values):
            raise ValueError(f"{where} names a client twice")
        return ids

    @override
    def session(self, t: int) -> int:
        return int(np.searchsorted(self.starts, check_round(t), side="right") - 1)

    @override
    def active(self, t: int) -> np.ndarray:
        return self.sets[self.session(t)]

    def __repr__(self) -> str:
        return f"EventSessions(starts={self.starts.tolist()})"
