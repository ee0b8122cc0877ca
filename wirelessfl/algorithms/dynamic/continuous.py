"""Continuous: the dynamic-clients paper's distillation baseline.

``docs/papers/dynamic_clients.md`` §3 item 3.

Each client minimises CE + λ_KL · KL(softmax(z_teacher) ‖ softmax(z_student)) per batch
("batchmean": the per-sample KL summed over classes, averaged over the batch) with
FedAvg-style local training and aggregation [CODE]. The teacher is frozen: the model the
current session started from. With the ``previous`` initial-model rule that is the previous
session's final global model, and the random initial model in session P (the first
post-pilot session), as the spec states. The teacher is set at the first round of each
session (the session reset clears the algorithm state) and carried in the server state, so
a resumed run keeps it. λ_KL = ``kl_coefficient`` = 1.0 [CODE].

The teacher's forward pass runs like MOON's frozen passes: the module in training mode
(BatchNorm on the batch's statistics, its running statistics left untouched) [default].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call
from typing_extensions import override

from channels.validation import as_float
from wirelessfl.algorithms.base import Environment, RoundReport, ServerState
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
from wirelessfl.engine import client_store
from wirelessfl.engine.client import ClientResult, ClientTask, LocalHParams, LocalSGD, weighted_cross_entropy
from wirelessfl.models.base import FLModel, Params
from wirelessfl.net.digital import Delivery
from wirelessfl.server.optimizers import ServerOptState
from wirelessfl.server.state import AlgorithmState, RoundPlan


@dataclass(frozen=True)
class ContinuousHParams(FedAvgHParams):
    """Continuous: FedAvg distilling from the session's initial model (weight λ_KL)."""

    kl_coefficient: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        as_float("kl_coefficient", self.kl_coefficient, lo=0, hi=1e6)


class DistillSGD(LocalSGD):
    """Local SGD on CE + λ KL(teacher ‖ student); the teacher comes with the broadcast."""

    params_only_in_model = True  # the objective calls the model; frozen models are ctx

    def __init__(self, model: FLModel, hp: LocalHParams, kl_coefficient: float) -> None:
        super().__init__(model, hp)
        self.kl = kl_coefficient

    @override
    def context(self, task: ClientTask) -> dict[str, Params]:
        return {"teacher": client_store.load(task.broadcast["teacher"], task.params)}

    @override
    def objective(self, params, buffers, start, x, y, w, ctx):
        out = functional_call(self.model, {**params, **buffers}, (x,))
        data = weighted_cross_entropy(out, y, w)
        frozen = {k: v.clone() for k, v in buffers.items()}  # the teacher leaves no statistics
        with torch.no_grad():
            teacher = functional_call(self.model, {**ctx["teacher"], **frozen}, (x,))
        kl = (F.softmax(teacher, -1) * (F.log_softmax(teacher, -1) - F.log_softmax(out, -1))
              ).sum(-1)
        return data + self.kl * (kl * w).sum(), data


@dataclass(frozen=True)
class ContinuousState(AlgorithmState):
    """The session's teacher (its initial model) and the server optimiser's state."""

    teacher: Params | None = None
    server: ServerOptState | None = None


class Continuous(FedAvg):
    """FedAvg with :class:`DistillSGD` clients and the session's initial model as teacher."""

    uses_uplink = True  # its server phase aggregates through the uplink (combine)

    state_type = ContinuousState

    def __init__(self, env: Environment, hp: ContinuousHParams = ContinuousHParams()) -> None:
        super().__init__(env, hp)
        self.update = DistillSGD(env.model, env.local, hp.kl_coefficient)

    def broadcast(self, state: ServerState, clients: np.ndarray) -> dict[str, Params]:
        """The teacher: the model at the first round of the session (or of the run)."""
        teacher = self.opt_state(state).teacher
        return {"teacher": teacher if teacher is not None else
                {k: v.detach().clone() for k, v in state.params.items()}}

    folds_deltas = True  # server_update reads the Δ_i only through combine

    @override
    def server_update(self, state: ServerState, plan: RoundPlan,
                      results: list[ClientResult],
                      delivery: Delivery | None = None) -> tuple[ServerState, RoundReport]:
        update, _, info = self.combine(state, results)
        params, server = self.server_opt.step(state.params, update, self.opt_state(state).server)
        return self.finish_round(state, params, ContinuousState(plan.broadcast["teacher"], server),
                                 results, infos=(info,))
