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

from channels.aircomp import AirCompCell
from channels.rayleigh import simo_rayleigh
from channels.units import db_to_lin
from channels.validation import as_float
from solvers import beamforming
from wirelessfl.models.base import Params


def weighted_mean(trees: Sequence[Params], weights: np.ndarray | Sequence[float]) -> Params:
    """Σ_i w_i tree_i / Σ_i w_i, key by key."""
    w = np.asarray(weights, dtype=np.float64)
    if len(trees) == 0 or len(w) != len(trees) or not (w >= 0).all() or w.sum() <= 0:
        raise ValueError(f"need one non-negative weight per tree with a positive sum, got {w}")
    _same_layout(trees[0], *trees[1:])
    w = w / w.sum()
    return {k: torch.stack([t[k] for t in trees]).mul_(
        torch.as_tensor(w, dtype=trees[0][k].dtype, device=trees[0][k].device).view(
            -1, *([1] * trees[0][k].dim()))).sum(0) for k in trees[0]}


def _same_layout(first: Params, *others: Params) -> None:
    """Every tree has ``first``'s keys and shapes (ValueError naming the first difference)."""
    for i, t in enumerate(others, 1):
        if t.keys() != first.keys():
            diff = sorted(set(t) ^ set(first))[:3]
            raise ValueError(f"tree {i} has other keys than tree 0 (differ: {diff})")
        for k, v in first.items():
            if t[k].shape != v.shape:
                raise ValueError(f"tree {i}: {k!r} has shape {tuple(t[k].shape)}, tree 0 "
                                 f"{tuple(v.shape)}")


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
    lr = as_float("lr", lr)
    _same_layout(params, update)
    return {k: params[k] - lr * update[k] for k in params}


class AirComp(Aggregator):
    """Over-the-air edge aggregation of one cell (HIST §5.9, eqs. (21)–(27)).

    Each call is one edge round: it draws the clients' SIMO Rayleigh channels h_i ~ CN(0, I_M),
    solves the receive beam with :func:`solvers.beamforming.solve`, and returns the exact
    uniform mean of the pseudo-gradients plus i.i.d. real Gaussian noise of variance
    γ² · MSE (25) per entry. Clients' pseudo-gradients are Δ_i = γ δ_i with δ_i the
    accumulated gradient (21), so the estimate (26) of the mean δ, times γ, carries noise γ Z:
    the edge step (27) x̄ − γ δ̂ = x̄ − (mean Δ + γ Z). ``real_part=True`` halves the variance
    (§8.4 item 16); ``noise_power=0`` gives the exact mean. The MSE of every call is appended
    to :attr:`mse_log`.

    Parameters
    ----------
    snr_db : float
        P_j / σ0² of the cell [dB] (σ0² = ``noise_power``).
    lr : float
        Local step size γ.
    antennas : int
        M (default 10).
    method : str
        Beamforming method (default ``"fast"``).
    noise_power : float
        σ0² (default 1; 0 disables the noise).
    real_part, tight_power : bool
        §8.4 items 16 and 17.
    """

    def __init__(self, snr_db: float, lr: float, *, antennas: int = 10, method: str = "fast",
                 noise_power: float = 1.0, real_part: bool = False,
                 tight_power: bool = False) -> None:
        if not np.isfinite(snr_db):
            raise ValueError(f"AirComp SNR must be a finite number of dB, got {snr_db}")
        self.snr_db, self.lr, self.antennas, self.method = snr_db, lr, antennas, method
        self.noise_power, self.real_part, self.tight_power = noise_power, real_part, tight_power
        self.mse_log: list[float] = []

    def aggregate(self, deltas: Sequence[Params], weights: np.ndarray,
                  rng: np.random.Generator) -> Params:
        """Uniform mean of ``deltas`` plus the AirComp noise of a freshly drawn channel."""
        channel_rng, noise_rng = rng.spawn(2)
        h = simo_rayleigh((), len(deltas), self.antennas, channel_rng)
        beam = beamforming.solve(h, self.method, seed=channel_rng).a
        cell = AirCompCell(h, beam, power=db_to_lin(self.snr_db), noise_power=self.noise_power,
                           tight_power=self.tight_power)
        mse = float(cell.mse) / (2.0 if self.real_part else 1.0)
        self.mse_log.append(float(cell.mse))
        mean = weighted_mean(deltas, np.ones(len(deltas)))
        gen = torch.Generator(device="cpu").manual_seed(int(noise_rng.integers(2**63)))
        std = self.lr * mse ** 0.5
        return {k: v + std * torch.randn(v.shape, generator=gen, dtype=v.dtype).to(v.device)
                for k, v in mean.items()}

    def __repr__(self) -> str:
        return f"AirComp(snr_db={self.snr_db}, M={self.antennas}, method={self.method!r})"
