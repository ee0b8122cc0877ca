"""Client populations: which clients exist (are available) in each round.

FedAvg and HIST use a static population. The dynamic-clients paper
(``specs/dynamic_clients.md`` §4.2) alternates two groups A, B by session: at each
transition all active clients leave and the other group arrives. Algorithms ask
``population.active(round)`` and sample among those; an arrival hook (the
similarity-weighted initial model) runs when :meth:`Population.session` changes.

Examples
--------
>>> p = AlternatingGroups(groups=((0, 1), (2, 3)), rounds_per_session=2)
>>> [p.active(t).tolist() for t in range(5)]
[[0, 1], [0, 1], [2, 3], [2, 3], [0, 1]]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np


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

    def active(self, t: int) -> np.ndarray:  # noqa: D102
        return self.clients


class AlternatingGroups(Population):
    """Groups take turns, ``rounds_per_session`` rounds each: A, B, A, B, ..."""

    def __init__(self, *, groups: Sequence[Sequence[int]], rounds_per_session: int) -> None:
        if len(groups) < 1 or rounds_per_session < 1:
            raise ValueError("need >= 1 group and `rounds_per_session` >= 1")
        self.groups = tuple(tuple(int(u) for u in g) for g in groups)
        self.rounds_per_session = int(rounds_per_session)

    def session(self, t: int) -> int:  # noqa: D102
        return t // self.rounds_per_session

    def active(self, t: int) -> np.ndarray:  # noqa: D102
        return np.sort(np.asarray(self.groups[self.session(t) % len(self.groups)], dtype=np.int64))
