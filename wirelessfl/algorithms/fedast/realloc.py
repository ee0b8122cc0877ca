"""Option D: the request budget reallocated by the tasks' gradient variance (Algorithms 3–4).

Every ``period`` · |active| · ΣR arrivals, once every active task has a window of V updates,
each task's σ̂_m is estimated from its window (Algorithm 4) and the budget R is split in
whole units of r in proportion to σ̂ (Algorithm 3, :func:`realloc_units`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from wirelessfl.algorithms.fedast.hparams import FedASTHParams
from wirelessfl.algorithms.fedast.simulation import TaskState
from wirelessfl.algorithms.fedast.tasks import TaskEnv
from wirelessfl.models.base import Params


def realloc_units(total: int, ratio: int, sigma: np.ndarray) -> np.ndarray:
    """Targets R_m in whole units of r ∝ σ̂_m, at least one unit each (§7 item 5).

    The result sums to ``total`` only when ``total`` is a multiple of ``ratio`` with at least
    one unit per task; :class:`FedAST` refuses option D otherwise.
    """
    units = max(total // ratio, len(sigma))
    share = units * sigma / sigma.sum()
    got = np.ones(len(sigma), int)
    for _ in range(units - len(sigma)):
        got[int(np.argmax(share - got))] += 1
    return got * ratio


def normalised_variance(window: list[Params]) -> float:
    """σ̃² = mean_k ‖Δ_k − Δ̄‖² / ‖Δ̄‖² over the last V updates (Algorithm 4, step 2)."""
    flat = torch.stack([torch.cat([v.flatten() for v in d.values()]) for d in window])
    mean = flat.mean(0)
    return float(((flat - mean) ** 2).sum(1).mean() / mean.square().sum().clamp_min(1e-30))


def sigma_hat(task: TaskEnv, st: TaskState, hp: FedASTHParams) -> float:
    """σ̂ of a task (paper) or the code variant's allocation weight (§7 item 6)."""
    var = normalised_variance(list(st.window))
    eta_c, eta_s, tau = task.local.lr, hp.server_lr, task.steps
    if hp.variance == "code":
        return eta_s * var / (eta_c * tau**2)
    return math.sqrt(eta_c * eta_s * tau * var)


def reallocate(states: Sequence[TaskState], tasks: Sequence[TaskEnv], hp: FedASTHParams,
               arrivals: int) -> bool:
    """Algorithm 3 when due: new targets R_m of the active tasks ∝ σ̂_m.

    Returns whether it was due (the arrival counter then restarts), also when the
    estimates are unusable (not finite, or all zero) and the targets are kept.
    """
    active = [i for i, s in enumerate(states) if not s.finished]
    period = hp.period * len(active) * sum(states[i].target_requests for i in active)
    if arrivals < period or any(len(states[i].window) < hp.window for i in active):
        return False
    sigma = np.array([sigma_hat(tasks[i], states[i], hp) for i in active])
    if not np.isfinite(sigma).all() or sigma.sum() <= 0:
        return True
    total = sum(states[i].target_requests for i in active)
    for i, r in zip(active, realloc_units(total, hp.ratio, sigma)):
        states[i].target_requests = int(r)
    return True
