"""Latency-optimal mask sizes: the MILP (20)/(36) of HIST.

Fang, Han, Brinton, arXiv 2310.17890, Sec. IV and V-C (``specs/hist.md`` §4.2, §5.7):

    minimise τ  subject to  c_j d_j ≤ τ (all j),  Σ_j d_j = D,  0 ≤ d_j ≤ U_j,  d_j ∈ Z,

where c_j is cell j's latency per unit of mask (its full-model edge-round latency C_j over D,
:mod:`solvers.latency`), D the units to split (parameters d, or hidden units K) and U_j the
cap from (19c). Backends:

- ``"exact"`` (default): batched combinatorial solver, no Python loop over instances.
  Stage 1 finds the optimal τ* — the D-th smallest of the marginal latencies {c_j k :
  1 ≤ k ≤ U_j}, which greedy marginal allocation attains — by bisection on τ of the count
  Σ_j min(U_j, ⌊τ/c_j⌋) (O(N) per step, ~100 steps). Stage 2 breaks ties as the spec says:
  among allocations with latency τ*, minimise max_j d_j, then stay close to uniform — caps
  ū_j = min(U_j, ⌊τ*/c_j⌋), water-fill to the smallest level m with Σ_j min(ū_j, m) ≥ D,
  and take the surplus back from the slowest cells at level m.
- ``"highs"``: the MILP through :func:`scipy.optimize.milp` (HiGHS), one instance at a time.
- ``"gurobi"``: the MILP through gurobipy, as in the paper (needs a Gurobi licence; the pip
  licence is size-limited, about 2000 variables).

All three return the same optimal latency; only ``"exact"`` fixes which optimal sizes.

Examples
--------
>>> r = solve([1.0, 2.0, 4.0], 7, 5)
>>> r.sizes.tolist(), float(r.latency)
([4, 2, 1], 4.0)
>>> solve([1.0, 1.0], 7, 3)
Traceback (most recent call last):
...
ValueError: infeasible: the caps allow at most 6 units in total (N x cap), but total=7; raise `cap` (eps_th) or lower `total`
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

BACKENDS = ("exact", "highs", "gurobi")


class SolverUnavailableError(RuntimeError):
    """A requested backend cannot run here (package or licence missing)."""


@dataclass(frozen=True)
class MaskSizeResult:
    """Optimal mask sizes.

    Attributes
    ----------
    sizes : ndarray, shape (..., N), int64
        d_j (units per cell), summing to ``total``; None if no solution was found.
    latency : ndarray, shape (...), float
        The optimum max_j c_j d_j (per edge round, in the unit of ``unit_latency`` × units).
    backend : str
        Backend used.
    seconds : float
        Wall time of the call [s], model building included.
    status : str
        ``"optimal"`` or the backend's status.
    success : bool
        Whether ``sizes`` is an optimal solution.
    message : str
        Human-readable status.
    """

    sizes: np.ndarray | None
    latency: np.ndarray | None
    backend: str
    seconds: float
    status: str = "optimal"
    success: bool = True
    message: str = "optimal solution found"


def _solve_iv(unit_latency: ArrayLike, total: int, cap: ArrayLike | None,
              backend: str) -> tuple[np.ndarray, int, np.ndarray]:
    c = np.asarray(unit_latency, dtype=float)
    if c.ndim < 1 or c.shape[-1] < 1:
        raise ValueError(f"`unit_latency` must have shape (..., N) with N >= 1, got {c.shape}")
    if not np.isfinite(c).all() or (c < 0).any():
        raise ValueError("`unit_latency` must be finite and >= 0 everywhere (got NaN, inf or "
                         "negative values)")
    if int(total) != total or total < 0:
        raise ValueError(f"`total` must be a non-negative integer, got {total!r}")
    total = int(total)
    u = np.broadcast_to(np.asarray(total if cap is None else cap), c.shape)
    if not np.isfinite(u.astype(float)).all() or (u < 0).any() or (np.floor(u) != u).any():
        raise ValueError(f"`cap` must be non-negative integers, got {cap!r}")
    u = u.astype(np.int64)
    room = u.sum(-1)
    if (room < total).any():
        raise ValueError(f"infeasible: the caps allow at most {int(room.min())} units in total "
                         f"(N x cap), but total={total}; raise `cap` (eps_th) or lower `total`")
    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return c, total, u


def _fit(tau: np.ndarray, c: np.ndarray, u: np.ndarray) -> np.ndarray:
    """min(U_j, ⌊τ/c_j⌋): units of each cell that fit under latency τ (c_j = 0 fits U_j)."""
    k = np.floor(tau[..., None] / np.where(c > 0, c, 1.0))
    return np.where(c > 0, np.minimum(u, k), u)


def _optimal_tau(c: np.ndarray, total: int, u: np.ndarray) -> np.ndarray:
    """Stage 1: the smallest τ with Σ_j min(U_j, ⌊τ/c_j⌋) ≥ D, exact to the float grid."""
    lo = np.zeros(c.shape[:-1])
    hi = (c * u).max(-1)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        ok = _fit(mid, c, u).sum(-1) >= total
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
        if np.all(hi - lo <= 4 * np.spacing(np.maximum(hi, 1e-300))):
            break
    # snap to the largest marginal latency c_j·k that fits under hi: an attained value
    return np.where(total == 0, 0.0, (c * _fit(hi, c, u)).max(-1))


def _tie_break(c: np.ndarray, total: int, u: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Stage 2: among allocations with latency ≤ τ*, min max_j d_j, then closest to uniform."""
    ubar = _fit(tau * (1.0 + 8 * np.finfo(float).eps), c, u).astype(np.int64)
    lo = np.zeros(c.shape[:-1], np.int64)  # Σ min(ū, lo) < D (or lo = 0)
    hi = ubar.max(-1)  # Σ min(ū, hi) = Σ ū ≥ D
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        ok = np.minimum(ubar, mid[..., None]).sum(-1) >= total
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    m = np.where(np.minimum(ubar, lo[..., None]).sum(-1) >= total, lo, hi)
    d = np.minimum(ubar, m[..., None])
    surplus = d.sum(-1) - total
    at_level = d == m[..., None]
    # the slowest cells at level m give one unit back each; ties by cell index
    key = np.where(at_level, -c, np.inf)
    order = np.argsort(key, axis=-1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(c.shape[-1]), axis=-1)
    return d - (at_level & (rank < surplus[..., None])).astype(np.int64)


