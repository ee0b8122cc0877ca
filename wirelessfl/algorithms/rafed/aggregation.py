"""The two methods' aggregations (``docs/papers/rafed.md`` §2.2, §2.3) and the coverage they log.

With Γ_q = Σ_n m_{n,q} the coordinate-wise coverage of round q:

- **RA-Fed** (§2.2): θ_{q+1} = θ_q − (Σ_n m_{n,q} ⊙ D_{q,n}) ⊘ max(Γ_q, 1);
- **RAM-Fed** (§2.3): Δ = D/γ_q, v_q = ū + (Σ_n m ⊙ (Δ − u_n)) ⊘ max(Γ_q, 1),
  θ_{q+1} = θ_q − γ_q v_q, then u_n ← u_n + m ⊙ (Δ − u_n) and ū ← ū + δu/N.

Each client's sliced update is added into one full-size accumulator at its indices (no N
full-size copies); the memories u_n are full-size trees in the client store (CPU).

Over the air (``network.aggregation: over_the_air``) the sum Σ_n w_n m_n ⊙ (·) is what the
clients' simultaneous transmissions add up to: each client sends its update scattered into
a full-size vector (zeros off its mask), the server receives the weighted sum plus AirComp
noise, and divides by the coverage it knows from the masks, so a coordinate few clients
cover gets proportionally more noise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from wirelessfl.engine import client_store
from wirelessfl.engine.client import ClientResult
from wirelessfl.models.base import Params, UnitGroup
from wirelessfl.server.state import AlgorithmState, RoundReport
from wirelessfl.server.submodel import Submodel


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


def _on_host(index: tuple) -> tuple:
    """A submodel's index (slices and index tensors) with its tensors in host memory."""
    return tuple(client_store.to_host(i, "int64") if isinstance(i, torch.Tensor) else i
                 for i in index)


def coverage_aggregate(params: Params, subs: Sequence[Submodel], results: Sequence[ClientResult],
                       weights: np.ndarray, lr: float, *, memory_dtype: str | None = None,
                       client_states: Mapping[int, Any] | None = None,
                       usum: Params | None = None, num_clients: int = 1,
                       uplink: Callable[[list[Params], np.ndarray], Params] | None = None
                       ) -> tuple[Params, Params | None, dict[int, Any], Params]:
    """θ_{q+1}, the new Σ_n u_n, the new memories and the coverage Γ_q.

    ``memory_dtype`` None is RA-Fed; a store dtype (``float32``/``float16``) is RAM-Fed with
    its memories in ``client_states`` and Σ_n u_n in ``usum`` (None: zero) over
    ``num_clients`` N. ``results`` hold the sliced updates D_{q,n} of the clients of ``subs``.
    ``uplink(trees, w)`` returns Σ_n w_n tree_n as received over the air (None: exactly).
    """
    memory = memory_dtype is not None
    acc = {k: torch.zeros_like(v) for k, v in params.items()}
    cov = {k: torch.zeros_like(v) for k, v in params.items()}
    states = dict(client_states or {})
    if memory:  # Σ_n u_n (float32, host memory as the store) and this round's change of it
        usum = usum or {k: client_store.zeros(v.shape) for k, v in params.items()}
        dsum = {k: client_store.zeros(v.shape) for k, v in params.items()}
    sent = []  # over the air: each client's scattered contribution
    for sub, res, w in zip(subs, results, weights):
        mem = states.get(res.client) if memory else None
        new_mem = {}
        mine = {k: torch.zeros_like(v) for k, v in params.items()} if uplink else None
        into, scale = (mine, 1.0) if uplink else (acc, w)
        for k in params:
            idx = sub.index(k) if k in sub.dims else (slice(None),)
            part = res.delta[k]
            if memory:  # Δ = D/γ against u_n on the coordinates just trained
                stored = (mem[k].clone() if mem is not None
                          else client_store.zeros(params[k].shape, memory_dtype))
                at = _on_host(idx)  # the memories are host tensors: index them on the host
                old = stored[at].float()    # (a view where idx is basic: used first)
                fresh = client_store.to_host(part / lr)
                into[k][idx] += scale * (fresh - old).to(acc[k])
                kept = fresh.to(stored.dtype)  # what the store holds (float16: rounded)
                dsum[k][at] += kept.float() - old
                stored[at] = kept
                new_mem[k] = stored
            else:
                into[k][idx] += scale * part
            cov[k][idx] += w
        if memory:
            states[res.client] = new_mem
        if uplink:
            sent.append(mine)
    if uplink and sent:
        acc = uplink(sent, np.asarray(weights, float))
    covered = {k: c.clamp(min=1e-30) for k, c in cov.items()}
    if not memory:
        return {k: params[k] - acc[k] / covered[k] for k in params}, usum, states, cov
    n = num_clients  # v_q = ū + corr, ū over all N clients (old memory)
    new = {k: params[k] - lr * (usum[k].to(params[k]) / n + acc[k] / covered[k])
           for k in params}
    return new, {k: usum[k] + dsum[k] for k in params}, states, cov


def coverage_log(cov: Params, params: Params, sliced: list[Params], subs: list[Submodel],
                  d: int, groups: tuple[UnitGroup, ...]) -> dict[str, Any]:
    """Γ_q statistics, |S_q|/d and the mean submodel-noise ratio ŵ₁² (§2.1.3).

    ``coverage_min`` is over covered coordinates; ``unit_coverage_min`` over the units of
    every prunable layer (what ``coverage_aware`` guarantees: a weight between two pruned
    layers is covered only by a client holding both of its units, so coordinate coverage
    can stay below Γ_min when clients hold few units).
    """
    units = [torch.bincount(torch.cat([s.selection[g.name] for s in subs]), minlength=g.size)
             for g in groups] if subs else []
    flat = torch.cat([c.reshape(-1) for c in cov.values()])
    covered = flat > 0
    norm = sum(float(v.pow(2).sum()) for v in params.values())
    noise_ratios = [1.0 - sum(float(v.pow(2).sum()) for v in p.values()) / norm if norm > 0
                    else 0.0 for p in sliced]
    return {"coverage_min": float(flat[covered].min()) if covered.any() else 0.0,
            "unit_coverage_min": int(min(int(u.min()) for u in units)) if units else 0,
            "coverage_mean": float(flat[covered].mean()) if covered.any() else 0.0,
            "covered_fraction": float(covered.sum()) / d,
            "noise_ratio": float(np.mean(noise_ratios)) if noise_ratios else 0.0}
