"""Latency-optimal mask sizes: the MILP (20)/(36) of HIST.

Fang, Han, Brinton, arXiv 2310.17890, Sec. IV and V-C (``docs/papers/hist.md`` §4.2, §5.7):

    minimise τ  subject to  c_j d_j ≤ τ (all j),  Σ_j d_j = D,  0 ≤ d_j ≤ U_j,  d_j ∈ Z,

where c_j is cell j's latency per unit of mask (its full-model edge-round latency C_j over D,
:mod:`solvers.latency`), D the units to split (parameters d, or hidden units K) and U_j the
cap from (19c). Backends:

- ``"exact"`` (default): batched combinatorial solver, O(N log N), no loop at all; one
  instance of ≤ 64 cells takes the same algorithm compiled by Numba (extra ``[fast]``;
  the batched path without it), about 10 µs a call.
  Stage 1 finds the optimal τ* — the D-th smallest of the marginal latencies {c_j k :
  1 ≤ k ≤ U_j}, which greedy marginal allocation attains — as an order statistic of the
  ≤ ~2N marginals between two continuous water-filling levels. Stage 2 breaks ties as the
  spec says: among allocations with latency τ*, minimise max_j d_j, then stay close to
  uniform — caps ū_j = min(U_j, ⌊τ*/c_j⌋), water-fill to the smallest level m with
  Σ_j min(ū_j, m) ≥ D, and take the surplus back from the slowest cells at level m.
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

from channels.validation import as_finite, as_int, check_memory

BACKENDS = ("exact", "highs", "gurobi")
#: Largest ``total``: sizes and latencies c_j·d_j are exact in float64 up to 2^53.
MAX_TOTAL = 2**53
_EPS = float(np.finfo(float).eps)


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
    if np.iscomplexobj(unit_latency):
        raise ValueError("`unit_latency` must be real, got complex values")
    try:
        c = np.asarray(unit_latency, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("`unit_latency` must be an array of numbers") from None
    if c.size > 10**5:  # smaller batches need under 20 MB
        check_memory(200.0 * c.size, f"mask sizes of {c.size} cells", "solve fewer instances at a time")
    if c.ndim < 1 or c.shape[-1] < 1:
        raise ValueError(f"`unit_latency` must have shape (..., N) with N >= 1, got {c.shape}")
    if not (c.min() >= 0 and c.max() < np.inf):  # NaN fails both
        raise ValueError("`unit_latency` must be finite and >= 0 everywhere (got NaN, inf or "
                         "negative values)")
    total = as_int("total", total, lo=0, hi=MAX_TOTAL)
    with np.errstate(over="ignore"):
        overflow = c.size and not np.isfinite(c.max() * max(total, 1))
    if overflow:
        raise ValueError("`unit_latency` x `total` overflows float64 (latencies near 1e308); "
                         "express the latencies in a larger unit")
    cap = total if cap is None else cap
    if isinstance(cap, (int, np.integer)) and not isinstance(cap, bool) and cap >= 0:
        u = np.full(c.shape, min(int(cap), MAX_TOTAL), np.int64)  # the common scalar cap
    else:
        uf = np.asarray(cap, dtype=float)
        if not (uf.min() >= 0 and uf.max() < np.inf and (np.floor(uf) == uf).all()):
            raise ValueError(f"`cap` must be non-negative integers, got {cap!r}")
        try:
            u = np.empty(c.shape, np.int64)
            u[...] = uf
        except ValueError:
            raise ValueError(f"`cap` of shape {uf.shape} does not broadcast to `unit_latency`'s "
                             f"shape {c.shape}") from None
    room = u.sum(-1)
    if room.min() < total:
        raise ValueError(f"infeasible: the caps allow at most {int(room.min())} units in total "
                         f"(N x cap), but total={total}; raise `cap` (eps_th) or lower `total`")
    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return c, total, u


def _fit(tau: np.ndarray, c: np.ndarray, u: np.ndarray, s: np.ndarray | None = None) -> np.ndarray:
    """min(U_j, ⌊τ/c_j − σ_j⌋)⁺: units of each cell that fit under latency τ (c_j = 0 fits U_j)."""
    units = np.floor(tau[:, None] / c) if s is None else np.floor(tau[:, None] / c - s)
    return np.maximum(np.fmin(u, units), 0).astype(np.int64)  # 0/0 = NaN: fmin keeps U_j


def _water_segment(breaks: np.ndarray, weight: np.ndarray, capped: np.ndarray,
                   target: np.ndarray) -> tuple[np.ndarray, ...]:
    """Where f(x) = Σ_j min(capped_j, weight_j·x) first reaches ``target`` (shape (B, T)).

    f is piecewise linear with kinks at the sorted ``breaks`` (capped_j / weight_j; cells with
    weight 0 have break 0 and are full from x = 0). One sort and two cumulative sums give, per
    target, the segment [lo, hi] with f(x) = below + slope·x on it and f(hi) ≥ target; when the
    target exceeds Σ capped, lo = hi = the largest break and slope = 0.
    """
    rows = np.arange(breaks.shape[0])[:, None]
    order = np.argsort(breaks, axis=-1)
    b, cap_s, w_s = breaks[rows, order], capped[rows, order], weight[rows, order]
    zero = np.zeros((b.shape[0], 1), b.dtype)
    full = np.cumsum(np.concatenate([zero, cap_s], 1), 1)  # full[k] = Σ_{i<k} capped_(i)
    slope_from = np.concatenate([np.cumsum(w_s[:, ::-1], 1)[:, ::-1], zero], 1)  # Σ_{i≥k} w_(i)
    reach = full[:, 1:] + b * slope_from[:, 1:]  # f(b_(k))
    k = (reach[:, None, :] < target[:, :, None]).sum(-1)
    lo = np.concatenate([zero, b], 1)[rows, k]
    hi = b[rows, np.minimum(k, b.shape[1] - 1)]
    return full[rows, k], slope_from[rows, k], np.where(k < b.shape[1], lo, hi), hi


def _optimal_tau(c: np.ndarray, total: int, u: np.ndarray) -> np.ndarray:
    """Stage 1: τ* = the D-th smallest marginal latency c_j·k (1 ≤ k ≤ U_j), without a loop.

    The continuous water-filling Σ_j min(U_j, τ/c_j) = D and = D + N brackets τ*: rounding
    down loses less than one unit per cell, so at most ~2N marginal latencies lie in between,
    and τ* is an order statistic of those (one segmented sort over the whole batch).
    """
    n = c.shape[-1]
    w = np.where(c > 0, 1.0 / c, 0.0)
    target = np.full((c.shape[0], 2), float(total))
    target[:, 1] += n
    below, slope, lo, hi = _water_segment(c * u, w, u.astype(float), target)
    x = np.minimum(np.maximum((target - below) / slope, lo), hi)  # slope 0: ±inf or NaN → hi
    slack = (16 + 4 * n) * _EPS  # relative rounding of the water levels; the bracket then
    k_lo = _fit(x[:, 0] * (1 - slack), c, u)  # holds ≲ 2N + 2·slack·D candidates, whatever D
    k_hi = _fit(x[:, 1] * (1 + slack), c, u)
    rank = total - k_lo.sum(-1)  # τ* is the rank-th smallest candidate (≤ 0: attained at τ_lo)
    count = (k_hi - k_lo).ravel()
    if count.sum() > 64 * (n + 8) * c.shape[0]:  # never memory proportional to D
        raise ValueError("mask sizes: the latencies are too ill-conditioned for the exact solver "
                         "(ratio of largest to smallest near 1e16); use backend='highs'")
    cell = np.repeat(np.arange(count.size), count)
    first = np.cumsum(count) - count
    value = c.ravel()[cell] * (k_lo.ravel()[cell] + np.arange(cell.size) - first[cell] + 1)
    value = np.append(value[np.lexsort((value, cell // n))], 0.0)
    per_inst = count.reshape(k_lo.shape).sum(-1)
    pick = np.minimum(np.maximum(np.cumsum(per_inst) - per_inst + rank - 1, 0), value.size - 1)
    return np.where(rank > 0, value[pick], (c * k_lo).max(-1))


def _optimal_tau_offset(c: np.ndarray, total: int, u: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Stage 1 with offsets: τ* = min over allocations of max_j c_j (d_j + σ_j).

    The number of units that fit under τ, Σ_j min(U_j, ⌊τ/c_j − σ_j⌋)⁺, is a step function
    of τ; its first value ≥ D is found by bisection on τ (a fixed 1100 halvings of the
    float64 range, batched over instances), and τ* is the larger of it and max_j c_j σ_j
    (every cell uploads its offset even with no units).
    """
    lo = np.zeros(c.shape[0])
    hi = (c * (u + s)).max(-1) * (1 + 8 * _EPS)
    for _ in range(1100):  # enough to reach adjacent floats from any range
        mid = lo + (hi - lo) / 2
        if not ((mid > lo) & (mid < hi)).any():
            break
        ok = _fit(mid, c, u, s).sum(-1) >= total
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    first = np.where(_fit(lo, c, u, s).sum(-1) >= total, lo, hi)
    return np.maximum(first, (c * s).max(-1))