def _solve_exact(c: np.ndarray, total: int, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tau = _optimal_tau(c, total, u)
    sizes = _tie_break(c, total, u, tau)
    return sizes, (c * sizes).max(-1)


def _solve_highs(c: np.ndarray, total: int, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, str]:
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import diags, hstack

    n = c.shape[-1]
    sizes = np.zeros(c.shape, np.int64)
    lat = np.zeros(c.shape[:-1])
    for idx in np.ndindex(c.shape[:-1]):
        cj, uj = c[idx], u[idx]
        a = hstack([diags(cj), np.full((n, 1), -1.0)], format="csr")
        cons = [LinearConstraint(a, -np.inf, 0.0),
                LinearConstraint(np.hstack([np.ones(n), 0.0])[None], total, total)]
        res = milp(np.r_[np.zeros(n), 1.0], constraints=cons,
                   integrality=np.r_[np.ones(n), 0.0],
                   bounds=Bounds(np.zeros(n + 1), np.r_[uj, np.inf]),
                   options={"mip_rel_gap": 0.0})
        if not res.success:
            return sizes, lat, f"highs: {res.message}"
        sizes[idx] = np.round(res.x[:n]).astype(np.int64)
        lat[idx] = (cj * sizes[idx]).max()
    return sizes, lat, "optimal"


def _solve_gurobi(c: np.ndarray, total: int, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, str]:
    try:
        import gurobipy as gp
        from gurobipy import GRB
    except ImportError as exc:
        raise SolverUnavailableError("backend 'gurobi' needs gurobipy: pip install gurobipy "
                                     "(or use backend='exact' or 'highs')") from exc
    n = c.shape[-1]
    sizes = np.zeros(c.shape, np.int64)
    lat = np.zeros(c.shape[:-1])
    try:
        env = gp.Env(params={"OutputFlag": 0})
    except gp.GurobiError as exc:
        raise SolverUnavailableError(f"Gurobi cannot start ({exc}); use backend='exact' or "
                                     "'highs'") from exc
    try:
        for idx in np.ndindex(c.shape[:-1]):
            with gp.Model(env=env) as model:
                model.Params.MIPGap = 0.0
                d = model.addMVar(n, lb=0, ub=u[idx].astype(float), vtype=GRB.INTEGER)
                tau = model.addVar(lb=0.0)
                model.addConstr(c[idx] * d <= tau)
                model.addConstr(d.sum() == total)
                model.setObjective(tau, GRB.MINIMIZE)
                try:
                    model.optimize()
                except gp.GurobiError as exc:
                    raise SolverUnavailableError(f"Gurobi failed: {exc} (the pip licence is "
                                                 "size-limited; use backend='exact')") from exc
                if model.Status != GRB.OPTIMAL:
                    return sizes, lat, f"gurobi status {model.Status}"
                sizes[idx] = np.round(d.X).astype(np.int64)
                lat[idx] = (c[idx] * sizes[idx]).max()
    finally:
        env.dispose()
    return sizes, lat, "optimal"


def solve(unit_latency: ArrayLike, total: int, cap: ArrayLike | None = None, *,
          backend: str = "exact") -> MaskSizeResult:
    """Minimise max_j unit_latency[j]·d_j over integers 0 ≤ d_j ≤ cap with Σ_j d_j = total.

    Parameters
    ----------
    unit_latency : array_like, shape (..., N), float [s per unit]
        c_j, the latency one unit of mask adds to cell j's edge round (C_j / D).
    total : int
        D, units to split (parameters d or hidden units K).
    cap : int or array_like broadcastable to (..., N), optional
        Per-cell cap U_j from (19c) (see :func:`solvers.latency.size_cap`); None = no cap.
    backend : str
        ``"exact"``, ``"highs"`` or ``"gurobi"``.

    Returns
    -------
    MaskSizeResult
        Batched over the leading dims of ``unit_latency``.

    Raises
    ------
    ValueError
        NaN/negative latencies, bad caps or an infeasible instance (Σ caps < total).
    SolverUnavailableError
        Gurobi or its licence is missing (backend ``"gurobi"``).
    """
    start = time.perf_counter()
    c, total, u = _solve_iv(unit_latency, total, cap, backend)
    status = "optimal"
    if backend == "exact":
        sizes, lat = _solve_exact(c, total, u)
    elif backend == "highs":
        sizes, lat, status = _solve_highs(c, total, u)
    else:
        sizes, lat, status = _solve_gurobi(c, total, u)
    seconds = time.perf_counter() - start
    if status != "optimal":
        return MaskSizeResult(None, None, backend, seconds, status, False, status)
    return MaskSizeResult(sizes, lat, backend, seconds)
