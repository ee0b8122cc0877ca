"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

Client i (state c_i, the server's c sent with the model): y ← y − η_l (g − c_i + c) for K
steps, then c_i⁺ = c_i − c + (x − y)/(K η_l); it uploads Δy and Δc_i = c_i⁺ − c_i. Server:
x ← x + η_g mean_S(Δy) (through its :class:`~wirelessfl.server_opt.ServerOptimizer`, η_g = 1
by default), c ← c + (1/N) Σ_S Δc_i (``c_update: population``, the paper) or
c + Σ_S p_i Δc_i with the round's aggregation weights (``weighted``, the dynamic-clients code,
``dynamic_clients.md`` §2.7). c and c_i start at zero [default]; c_i live in
``ServerState.client_states`` on the CPU.

``reference_quirks`` reproduces the dynamic-clients reference code: no (c − c_i) correction
in the local loop, and the client learning rate as the server step.

The correction is the local rule's :meth:`~wirelessfl.client.LocalSGD.correct`, so both
engines run it. With zero control variates and η_g = 1 a round is a FedAvg round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from wirelessfl.algorithms.base import (
    Environment,
    RoundReport,
    ServerState,
    client_diagnostics,
    num_params,
)
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams, client_weights
from wirelessfl.client import Carry, ClientResult, ClientTask, LocalHParams, LocalSGD
from wirelessfl.models.base import FLModel, Params


@dataclass(frozen=True)
class SCAFFOLDHParams(FedAvgHParams):
    """FedAvg's hyperparameters (``server_lr`` is η_g) and SCAFFOLD's options."""

    c_update: str = "population"
    reference_quirks: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.c_update not in ("population", "weighted"):
            raise ValueError(f"`c_update` must be population or weighted, got {self.c_update!r}")


class ControlledSGD(LocalSGD):
    """Local SGD with the gradient corrected by c − c_i; returns c_i⁺ as the client state."""

    def __init__(self, model: FLModel, hp: LocalHParams, corrected: bool = True) -> None:
        super().__init__(model, hp)
        self.corrected = corrected

    def context(self, task: ClientTask) -> dict[str, Params]:  # noqa: D102
        c, ci = task.broadcast, task.state
        like = task.params
        diff = {k: (c[k] if c is not None else torch.zeros_like(v)).to(v.device)
                - (ci[k].to(v.device) if ci is not None else torch.zeros_like(v))
                for k, v in like.items()}
        return {"c_diff": diff}

    def correct(self, grads: Params, params: Params, start: Params,  # noqa: D102
                ctx: dict[str, Params]) -> Params:
        if not self.corrected:
            return grads
        return {k: g + ctx["c_diff"][k] for k, g in grads.items()}

    def client_final(self, task: ClientTask, carry: Carry) -> ClientResult:  # noqa: D102
        res = super().client_final(task, carry)
        if res.num_steps == 0:
            return res
        # c_i⁺ = c_i − c + Δ/(K η) = Δ/(K η) − c_diff
        scale = 1.0 / (res.num_steps * carry.lr)
        new = {k: (scale * res.delta[k] - carry.ctx["c_diff"][k]).cpu() for k in res.delta}
        return ClientResult(res.client, res.delta, res.num_samples, res.num_steps, res.loss, new)


class SCAFFOLD(FedAvg):
    """SCAFFOLD over FedAvg's sampling, weighting and server optimiser."""

    def __init__(self, env: Environment, hp: SCAFFOLDHParams = SCAFFOLDHParams()) -> None:
        super().__init__(env, hp)
        self.hp: SCAFFOLDHParams = hp
        self.update = ControlledSGD(env.model, env.local, corrected=not hp.reference_quirks)
        if hp.reference_quirks:
            self.server_opt.lr = env.local.lr

    def apply(self, state: ServerState) -> tuple[ServerState, RoundReport]:  # noqa: D102
        t, seeds, hp = state.round, self.env.seeds, self.hp
        opt = dict(state.opt_state or {})
        c = opt.pop("c", None) or {k: torch.zeros_like(v) for k, v in state.params.items()}
        clients = self.sampler.sample(self.env.population.active(t), seeds.generator("sampling", t))
        results = self.train_clients([state.params] * len(clients), clients, t,
                                     states=state.client_states, broadcast=c)
        w = client_weights(np.array([r.num_samples for r in results]), hp.weighting)
        update = self.aggregator.aggregate([r.delta for r in results], w,
                                           seeds.generator("noise", t))
        params, server = self.server_opt.step(state.params, update, opt.pop("server", None))
        zero = {k: torch.zeros_like(v, device="cpu") for k, v in state.params.items()}
        dc = [{k: r.state[k] - state.client_states.get(r.client, zero)[k] for k in zero}
              for r in results if r.state is not None]
        coef = (np.full(len(dc), 1.0 / self.env.num_clients) if hp.c_update == "population"
                else w[[r.state is not None for r in results]] / w.sum())
        c = {k: c[k] + sum(float(a) * d[k].to(c[k].device) for a, d in zip(coef, dc))
             for k in c}
        states = {**state.client_states, **{r.client: r.state for r in results
                                             if r.state is not None}}
        loss, diag = client_diagnostics(results)
        new = ServerState(params, t + 1, {"c": c, "server": server}, states)
        d = float(num_params(state.params))
        return new, RoundReport(uplink_params=2 * d, train_loss=loss, clients=diag)
