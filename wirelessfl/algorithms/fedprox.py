"""FedProx (Li et al., MLSys 2020): FedAvg whose clients minimise f_i(w) + μ/2 ‖w − w^t‖².

The proximal term enters as its gradient μ (w − w_start), the local rule's
:meth:`~wirelessfl.engine.local_sgd.LocalSGD.correct` (no extra autograd graph), so both engines run
it on the stacked clients; the batched engine takes it as the in-place pull
w ← w − γμ (w − w_start) (:meth:`~wirelessfl.engine.local_sgd.LocalSGD.drift_step`) just before
the gradient step, which keeps its fused plain-SGD step (the same step, rounded
differently). μ = 0 is FedAvg exactly; the reported training loss is the data loss.
Defaults: μ = 1 (``docs/papers/dynamic_clients.md`` §2.7, ``prox_alpha``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from typing_extensions import override

from channels.validation import as_float
from wirelessfl.algorithms.base import Environment
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
from wirelessfl.engine.client import LocalHParams, LocalSGD
from wirelessfl.models.base import FLModel, Params


@dataclass(frozen=True)
class FedProxHParams(FedAvgHParams):
    """FedProx: FedAvg with a proximal term of weight μ in the local objective."""

    mu: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        as_float("mu", self.mu, lo=0, hi=1e6)


class ProximalSGD(LocalSGD):
    """Local SGD on CE + μ/2 ‖w − w_start‖²."""

    elementwise = True  # its gradient hooks act entry by entry: safe on stacked clients

    def __init__(self, model: FLModel, hp: LocalHParams, mu: float) -> None:
        super().__init__(model, hp)
        self.mu = mu

    @override
    def correct(self, grads: Params, params: Params, start: Params,
                ctx: dict[str, Params]) -> Params:
        # ∇ μ/2 ‖w − w_start‖² = μ (w − w_start), one fused pass per tensor (stacked or not)
        if not self.mu:
            return grads
        return {k: torch.add(g, params[k] - start[k], alpha=self.mu) for k, g in grads.items()}

    drifts = True  # the proximal gradient does not depend on g: the fused step takes it

    @override
    def drift_step(self, name, p, start, ctx, lr):
        if self.mu:  # p − γμ (p − w_start), one pass
            p.lerp_(start[name], lr * self.mu)


class FedProx(FedAvg):
    """FedAvg with :class:`ProximalSGD` clients."""

    def __init__(self, env: Environment, hp: FedProxHParams = FedProxHParams()) -> None:
        super().__init__(env, hp)
        self.update = ProximalSGD(env.model, env.local, hp.mu)
