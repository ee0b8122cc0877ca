"""Aggregators: how a server combines its clients' pseudo-gradients.

An aggregator is given the pseudo-gradients ``Δ_i = x_start − x_i`` and weights, and
returns the update the server subtracts (times its step size). :class:`Mean` is the exact
weighted mean (eq. (6) of HIST with uniform weights; FedAvg with data-size weights). An
over-the-air aggregator (HIST §5.9, eqs. (26)–(27)) returns the same mean plus channel noise
through the same interface.

Examples
--------
>>> import torch
>>> d = [{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([3.0, 6.0])}]
>>> Mean().aggregate(d, np.array([1.0, 3.0]), np.random.default_rng(0))["w"]
tensor([2.5000, 5.0000])
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch

from wirelessfl.models.base import Params


def weighted_mean(trees: Sequence[Params], weights: np.ndarray | Sequence[float]) -> Params:
    """Σ_i w_i tree_i / Σ_i w_i, key by key."""
    w = np.asarray(weights, dtype=np.float64)
    if len(trees) == 0 or len(w) != len(trees) or not (w >= 0).all() or w.sum() <= 0:
        raise ValueError(f"need one non-negative weight per tree with a positive sum, got {w}")
    w = w / w.sum()
    return {k: torch.stack([t[k] for t in trees]).mul_(
        torch.as_tensor(w, dtype=trees[0][k].dtype, device=trees[0][k].device).view(
            -1, *([1] * trees[0][k].dim()))).sum(0) for k in trees[0]}


class Aggregator(ABC):
    """Combine pseudo-gradients into one server update.

    Contract: :meth:`aggregate` returns a tree with the keys and shapes of each input delta.
    Clients that failed are not passed in; an empty list raises ``ValueError``. Randomness
    (channel noise) comes only from ``rng``.
    """

    @abstractmethod
    def aggregate(self, deltas: Sequence[Params], weights: np.ndarray,
                  rng: np.random.Generator) -> Params:
        """The server update."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Mean(Aggregator):
    """The exact weighted mean (error-free orthogonal uplinks)."""

    def aggregate(self, deltas: Sequence[Params], weights: np.ndarray,
                  rng: np.random.Generator) -> Params:
        """Weighted mean of ``deltas``; ``rng`` is unused."""
        return weighted_mean(deltas, weights)


def apply_update(params: Params, update: Params, lr: float = 1.0) -> Params:
    """Server step ``x − lr · update`` (plain averaging when lr = 1)."""
    return {k: params[k] - lr * update[k] for k in params}
