"""The two methods' aggregations (``docs/papers/rafed.md`` §2.2, §2.3) and the coverage they log.

With Γ_q = Σ_n m_{n,q} the coordinate-wise coverage of round q:

- **RA-Fed** (§2.2): θ_{q+1} = θ_q − (Σ_n m_{n,q} ⊙ D_{q,n}) ⊘ max(Γ_q, 1);
- **RAM-Fed** (§2.3): Δ = D/γ_q, v_q = ū + (Σ_n m ⊙ (Δ − u_n)) ⊘ max(Γ_q, 1),
  θ_{q+1} = θ_q − γ_q v_q, then u_n ← u_n + m ⊙ (Δ − u_n) and ū ← ū + δu/N.

The clients come in stacks of equal submodel sizes; each stack's sliced updates are added
into one full-size accumulator at their indices with one accumulating operator per parameter
(no N full-size copies, no Python per client); the memories u_n are rows of a stacked
client store (CPU), gathered and written once per stack.

Over the air (``network.aggregation: over_the_air``) the sum Σ_n w_n m_n ⊙ (·) is what the
clients' simultaneous transmissions add up to: each client sends its update scattered into
a full-size vector (zeros off its mask), the server receives the weighted sum plus AirComp
noise, and divides by the coverage it knows from the masks, so a coordinate few clients
cover gets proportionally more noise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from wirelessfl.engine import client_store
from wirelessfl.engine.batch import per_row
from wirelessfl.engine.client_store import ClientStore, StateStack
from wirelessfl.models.base import Params, UnitGroup
from wirelessfl.server.state import AlgorithmState, RoundReport
from wirelessfl.server.submodel import Submodels


@dataclass(frozen=True)
class RAFedState(AlgorithmState):
    """RAM-Fed's Σ_n u_n (float32, CPU) and Γ*, the smallest coordinate coverage seen so far."""

    usum: Params | None = None
    gamma_star: float | None = None


@dataclass(frozen=True)
class SubmodelReport(RoundReport):
    """A submodel round's report: coverage Γ_q (§2.1), sizes and what the round cost.

    Attributes
    ----------
    coverage_min, coverage_mean : float
        Smallest and mean coverage of the covered coordinates.
    unit_coverage_min : int
        Smallest coverage over the units of every prunable layer.
    covered_fraction : float
        |S_q| / d, the share of coordinates some client trained.
    noise_ratio : float
        Mean submodel-noise ratio ŵ₁² (§2.1.3).
    param_fraction, neuron_ratio : float
        Mean parameter fraction and neuron ratio of the round's submodels.
    clients_trained : int
        Clients that took part (a client that meets no deadline sits out).
    compression_w2_sq : float or None
        ‖C(θ) − θ‖² / ‖θ‖² of the operator C (None without compression).
    gamma_star : float
        Γ*, the smallest coverage seen so far (inf before any).
    memory_mb : float or None
        RAM-Fed's memory store [MiB] (None for RA-Fed).
    aircomp_mse, silent_clients : float or int or None
        Over the air: the round's AirComp MSE per entry (25) and its silent clients.
    """

    coverage_min: float | None = None
    unit_coverage_min: int | None = None
    coverage_mean: float | None = None
    covered_fraction: float | None = None
    noise_ratio: float | None = None
    param_fraction: float | None = None
    neuron_ratio: float | None = None
    clients_trained: int | None = None
    compression_w2_sq: float | None = None
    gamma_star: float | None = None
    memory_mb: float | None = None
    aircomp_mse: float | None = None
    silent_clients: int | None = None


