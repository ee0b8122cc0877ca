"""FedDyn (Acar et al., "Federated Learning Based on Dynamic Regularization", ICLR 2021).

Client i, holding h_i = ∇L_i(θ_i) of its last local model (0 before its first round),
minimises from the server model θ^{t−1} (Algorithm 1 of the paper)

    L_i(θ) − ⟨h_i, θ⟩ + (α/2) ‖θ − θ^{t−1}‖²,

i.e. local SGD on the gradient g − h_i + α (θ − θ^{t−1}) (the rule's
:meth:`~wirelessfl.engine.local_sgd.LocalSGD.correct`, elementwise, so both engines run it),
then sets h_i ← h_i − α (θ_i^t − θ^{t−1}) = h_i + α Δ_i (Δ_i = θ^{t−1} − θ_i^t, the
pseudo-gradient it uploads). The server keeps h ← h − (α/m) Σ_{i∈P_t} (θ_i^t − θ^{t−1})
= h + (α/m) Σ_{P_t} Δ_i over all m clients, and sets θ^t = mean_{P_t} θ_i^t − h/α: the
mean of the participants' models (uniform weights, FedAvg's step with η_s = 1) moved by
−h/α.

α = 0 removes both terms (h stays 0), which is FedAvg with uniform weights exactly.
h_i live in the client store (CPU), h in the server state. Defaults: α = 0.01 [default,
the paper's CIFAR value].
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from typing_extensions import override

from channels.validation import as_float
from wirelessfl.algorithms.base import Environment, RoundReport, ServerState
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
from wirelessfl.engine import client_store
from wirelessfl.engine.batch import ClientBatch, FoldedResults
from wirelessfl.engine.client import (
    Carry,
    ClientResult,
    ClientTask,
    DeltaFold,
    LocalHParams,
    LocalSGD,
)
from wirelessfl.engine.client_store import StateStack
from wirelessfl.models.base import FLModel, Params
from wirelessfl.net.digital import Delivery
from wirelessfl.server.state import AlgorithmState, RoundPlan


@dataclass(frozen=True)
class FedDynHParams(FedAvgHParams):
    """FedDyn: FedAvg's sampling with a dynamic regulariser of weight α (uniform weights)."""

    alpha: float = 0.01
    weighting: str = "uniform"
    state_dtype: str = "float32"

    def __post_init__(self) -> None:
        super().__post_init__()
        as_float("alpha", self.alpha, lo=0, hi=1e6)
        client_store.store({}, self.state_dtype)  # checks the dtype
        if self.server_optimizer != "sgd" or self.server_lr != 1.0:
            raise ValueError("FedDyn's server step is the mean of the models moved by -h/alpha; "
                             "use server_optimizer sgd with server_lr 1")


