"""SCAFFOLD (Karimireddy et al., ICML 2020) and the server-momentum forms of Cheng et al. 2023.

One local rule covers SCAFFOLD, SCAFFOLD-M and FedAvg-M (``docs/papers/fadamgc.md`` §3.3–3.4): client i
steps along d = β (g − c_i + c) + (1 − β) u, with u the server's momentum (the mean local
direction of the previous round) and, without control variates, c = c_i = 0. β = 1 and no
control variates is FedAvg; β = 1 with them is SCAFFOLD; β < 1 (0.1 [default]) gives the
-M forms. After K steps c_i⁺ = (1/K) Σ_k g_k, which for local SGD without momentum is
c_i − c + (Δ/(ηK) − (1 − β) u)/β (option II when β = 1). The server sets
u ← mean(Δ)/(η_l K̄) (K̄: the mean local steps of the round) and x ← x − η_g mean(Δ).

SCAFFOLD, option II control variates:

Client i (state c_i, the server's c sent with the model): y ← y − η_l (g − c_i + c) for K
steps, then c_i⁺ = c_i − c + (x − y)/(K η_l); it uploads Δy and Δc_i = c_i⁺ − c_i. Server:
x ← x + η_g mean_S(Δy) (through its :class:`~wirelessfl.server.optimizers.ServerOptimizer`, η_g = 1
by default), c ← c + (1/N) Σ_S Δc_i (``c_update: population``, the paper) or
c + Σ_S p_i Δc_i with the round's aggregation weights (``weighted``, the dynamic-clients code,
``docs/papers/dynamic_clients.md`` §2.7). c and c_i start at zero [default]; c_i live in
``ServerState.client_states`` on the CPU.

``reference_quirks`` reproduces the dynamic-clients reference code: no (c − c_i) correction
in the local loop, and the client learning rate as the server step.

The correction is the local rule's :meth:`~wirelessfl.engine.local_sgd.LocalSGD.correct`, so both
engines run it. With zero control variates and η_g = 1 a round is a FedAvg round.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from typing_extensions import override

from channels.validation import as_float
from wirelessfl.algorithms.base import (
    Environment,
    RoundReport,
    ServerState,
)
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams, client_weights
from wirelessfl.engine import client_store
from wirelessfl.engine.batch import ClientBatch, ClientResults, per_row
from wirelessfl.engine.client import (
    Carry,
    ClientResult,
    ClientTask,
    LocalHParams,
    LocalSGD,
)
from wirelessfl.engine.client_store import StateStack, gather_ids, gathered, holds, take_rows
from wirelessfl.models.base import FLModel, Params
from wirelessfl.net.digital import Delivery
from wirelessfl.server.optimizers import ServerOptState
from wirelessfl.server.state import AlgorithmState, RoundPlan


@dataclass(frozen=True)
class SCAFFOLDHParams(FedAvgHParams):
    """SCAFFOLD: control variates correct the client drift (``server_lr`` is η_g).

    Attributes
    ----------
    beta : float
        β, the weight of the fresh (corrected) gradient; 1 = no server momentum.
    control_variates : bool
        Use c and c_i (False: FedAvg-M).
    c_update : str
        ``population`` (c += Σ Δc_i / N) or ``weighted`` (c += Σ p_i Δc_i).
    reference_quirks : bool
        The dynamic-clients reference code (no local correction, server step = client lr).
    state_dtype : str
        dtype of the stored c_i (``float32``, or ``float16``/``bfloat16`` to halve the store).
    """

    beta: float = 1.0
    control_variates: bool = True
    c_update: str = "population"
    reference_quirks: bool = False
    state_dtype: str = "float32"

    def __post_init__(self) -> None:
        super().__post_init__()
        as_float("beta", self.beta, lo=0, hi=1, lo_open=True)
        client_store.store({}, self.state_dtype)  # checks the dtype
        if self.c_update not in ("population", "weighted"):
            raise ValueError(f"`c_update` must be population or weighted, got {self.c_update!r}")


@dataclass(frozen=True)
class SCAFFOLDMHParams(SCAFFOLDHParams):
    """SCAFFOLD-M (``docs/papers/fadamgc.md`` §3.4): β = 0.1 [default], control variates, uniform weights."""

    beta: float = 0.1
    weighting: str = "uniform"


@dataclass(frozen=True)
class FedAvgMHParams(SCAFFOLDHParams):
    """FedAvg-M (``docs/papers/fadamgc.md`` §3.3): β = 0.1 [default], no control variates, uniform weights."""

    beta: float = 0.1
    control_variates: bool = False
    weighting: str = "uniform"


class ControlledSGD(LocalSGD):
    """Local SGD along β (g − c_i + c) + (1 − β) u; returns c_i⁺ as the client state.

    The task's ``broadcast`` is ``{"c": c, "u": u}`` (either may be missing: zero); its
    ``state`` is c_i. Without ``control_variates`` there is no c, no c_i and no new state.
    """

    elementwise = True  # its gradient hooks act entry by entry: safe on stacked clients

    def __init__(self, model: FLModel, hp: LocalHParams, corrected: bool = True,
                 beta: float = 1.0, control_variates: bool = True,
                 state_dtype: str = "float32") -> None:
        super().__init__(model, hp)
        self.corrected, self.beta, self.control_variates = corrected, beta, control_variates
        self.state_dtype = state_dtype

    @override
    def context(self, task: ClientTask) -> dict[str, Params]:
        sent = task.broadcast or {}
        c, u, ci = sent.get("c"), sent.get("u"), task.state

        def tree(x: Params | None) -> Params:
            return (client_store.load(x, task.params) if x is not None
                    else {k: torch.zeros_like(v) for k, v in task.params.items()})

        ctx = {"c_diff": {k: a - b for (k, a), b in zip(tree(c).items(), tree(ci).values())}}
        if self.beta < 1:
            ctx["u"] = tree(u)
        return ctx

    @override
    def stacked_context(self, batch: ClientBatch, device: torch.device) -> dict[str, Params] | None:
        """:meth:`context` of every client at once: c − c_i stacked (the c_i gathered once)."""
        if (sent := batch.shared_broadcast) is None:  # one per client: ask each client
            return None
        like, n = batch.starts[0], len(batch)
        ci = gathered(batch.states, like)

        c = client_store.repeated(sent.get("c"), n, like)
        ctx = {"c_diff": {k: c[k] - ci[k] if ci is not None else c[k] for k in like}}
        if self.beta < 1:
            ctx["u"] = client_store.repeated(sent.get("u"), n, like)
        return ctx

    @override
    def stacked_states(self, batch: ClientBatch, carry: Carry, deltas: Params,
                       steps: np.ndarray) -> StateStack | None:
        """c_i⁺ of every client from the stacked Δ (:meth:`client_final`'s, row by row)."""
        if not self.control_variates:
            return None
        lr, ctx = carry.lr, carry.ctx
        stepped = (steps > 0) & (lr != 0)
        if not stepped.any():  # no step taken: the states stay
            return (StateStack({}, {"": stepped}, batch.states, None, self.state_dtype)
                    if batch.states is not None else None)
        first = next(iter(deltas.values()))
        scale = torch.as_tensor(np.where(stepped, 1.0 / np.maximum(steps, 1) / (lr or 1.0), 0.0),
                                dtype=first.dtype, device=first.device)
        u = ctx.get("u")
        new = {k: ((per_row(scale, d) * d - (1 - self.beta) * u[k] if u is not None
                    else per_row(scale, d) * d) / self.beta - ctx["c_diff"][k]).contiguous()
               for k, d in deltas.items()}
        return StateStack({"": new}, {"": stepped}, batch.states, None, self.state_dtype)

    @override
    def correct(self, grads: Params, params: Params, start: Params,
                ctx: dict[str, Params]) -> Params:
        if self.corrected and self.control_variates:
            grads = {k: g + ctx["c_diff"][k] for k, g in grads.items()}
        if self.beta < 1:
            grads = {k: torch.lerp(ctx["u"][k], g, self.beta) for k, g in grads.items()}
        return grads

    @property
    def drifts(self) -> bool:
        """With β = 1 the correction c − c_i does not depend on g: the fused step takes it."""
        return self.beta == 1

    @override
    def drift_step(self, name, p, start, ctx, lr):
        if self.corrected and self.control_variates:
            p.sub_(ctx["c_diff"][name], alpha=lr)

    @override
    def client_final(self, task: ClientTask, carry: Carry) -> ClientResult:
        res = super().client_final(task, carry)
        if not self.control_variates:
            return dataclasses.replace(res, state=None)
        if res.num_steps == 0 or carry.lr == 0:  # no step taken: c_i stays
            return dataclasses.replace(res, state=task.state)
        # c_i⁺ = (1/K) Σ g_k = c_i − c + (Δ/(ηK) − (1 − β) u)/β
        scale = 1.0 / (res.num_steps * carry.lr)
        u = carry.ctx.get("u")
        new = {k: (scale * res.delta[k] - (1 - self.beta) * u[k] if u is not None
                   else scale * res.delta[k]) / self.beta - carry.ctx["c_diff"][k]
               for k in res.delta}
        return dataclasses.replace(res, state=client_store.store(new, self.state_dtype))


@dataclass(frozen=True)
class SCAFFOLDState(AlgorithmState):
    """SCAFFOLD's server state (unset: zero).

    Attributes
    ----------
    c : Params or None
        The server control variate c (with ``control_variates``).
    u : Params or None
        The server momentum u, the mean local direction of the last round (β < 1).
    server : ServerOptState or None
        The server optimiser's state.
    """

    c: Params | None = None
    u: Params | None = None
    server: ServerOptState | None = None


class SCAFFOLD(FedAvg):
    """SCAFFOLD over FedAvg's sampling, weighting and server optimiser."""

    uses_uplink = True  # its server phase aggregates through the uplink (combine)

    state_type = SCAFFOLDState
    stacked_client_store = True  # c_i: one stacked tensor per parameter

    def __init__(self, env: Environment, hp: SCAFFOLDHParams = SCAFFOLDHParams()) -> None:
        super().__init__(env, hp)
        self.hp: SCAFFOLDHParams = hp
        self.update = ControlledSGD(env.model, env.local, corrected=not hp.reference_quirks,
                                    beta=hp.beta, control_variates=hp.control_variates,
                                    state_dtype=hp.state_dtype)
        if hp.reference_quirks:
            self.server_opt.lr = env.local.lr

    def _c_u(self, state: ServerState) -> tuple[Params, Params]:
        opt = self.opt_state(state)
        zeros = {k: torch.zeros_like(v) for k, v in state.params.items()}
        return opt.c or zeros, opt.u or zeros

    def broadcast(self, state: ServerState, clients: np.ndarray) -> dict[str, Params]:
        """C (with control variates) and u (β < 1), sent with the model."""
        c, u = self._c_u(state)
        return {**({"c": c} if self.hp.control_variates else {}),
                **({"u": u} if self.hp.beta < 1 else {})}

    def upload_vectors(self, plan: RoundPlan, result: ClientResult) -> float:
        """Δ_i and, with control variates, Δc_i."""
        return 2.0 if self.hp.control_variates else 1.0

    folds_deltas = True  # server_update reads the Δ_i only through combine

    @override
    def second_vector(self) -> str | None:
        return "control-variate changes" if self.hp.control_variates else None

    folds_states = True  # its c_i⁺ go to the store as clients finish, their Σ a_i Δc_i folded

    @override
    def state_fold(self, state: ServerState, plan: RoundPlan,
                   weights: np.ndarray | None = None):
        """The c_i⁺ written as clients finish, with Σ_i a_i Δc_i (a_i of :meth:`_change_weights`).

        Not under DP: the Δc_i are then clipped and noised as one release of the stack.
        """
        if self.hp.control_variates and self.hp.dp != "none":
            return None
        return super().state_fold(state, plan, self._change_weights(np.asarray(plan.clients))
                                  if self.hp.control_variates else None)

    def _change_weights(self, clients: np.ndarray) -> np.ndarray:
        """a_i of c ← c + Σ_i a_i Δc_i: 1/N (``population``), or p_i = w_i / Σ_round w (``weighted``)."""
        if self.hp.c_update == "population":
            return np.full(len(clients), 1.0 / self.env.num_clients)
        w = client_weights(self.env.num_samples[clients.astype(np.int64)], self.hp.weighting)
        return w / w.sum()

    def _state_changes(self, state: ServerState, results: ClientResults
                       ) -> tuple[Params | None, np.ndarray]:
        """Δc_i = c_i⁺ − c_i of the clients that sent a state, stacked, and which sent one.

        A client new to the store had c_i = 0. One gather of the stored and the new states
        per parameter, not a tree per client.
        """
        sent = holds(results.states, len(results))
        if not sent.any():
            return None, sent
        zero = {k: torch.zeros_like(v) for k, v in state.params.items()}
        now = gathered(take_rows(results.states, np.flatnonzero(sent)), zero)
        before = gather_ids(state.client_states, results.clients[sent], zero)
        return ({k: now[k] - before[k] for k in zero} if before is not None else now), sent

    @override
    def server_update(self, state: ServerState, plan: RoundPlan,
                      results: list[ClientResult],
                      delivery: Delivery | None = None) -> tuple[ServerState, RoundReport]:
        t, hp = state.round, self.hp
        c, _ = self._c_u(state)
        update, w, info = self.combine(state, results)
        infos = [info]
        params, server = self.server_opt.step(state.params, update, self.opt_state(state).server)
        results = ClientResults.from_list(results)
        steps = float(results.num_steps.mean())
        lr = self.client_lr(t)
        lr = self.env.local.lr if lr is None else lr
        u = {k: (v / (lr * steps) if lr * steps > 0 else torch.zeros_like(v))
             for k, v in update.items()}
        folded = getattr(getattr(results, "fold", None), "states", None)
        if folded is not None:  # Σ_i a_i Δc_i summed as the clients finished
            got = folded.change()
            dc, coef = None, ()
            if got is not None:
                c = {k: c[k] + got[k] for k in c}
        else:
            dc, sent = self._state_changes(state, results)
            coef = (np.full(int(sent.sum()), 1.0 / self.env.num_clients)
                    if hp.c_update == "population" else w[sent] / w.sum())
        if dc is not None and (self.aggregator.exact or not len(coef)):
            got = self.release_second(state, dc, coef)  # (under dp: clipped and noised)
            c = {k: c[k] + got[k] for k in c}
        elif dc is not None:  # the Δc_i go up over the air too
            got, more = self.uplink_sum(state, dc, coef, ids=results.clients[sent])
            infos.append(more)
            c = {k: c[k] + got[k] for k in c}
        new = SCAFFOLDState(c if hp.control_variates else None, u if hp.beta < 1 else None, server)
        return self.finish_round(state, params, new, results, infos=infos,
                                 vectors_up=2 if hp.control_variates else 1,
                                 vectors_down=1 + len(plan.broadcast))
