"""MOON (Li, He and Song, CVPR 2021): model-contrastive federated learning.

``docs/papers/dynamic_clients.md`` §2.7: the client minimises CE + μ · CE([cos(z, z_g), cos(z, z_prev)]/τ, 0)
on each batch, with z the features of the local model (the models' ``features=True``
output: the penultimate ReLU layer, or the pooled ResNet features), z_g those of the model
the server sent (the round's start) and z_prev those of the client's own previous local
model, kept in the client store (:mod:`wirelessfl.engine.client_store`, CPU) across rounds; a client
without one uses the received model [default]. The server is FedAvg's. Defaults: μ = 1, τ = 1.

The contrastive term is the local rule's :meth:`~wirelessfl.engine.local_sgd.LocalSGD.objective`, so
both engines run it (the batched one vmaps it over the stacked clients and their stacked
previous models). Departure, stated: the CIFAR setting's separate projection head
(512 → 512 → 256) is not built; z is the backbone's pooled features.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import functional_call
from typing_extensions import override

from channels.validation import as_float
from wirelessfl.algorithms.base import Environment
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
from wirelessfl.engine import client_store
from wirelessfl.engine.batch import ClientBatch, per_row
from wirelessfl.engine.client import (
    Carry,
    ClientResult,
    ClientTask,
    LocalHParams,
    LocalSGD,
    weighted_cross_entropy,
)
from wirelessfl.engine.client_store import StateStack
from wirelessfl.models.base import FLModel, Params


@dataclass(frozen=True)
class MOONHParams(FedAvgHParams):
    """MOON: FedAvg with a model-contrastive term (μ, τ) against the previous local model."""

    mu: float = 1.0
    tau: float = 1.0
    state_dtype: str = "float32"

    def __post_init__(self) -> None:
        super().__post_init__()
        as_float("mu", self.mu, lo=0, hi=1e6)
        as_float("tau", self.tau, lo=0, hi=1e6, lo_open=True)
        client_store.store({}, self.state_dtype)


def _unit(z: torch.Tensor) -> torch.Tensor:
    """``z / max(‖z‖₂, 1e-8)`` along the last axis.

    The cosine similarity of two such is the sum of their product: the same numbers as
    ``F.cosine_similarity``, which normalises both sides each call (z twice for the two
    anchors, and the anchors inside the backward graph).
    """
    return z / torch.linalg.vector_norm(z, dim=-1, keepdim=True).clamp_min(1e-8)


class ContrastiveSGD(LocalSGD):
    """Local SGD on CE + μ · the model-contrastive loss; returns the local model as state."""

    params_only_in_model = True  # the objective calls the model; frozen models are ctx
    state_reads_end = True  # its state is the local model it ends with

    def __init__(self, model: FLModel, hp: LocalHParams, mu: float, tau: float,
                 state_dtype: str = "float32") -> None:
        if "features" not in inspect.signature(model.forward).parameters:
            raise ValueError(f"MOON needs a model with features (linear, fcnn, mlp, lenet5, "
                             f"svhn_cnn, resnet18, resnet18_bn); {type(model).__name__} has none")
        super().__init__(model, hp)
        self.mu, self.tau, self.state_dtype = mu, tau, state_dtype

    def context(self, task: ClientTask) -> dict[str, Params]:
        """The client's previous local model (the received one for a client without one)."""
        prev = task.state
        prev = (client_store.load(prev, task.params) if prev is not None
                else {k: v.detach() for k, v in task.params.items()})
        return {"prev": prev}

    @override
    def stacked_context(self, batch: ClientBatch, device: torch.device) -> dict[str, Params] | None:
        """:meth:`context` of every client at once: the previous models gathered (one op a key)."""
        if not batch.one_start():  # starts of their own: ask each client
            return None
        like, n = batch.starts[0], len(batch)
        start = {k: v.detach().to(device) for k, v in like.items()}
        prev = client_store.gathered(batch.states, start)
        if prev is None:
            return {"prev": client_store.repeated(start, n, start)}
        held = torch.as_tensor(client_store.holds(batch.states, n), device=device)
        return {"prev": {k: torch.where(per_row(held, prev[k]), prev[k], v)
                         for k, v in start.items()}}

    @override
    def stacked_states(self, batch: ClientBatch, carry: Carry, deltas: Params,
                       steps: np.ndarray) -> StateStack:
        """Every client's end model as its new state (:meth:`client_final`'s, row by row)."""
        ends = {k: v.contiguous() for k, v in carry.params.items()}
        return StateStack({"": ends}, {"": np.ones(len(batch), bool)}, batch.states, None,
                          self.state_dtype)

    def _features(self, params: Params, buffers: Params, x: torch.Tensor) -> torch.Tensor:
        """Features of a frozen model (its head is not run); buffers on a copy (no statistics).

        Skipping the head skips its dropout draws too; every draw before z is made as before
        and in the same order, so the numbers are those of the full forward, except where a
        model draws before z (LeNet-5's fc1 dropout, augmentation): the previous model's
        draws then come one call earlier in the client's stream (other numbers, the same law).
        """
        frozen = {k: v.clone() for k, v in buffers.items()}
        z = functional_call(self.model, {**params, **frozen}, (x,), {"features": "only"})
        return z[1] if isinstance(z, tuple) else z  # a model that knows only features=True

    @override
    def objective(self, params, buffers, start, x, y, w, ctx):
        out, z = functional_call(self.model, {**params, **buffers}, (x,), {"features": True})
        data = weighted_cross_entropy(out, y, w)
        with torch.no_grad():  # z_g: the received model is the start of local training
            zg = _unit(self._features(start, buffers, x))
            zp = _unit(self._features(ctx["prev"], buffers, x))
        zn = _unit(z)  # normalised once for both similarities
        logits = torch.stack([(zn * zg).sum(-1), (zn * zp).sum(-1)], -1) / self.tau
        target = torch.zeros(len(y), dtype=torch.long, device=y.device)
        contrast = weighted_cross_entropy(logits, target, w)
        return data + self.mu * contrast, data

    @override
    def client_final(self, task: ClientTask, carry: Carry) -> ClientResult:
        res = super().client_final(task, carry)
        return dataclasses.replace(res, state=client_store.store(carry.params, self.state_dtype))


class MOON(FedAvg):
    """FedAvg with :class:`ContrastiveSGD` clients (previous local models in the store)."""

    stacked_client_store = True  # z_prev's models: one stacked tensor per parameter
    folds_states = True  # written to the store as the clients finish

    def __init__(self, env: Environment, hp: MOONHParams = MOONHParams()) -> None:
        super().__init__(env, hp)
        self.update = ContrastiveSGD(env.model, env.local, hp.mu, hp.tau, hp.state_dtype)

    @override
    def session_client_states(self, state):
        return state.client_states  # z_prev persists across rounds and sessions (§2.7)