class DynamicSGD(LocalSGD):
    """Local SGD on g − h_i + α (θ − θ_start); the client state is h_i."""

    elementwise = True  # its gradient hooks act entry by entry: safe on stacked clients

    def __init__(self, model: FLModel, hp: LocalHParams, alpha: float,
                 state_dtype: str = "float32") -> None:
        super().__init__(model, hp)
        self.alpha, self.state_dtype = alpha, state_dtype

    @override
    def context(self, task: ClientTask) -> dict[str, Params]:
        if task.state is None:
            return {"h": {k: torch.zeros_like(v) for k, v in task.params.items()}}
        return {"h": client_store.load(task.state, task.params)}

    @override
    def stacked_context(self, batch: ClientBatch, device: torch.device) -> dict[str, Params] | None:
        """:meth:`context` of every client at once: the h_i gathered (one op a key; zeros: none)."""
        like = {k: v.detach().to(device) for k, v in batch.starts[0].items()}
        h = client_store.gathered(batch.states, like)
        return {"h": h if h is not None else client_store.repeated(None, len(batch), like)}

    @override
    def stacked_states(self, batch: ClientBatch, carry: Carry, deltas: Params,
                       steps: np.ndarray) -> StateStack | None:
        """h_i + α Δ_i of every client that stepped (:meth:`client_final`'s, row by row)."""
        stepped = (steps > 0) & bool(self.alpha)
        if not stepped.any():  # h_i stay
            return (StateStack({}, {"": stepped}, batch.states, None, self.state_dtype)
                    if batch.states is not None else None)
        h = carry.ctx["h"]
        new = {k: torch.add(h[k], d, alpha=self.alpha).contiguous() for k, d in deltas.items()}
        return StateStack({"": new}, {"": stepped}, batch.states, None, self.state_dtype)

    @override
    def correct(self, grads: Params, params: Params, start: Params,
                ctx: dict[str, Params]) -> Params:
        if not self.alpha:
            return grads
        return {k: torch.add(g - ctx["h"][k], params[k] - start[k], alpha=self.alpha)
                for k, g in grads.items()}

    drifts = True  # −h + α (θ − θ_start) does not depend on g: the fused step takes it

    @override
    def drift_step(self, name, p, start, ctx, lr):
        if self.alpha:  # θ − γ (α (θ − θ_start) − h)
            p.lerp_(start[name], lr * self.alpha).add_(ctx["h"][name], alpha=lr)

    @override
    def client_final(self, task: ClientTask, carry: Carry) -> ClientResult:
        res = super().client_final(task, carry)
        if not self.alpha or not res.num_steps:
            return dataclasses.replace(res, state=task.state)
        h = {k: torch.add(carry.ctx["h"][k], res.delta[k], alpha=self.alpha) for k in res.delta}
        return dataclasses.replace(res, state=client_store.store(h, self.state_dtype))


@dataclass(frozen=True)
class FedDynState(AlgorithmState):
    """The server's h, the mean of every client's h_i (None: zero)."""

    h: Params | None = None


class FedDyn(FedAvg):
    """FedDyn over FedAvg's sampling and aggregation."""

    uses_uplink = True  # its server phase aggregates through the uplink (combine)

    state_type = FedDynState
    stacked_client_store = True  # h_i: one stacked tensor per parameter
    folds_deltas = False  # its h sums the Δ_i itself (so no robust rule, attack or DP)
    folds_states = True  # the h_i written to the store as the clients finish

    def __init__(self, env: Environment, hp: FedDynHParams = FedDynHParams()) -> None:
        super().__init__(env, hp)
        self.hp: FedDynHParams = hp
        self.update = DynamicSGD(env.model, env.local, hp.alpha, hp.state_dtype)
        if env.uplink is not None and hp.weighting != "uniform":
            raise ValueError("FedDyn over the air needs weighting: uniform: its h sums the "
                             "clients' updates, which the server knows only as the received "
                             "(uniform) mean times their count")

    @override
    def delta_fold(self, plan: RoundPlan) -> DeltaFold | None:
        """FedAvg's exact fold, with uniform weights only: h needs Σ_i Δ_i = |P_t| × their mean."""
        return self.exact_fold(plan) if self.hp.weighting == "uniform" else None

    @override
    def server_update(self, state: ServerState, plan: RoundPlan,
                      results: list[ClientResult],
                      delivery: Delivery | None = None) -> tuple[ServerState, RoundReport]:
        update, _, info = self.combine(state, results)
        mean, _ = self.server_opt.step(state.params, update, None)  # mean_{P_t} θ_i^t (η_s = 1)
        alpha, m = self.hp.alpha, self.env.num_clients
        h = self.opt_state(state).h
        if alpha:
            if isinstance(results, FoldedResults):  # the uniform mean times the count
                total = {k: len(results) * v for k, v in results.fold.mean().items()}
            elif self.aggregator.exact:
                total = {k: sum(r.delta[k] for r in results) for k in update}
            else:  # over the air the server has only the received mean: Σ_i Δ_i = |P_t| × it
                total = {k: len(results) * v for k, v in update.items()}
            h = {k: (0 if h is None else h[k]) + alpha / m * total[k] for k in update}
            mean = {k: v - h[k] / alpha for k, v in mean.items()}
        return self.finish_round(state, mean, FedDynState(h), results, infos=(info,))