def _tie_break(c: np.ndarray, total: int, u: np.ndarray, tau: np.ndarray,
               s: np.ndarray | None = None) -> np.ndarray:
    """Stage 2: among allocations with latency ≤ τ*, min max_j d_j, then closest to uniform."""
    ubar = _fit(tau * (1.0 + 8 * _EPS), c, u, s)
    # smallest level m with Σ_j min(ū_j, m) ≥ D: integer water-filling
    below, slope, lo, _ = _water_segment(ubar, np.ones_like(ubar), ubar,
                                         np.full((c.shape[0], 1), total))
    m = np.maximum(lo, -((below - total) // np.maximum(slope, 1)))
    d = np.minimum(ubar, m)
    surplus = d.sum(-1, keepdims=True) - total
    at_level = d == m
    # the slowest cells at level m give one unit back each; ties by cell index
    order = np.argsort(np.where(at_level, -c, np.inf), axis=-1, kind="stable")
    rank = np.empty_like(order)
    rank[np.arange(c.shape[0])[:, None], order] = np.arange(c.shape[-1])
    return d - (at_level & (rank < surplus))


#: Up to this many cells one instance takes the compiled single-instance path (with Numba).
SCALAR_CELLS = 64


def _solve_one_kernel(c: np.ndarray, total: int, u: np.ndarray) -> np.ndarray:  # pragma: no cover
    """Both stages for one instance without offsets (N ≤ :data:`SCALAR_CELLS`), for Numba.

    The batched path's algorithm, so the same optimum and tie-break: the continuous water
    level brackets τ* from below, an array heap of the cells' next marginal latencies
    c_j·(k_j + 1) pops the remaining ``rank`` ≲ N units (τ* is the last popped, a value
    whatever the order of ties), and stage 2 water-fills the caps ū_j = min(U_j, ⌊τ*/c_j⌋).
    A NumPy call costs about a microsecond whatever its size, so a compiled single-instance
    path is what makes one call fast; without Numba (extra ``[fast]``) the batched path
    serves.
    """
    n = c.shape[0]
    eps = 2.220446049250313e-16
    inv = np.zeros(n)
    slope = 0.0
    for j in range(n):
        if c[j] > 0:
            inv[j] = 1.0 / c[j]
        slope += inv[j]
    order = np.argsort(c * u, kind="mergesort")
    below, x, prev, found = 0.0, 0.0, 0.0, False
    for i in range(n):
        j = order[i]
        b = c[j] * u[j]
        if below + slope * b >= total:
            x = max((total - below) / slope, prev) if slope > 0 else b
            found = True
            break
        below, slope, prev = below + u[j], slope - inv[j], b
    if not found:
        x = prev
    x *= 1 - (16 + 4 * n) * eps
    k = np.empty(n, np.int64)
    for j in range(n):
        k[j] = u[j] if c[j] == 0 else max(min(u[j], np.floor(x * inv[j])), 0)
    rank = total - k.sum()
    tau = 0.0
    if rank <= 0:
        for j in range(n):
            tau = max(tau, c[j] * k[j])
    else:  # a binary heap of (next marginal c_j (k_j + 1), j)
        val, cell, size = np.empty(n), np.empty(n, np.int64), 0
        for j in range(n):
            if k[j] < u[j]:
                val[size], cell[size] = c[j] * (k[j] + 1), j
                i, size = size, size + 1
                while i > 0 and val[(i - 1) // 2] > val[i]:
                    p = (i - 1) // 2
                    val[i], val[p], cell[i], cell[p] = val[p], val[i], cell[p], cell[i]
                    i = p
        for _ in range(rank):
            tau, j = val[0], cell[0]
            k[j] += 1
            if k[j] < u[j]:  # replace the root by the cell's next marginal
                val[0] = c[j] * (k[j] + 1)
            else:
                size -= 1
                val[0], cell[0] = val[size], cell[size]
            i = 0
            while True:  # sift down
                a, b, low = 2 * i + 1, 2 * i + 2, i
                if a < size and val[a] < val[low]:
                    low = a
                if b < size and val[b] < val[low]:
                    low = b
                if low == i:
                    break
                val[i], val[low], cell[i], cell[low] = val[low], val[i], cell[low], cell[i]
                i = low
    t = tau * (1.0 + 8 * eps)
    ubar = np.empty(n, np.int64)
    for j in range(n):
        ubar[j] = u[j] if c[j] == 0 else max(min(u[j], np.floor(t / c[j])), 0)
    full, left, m, found = 0, n, 0, False
    for cap in np.sort(ubar):
        if full + cap * left >= total:
            m = max(cap if left == 0 else -((full - total) // left), 0)
            found = True
            break
        full, left = full + cap, left - 1
    if not found:
        m = ubar.max()
    d = np.minimum(ubar, m)
    surplus = d.sum() - total
    if surplus > 0:
        key = np.where(d == m, -c, np.inf)
        back = np.argsort(key, kind="mergesort")
        for i in range(surplus):
            d[back[i]] -= 1
    return d


def _jit(func):
    """``func`` compiled by Numba, its machine code cached on disk only where that can be.

    Numba's on-disk cache goes beside the source or under ``NUMBA_CACHE_DIR``; a read-only
    install run by a user without a writable home has neither, and then the kernel is
    compiled in memory (at its first call) instead of failing at import.
    """
    try:
        return _numba.njit(cache=True)(func)
    except RuntimeError:  # "no locator available": nowhere to cache
        return _numba.njit(cache=False)(func)


#: Seconds a first kernel call may take before a one-line notice says it is compiling.
COMPILE_NOTICE_S = 2.0


def _announced(kernel, *args):
    """``kernel(*args)``; a first call that compiles (slow) says so on stderr, once.

    Numba compiles a kernel at its first call, which can take from seconds to a minute
    when no cached machine code exists; a call that outlasts :data:`COMPILE_NOTICE_S`
    prints one line so a user does not think the tool hangs.
    """
    if kernel.signatures:  # compiled (or loaded from the cache) in this process already
        return kernel(*args)
    import sys
    import threading

    def notice() -> None:
        print("wirelessfl: note: compiling the mask-size kernels (first use here; cached "
              "afterwards where the install is writable)...", file=sys.stderr, flush=True)

    timer = threading.Timer(COMPILE_NOTICE_S, notice)
    timer.daemon = True
    timer.start()
    try:
        return kernel(*args)
    finally:
        timer.cancel()


try:  # a compiled single-instance path when Numba is there (optional extra [fast])
    import numba as _numba

    _solve_one_kernel = _jit(_solve_one_kernel)
    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - the batched path serves
    HAVE_NUMBA = False


def _quick(unit_latency: ArrayLike, total: object, cap: object, backend: str,
           offset: object) -> tuple[np.ndarray, float] | None:
    """The common single call, compiled; None sends anything else to the general path.

    One float64 instance of ≤ 64 cells, an integer cap, no offsets, every value clean: the
    general path's checks and messages serve every other input.
    """
    if not (HAVE_NUMBA and backend == "exact" and type(unit_latency) is np.ndarray
            and unit_latency.dtype == np.float64 and unit_latency.ndim == 1
            and 0 < unit_latency.size <= SCALAR_CELLS and type(total) is int
            and type(cap) is int and type(offset) in (int, float) and offset == 0
            and 0 <= total <= MAX_TOTAL and 0 <= cap <= MAX_TOTAL
            and cap * unit_latency.size >= total):
        return None
    ok, sizes, latency = _announced(_quick_kernel, unit_latency, total, cap)
    return (sizes, np.float64(latency)) if ok else None


def _quick_kernel(c: np.ndarray, total: int, cap: int):  # pragma: no cover - compiled below
    """Values clean (finite, ≥ 0, no overflow)? Then the sizes and their latency, in one call."""
    hi = 0.0
    for v in c:
        if not (v >= 0 and v < np.inf):  # NaN fails too
            return False, np.zeros(0, np.int64), 0.0
        hi = max(hi, v)
    if not hi * max(total, cap, 1) < np.inf:
        return False, np.zeros(0, np.int64), 0.0
    sizes = _solve_one_kernel(c, total, np.full(c.size, cap, np.int64))
    latency = 0.0
    for j in range(c.size):
        latency = max(latency, c[j] * sizes[j])
    return True, sizes, latency


if HAVE_NUMBA:
    _quick_kernel = _jit(_quick_kernel)


def _solve_exact(c: np.ndarray, total: int, u: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Both stages on a (B, N) view of the batch."""
    if HAVE_NUMBA and c.ndim == 1 and c.size <= SCALAR_CELLS and not s.any():
        return _announced(_solve_one_kernel, c, total, u)
    c2, u2, s2 = (x.reshape(-1, c.shape[-1]) for x in (c, u, s))
    with np.errstate(divide="ignore", invalid="ignore"):  # c_j = 0 cells, by design
        if (s2 == 0).all():
            sizes = _tie_break(c2, total, u2, _optimal_tau(c2, total, u2))
        else:
            sizes = _tie_break(c2, total, u2, _optimal_tau_offset(c2, total, u2, s2), s2)
    return sizes.reshape(c.shape)


def _solve_highs(c: np.ndarray, total: int, u: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, str]:
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import diags, hstack

    n = c.shape[-1]
    sizes = np.zeros(c.shape, np.int64)
    for idx in np.ndindex(c.shape[:-1]):
        cj, uj = c[idx], u[idx]
        a = hstack([diags(cj), np.full((n, 1), -1.0)], format="csr")
        cons = [LinearConstraint(a, -np.inf, -cj * s[idx]),
                LinearConstraint(np.hstack([np.ones(n), 0.0])[None], total, total)]
        res = milp(np.r_[np.zeros(n), 1.0], constraints=cons,
                   integrality=np.r_[np.ones(n), 0.0],
                   bounds=Bounds(np.zeros(n + 1), np.r_[uj, np.inf]),
                   options={"mip_rel_gap": 0.0})
        if not res.success:
            return sizes, f"highs: {res.message}"
        sizes[idx] = np.round(res.x[:n]).astype(np.int64)
    return sizes, "optimal"


def _solve_gurobi(c: np.ndarray, total: int, u: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, str]:
    try:
        import gurobipy as gp
        from gurobipy import GRB
    except ImportError as exc:
        raise SolverUnavailableError("backend 'gurobi' needs gurobipy: pip install gurobipy "
                                     "(or use backend='exact' or 'highs')") from exc
    n = c.shape[-1]
    sizes = np.zeros(c.shape, np.int64)
    try:
        env = gp.Env(params={"OutputFlag": 0})
    except gp.GurobiError as exc:
        raise SolverUnavailableError(f"Gurobi cannot start ({exc}); use backend='exact' or "
                                     "'highs'") from exc
    try:
        for idx in np.ndindex(c.shape[:-1]):
            with gp.Model(env=env) as model:
                model.Params.MIPGap = 0.0
                model.Params.IntFeasTol = 1e-9
                model.Params.FeasibilityTol = 1e-9
                d = model.addMVar(n, lb=0, ub=u[idx].astype(float), vtype=GRB.INTEGER)
                tau = model.addVar(lb=0.0)
                model.addConstr(c[idx] * d + c[idx] * s[idx] <= tau)
                model.addConstr(d.sum() == total)
                model.setObjective(tau, GRB.MINIMIZE)
                try:
                    model.optimize()
                except gp.GurobiError as exc:
                    raise SolverUnavailableError(f"Gurobi failed: {exc} (the pip licence is "
                                                 "size-limited; use backend='exact')") from exc
                if model.Status != GRB.OPTIMAL:
                    return sizes, f"gurobi status {model.Status}"
                sizes[idx] = np.round(d.X).astype(np.int64)
    finally:
        env.dispose()
    return sizes, "optimal"


def solve(unit_latency: ArrayLike, total: int, cap: ArrayLike | None = None, *,
          backend: str = "exact", offset: ArrayLike = 0.0) -> MaskSizeResult:
    """Minimise max_j c_j·(d_j + σ_j) over integers 0 ≤ d_j ≤ cap with Σ_j d_j = total.

    ``offset`` σ_j (0 by default: (20)/(36) as printed) is the part of a cell's upload that
    does not depend on its mask, in units: HIST's shared parameters over the parameters per
    unit (``docs/papers/hist.md`` §4.3), so the latency optimised is the one logged.

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
    offset : float or array_like broadcastable to (..., N), optional
        σ_j ≥ 0, units every cell pays whatever its mask.

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
    quick = _quick(unit_latency, total, cap, backend, offset)
    if quick is not None:
        sizes, latency = quick
        return MaskSizeResult(sizes, latency, backend, time.perf_counter() - start)
    c, total, u = _solve_iv(unit_latency, total, cap, backend)
    try:
        s = np.broadcast_to(as_finite("offset", offset, lo=0), c.shape).astype(float)
    except ValueError as exc:
        raise ValueError(f"`offset` must be finite, >= 0 and broadcast to {c.shape} ({exc})") from None
    if not np.isfinite(c * (u + s)).all():
        raise ValueError("`unit_latency` x (`cap` + `offset`) overflows float64; rescale")
    if backend == "exact":
        sizes, status = _solve_exact(c, total, u, s), "optimal"
    else:
        # the MILPs see c / max_j c_j: their absolute feasibility tolerances then cost ~1e-9 of τ
        scale = np.max(c, axis=-1, keepdims=True)
        milp = _solve_highs if backend == "highs" else _solve_gurobi
        sizes, status = milp(c / np.where(scale > 0, scale, 1.0), total, u, s)
    seconds = time.perf_counter() - start
    if status != "optimal":
        return MaskSizeResult(None, None, backend, seconds, status, False, status)
    return MaskSizeResult(sizes, (c * (sizes + s)).max(-1), backend, seconds)
