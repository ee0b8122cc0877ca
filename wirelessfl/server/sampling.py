"""Client samplers: which of the available clients take part in a round.

Examples
--------
>>> import numpy as np
>>> UniformSampler(num=3).sample(np.arange(10), np.random.default_rng(0)).tolist()
[5, 6, 9]
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from typing_extensions import override


class ClientSampler(ABC):
    """Choose participants among available clients.

    Contract: :meth:`sample` returns a sorted subset of ``available`` (never an id outside
    it, never a repeat), drawn only from ``rng``. An empty ``available`` gives an empty result.
    """

    @abstractmethod
    def sample(self, available: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Participants of this round."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class AllClients(ClientSampler):
    """Full participation."""

    @override
    def sample(self, available: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.sort(np.asarray(available))


class UniformSampler(ClientSampler):
    """``num`` clients uniformly without replacement (all of them if fewer are available)."""

    def __init__(self, *, num: int) -> None:
        if num < 1:
            raise ValueError(f"`num` must be >= 1, got {num}")
        self.num = int(num)

    @override
    def sample(self, available: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        available = np.asarray(available)
        k = min(self.num, len(available))
        return np.sort(rng.choice(available, size=k, replace=False))