def coverage_aggregate(params: Params, subs: Submodels, deltas: Sequence[Params],
                       weights: Sequence[np.ndarray], lr: float, *,
                       memory: ClientStore | None = None, clients: Sequence[np.ndarray] = (),
                       usum: Params | None = None, num_clients: int = 1,
                       uplink: Callable[[Params, np.ndarray], Params] | None = None
                       ) -> tuple[Params, Params | None, ClientStore | None, Params]:
    """θ_{q+1}, the new Σ_n u_n, the new memories and the coverage Γ_q.

    ``deltas[j]`` ``(C_j, *sliced)`` are the sliced updates D_{q,n} of the clients of stack
    j of ``subs`` (ids ``clients[j]``, weights ``weights[j]``). ``memory`` None is RA-Fed;
    a store is RAM-Fed with its memories u_n (:class:`~wirelessfl.engine.client_store.ClientStore`,
    its rows written once a round) and Σ_n u_n in ``usum`` (None: zero) over ``num_clients``
    N. ``uplink(stack, w)`` returns Σ_n w_n row_n of a ``(C, …)`` stack in the round's
    client order as received over the air (None: exactly). One accumulating operator per
    parameter and stack: no Python per client.
    """
    acc = {k: torch.zeros_like(v) for k, v in params.items()}
    cov = {k: torch.zeros_like(v) for k, v in params.items()}
    sent: Params | None = None  # over the air: each client's scattered symbols, round order
    if uplink is not None:
        sent = {k: v.new_zeros((len(subs), *v.shape)) for k, v in params.items()}
    if memory is not None:  # Σ_n u_n (float32, host memory as the store) and this round's change
        usum = usum or {k: client_store.zeros(v.shape) for k, v in params.items()}
        dsum = {k: torch.zeros_like(v) for k, v in params.items()}
    for j, (stack, rows, part, w) in enumerate(zip(subs.stacks, subs.rows, deltas, weights)):
        wt = torch.as_tensor(np.asarray(w, float), dtype=next(iter(params.values())).dtype,
                             device=next(iter(params.values())).device)
        if memory is not None:  # Δ = D/γ against u_n on the coordinates just trained
            mem = memory.gather("", clients[j], params) or \
                {k: v.new_zeros((len(rows), *v.shape)) for k, v in params.items()}
            old = stack.slice_rows(mem)
            fresh = {k: v / lr for k, v in part.items()}
            kept = {k: v.to(client_store.STORE_DTYPES[memory.dtype]).to(v.dtype)
                    for k, v in fresh.items()}  # what the store holds (float16: rounded)
            symbols = {k: fresh[k] - old[k] for k in part}
            stack.add_into(dsum, {k: kept[k] - old[k] for k in part})
            memory = memory.updated(clients[j], _written(stack.write_rows(mem, kept),
                                                         memory.dtype))
        else:
            symbols = part
        if sent is not None:  # zeros off each client's mask, its row in the round
            at = torch.as_tensor(rows, device=wt.device)
            for k, v in stack.scatter_rows(symbols).items():
                sent[k].index_copy_(0, at, v.expand(len(rows), *v.shape[1:]).to(sent[k].dtype))
        else:
            stack.add_into(acc, {k: v * per_row(wt, v) for k, v in symbols.items()})
        stack.add_into(cov, {k: per_row(wt, v).expand_as(v) for k, v in symbols.items()})
    if sent is not None and len(subs):
        w_round = np.zeros(len(subs))
        w_round[subs.order] = np.concatenate([np.asarray(w, float) for w in weights])
        acc = uplink(sent, w_round)
    covered = {k: c.clamp(min=1e-30) for k, c in cov.items()}
    if memory is None:
        return {k: params[k] - acc[k] / covered[k] for k in params}, usum, None, cov
    n = num_clients  # v_q = ū + corr, ū over all N clients (old memory)
    new = {k: params[k] - lr * (usum[k].to(params[k]) / n + acc[k] / covered[k])
           for k in params}
    return new, {k: usum[k] + client_store.to_host(dsum[k]) for k in params}, memory, cov


def _written(stack: Params, dtype: str) -> StateStack:
    """Every row of a ``(C, …)`` stack as the clients' new memories."""
    n = next(iter(stack.values())).shape[0]
    return StateStack({"": stack}, {"": np.ones(n, bool)}, None, None, dtype)


def coverage_log(cov: Params, params: Params, subs: Submodels, d: int,
                 groups: tuple[UnitGroup, ...]) -> dict[str, Any]:
    """Γ_q statistics, |S_q|/d, the mean submodel-noise ratio ŵ₁² (§2.1.3) and mean size.

    ``coverage_min`` is over covered coordinates; ``unit_coverage_min`` over the units of
    every prunable layer (what ``coverage_aware`` guarantees: a weight between two pruned
    layers is covered only by a client holding both of its units, so coordinate coverage
    can stay below Γ_min when clients hold few units). ``mean_params`` is the clients' mean
    submodel size (0 without clients).
    """
    units = [torch.bincount(torch.cat([s.selection[g.name].reshape(-1) for s in subs.stacks]),
                            minlength=g.size) for g in groups] if len(subs) else []
    flat = torch.cat([c.reshape(-1) for c in cov.values()])
    covered = flat > 0
    norm = sum(float(v.pow(2).sum()) for v in params.values())
    kept = []  # each client's ‖θ_q ⊙ m_n‖², stack after stack
    for stack in subs.stacks:
        sliced = stack.slice(params)
        kept.append(sum(v.pow(2).reshape(len(stack), -1).sum(1) for v in sliced.values()))
    kept_sq = torch.cat(kept).double().cpu().numpy() if kept else np.zeros(0)
    noise = 1.0 - kept_sq / norm if norm > 0 else np.zeros(len(kept_sq))
    sizes = [stack.num_params() * len(stack) for stack in subs.stacks]
    return {"coverage_min": float(flat[covered].min()) if covered.any() else 0.0,
            "unit_coverage_min": int(min(int(u.min()) for u in units)) if units else 0,
            "coverage_mean": float(flat[covered].mean()) if covered.any() else 0.0,
            "covered_fraction": float(covered.sum()) / d,
            "noise_ratio": float(np.mean(noise)) if len(noise) else 0.0,
            "mean_params": float(sum(sizes) / len(subs)) if len(subs) else 0.0}
