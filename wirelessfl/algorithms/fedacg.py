"""FedACG (Kim et al., CVPR 2024): accelerated client gradient through a lookahead start.

``docs/papers/dynamic_clients.md`` §2.7: the server sends w_g + λ m; client k trains from it on
CE + β/2 ‖w − (w_g + λ m)‖² and uploads Δ_k = w_k − (w_g + λ m); the server sets
m ← λ m + Σ_k p_k Δ_k and w_g ← w_g + m. The proximal term is :class:`ProximalSGD`'s
gradient, so both engines run it. λ = β = 0 is FedAvg. Defaults: β = 0.01, λ = 0.85 (the
20-client setting; 100 clients use β = 0.1, λ = 0.5). m starts at zero [default].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from typing_extensions import override

from channels.validation import as_float
from wirelessfl.algorithms.base import (
    Environment,
    RoundReport,
    ServerState,
)
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
from wirelessfl.algorithms.fedprox import ProximalSGD
from wirelessfl.engine.client import ClientResult
from wirelessfl.models.base import Params
from wirelessfl.net.digital import Delivery
from wirelessfl.server.state import AlgorithmState, RoundPlan


@dataclass(frozen=True)
class FedACGHParams(FedAvgHParams):
    """FedACG: a lookahead start (λ) and proximal local steps (β) on FedAvg's sampling."""

    beta: float = 0.01
    lam: float = 0.85

    def __post_init__(self) -> None:
        super().__post_init__()
        as_float("beta", self.beta, lo=0, hi=1e6)
        as_float("lam", self.lam, lo=0, hi=1, hi_open=True)


@dataclass(frozen=True)
class FedACGState(AlgorithmState):
    """The server momentum m (None before the first round: zero)."""

    m: Params | None = None


class FedACG(FedAvg):
    """FedACG: lookahead start w_g + λ m, proximal local steps, momentum server."""

    uses_uplink = True  # its server phase aggregates through the uplink (combine)

    state_type = FedACGState

    def __init__(self, env: Environment, hp: FedACGHParams = FedACGHParams()) -> None:
        super().__init__(env, hp)
        self.hp: FedACGHParams = hp
        self.update = ProximalSGD(env.model, env.local, hp.beta)

    def _momentum(self, state: ServerState) -> Params:
        return self.opt_state(state).m or {k: torch.zeros_like(v) for k, v in state.params.items()}

    @override
    def start(self, state: ServerState) -> Params:
        m = self._momentum(state)
        return {k: state.params[k] + self.hp.lam * m[k] for k in m}

    folds_deltas = True  # server_update reads the Δ_i only through combine

    @override
    def server_update(self, state: ServerState, plan: RoundPlan,
                      results: list[ClientResult],
                      delivery: Delivery | None = None) -> tuple[ServerState, RoundReport]:
        update, _, info = self.combine(state, results)  # update = mean(start − w_k)
        m = self._momentum(state)
        m = {k: self.hp.lam * m[k] - update[k] for k in m}
        params = {k: state.params[k] + m[k] for k in m}
        return self.finish_round(state, params, FedACGState(m), results, infos=(info,))
