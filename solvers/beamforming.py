"""Max-min receive beamforming for AirComp: problem (33) of HIST.

Fang, Han, Brinton, arXiv 2310.17890, Sec. V-B (``docs/papers/hist.md`` §5.5–5.6):

    (33)  maximise_a  g(a) = min_i |aᴴ h_i|²   subject to  ‖a‖ ≤ 1,

a non-convex QCQP (single-group multicast); the MSE (25) is σ0² / (P g(a)). ``h`` has shape
(..., n, M): leading dims are instances (rounds × cells), then the n clients' channels.
Methods of :func:`solve`:

- ``"fast"`` (default): batched multi-start projected ascent on the sphere (ours, below), all
  instances and starts at once with no Python loop over instances;
- ``"sca"``: the paper's successive convex approximation (§5.6), each convex subproblem an
  SOCP solved exactly by cvxpy (the reference; one instance at a time);
- ``"sdr"``: semidefinite relaxation with Gaussian randomisation; its optimal value is an
  upper bound on (33), returned as ``upper_bound``;
- ``"certified"``: ``"fast"`` with the SDR solution's beams as further starts, returned with
  the SDR upper bound and the ``gap`` to it (for studies that must say how far from optimal
  their beams are; one conic solve per instance);
- baselines ``"eigen"`` (principal eigenvector of Σ_i h_i h_iᴴ, MRC of the sum),
  ``"strongest"`` (matched to the client with the largest ‖h_i‖) and ``"random"``.

Closed forms: one client, a = h_1 / ‖h_1‖ and g = ‖h_1‖²; one antenna, any unit a and
g = min_i |h_i|². Every method but ``"random"`` returns them (SDR is then tight).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> h = (rng.standard_normal((100, 15, 10)) + 1j * rng.standard_normal((100, 15, 10))) / np.sqrt(2)
>>> r = solve(h)
>>> r.a.shape, r.min_gain.shape, bool((r.min_gain >= r.start_gain).all())
((100, 10), (100,), True)
>>> bool((r.min_gain > solve(h, "eigen").min_gain).mean() > 0.9)
True
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from channels.aircomp import gains_unchecked as gains
from channels.validation import as_float, as_int, check_memory, short

METHODS = ("fast", "certified", "sca", "sdr", "eigen", "strongest", "random")


@dataclass(frozen=True)
class BeamformingResult:
    """Solution of (33) for each instance.

    Attributes
    ----------
    a : ndarray, shape (..., M), complex
        Unit-norm receive beam a_j.
    min_gain : ndarray, shape (...)
        g(a) = min_i |aᴴ h_i|² achieved.
    upper_bound : ndarray, shape (...), or None
        A proven upper bound on the optimum of (33) (``"sdr"``, ``"certified"`` and
        closed-form cases).
    start_gain : ndarray, shape (...)
        g at the method's starting point (``"fast"``/``"sca"``); equal to ``min_gain`` otherwise.
    iterations : ndarray, shape (...), int
        Iterations used (outer SCA iterations, ascent steps; 0 for closed forms/baselines).
    seconds : float
        Wall time of the call [s].
    method : str
    status : str
        ``"ok"``, or ``"closed form"``, or the cvxpy status of a failed subproblem.
    """

    a: np.ndarray
    min_gain: np.ndarray
    upper_bound: np.ndarray | None
    start_gain: np.ndarray
    iterations: np.ndarray
    seconds: float
    method: str
    status: str = "ok"

    @property
    def gap(self) -> np.ndarray | None:
        """upper_bound − min_gain ≥ 0: how far g(a) can be from the optimum (None: no bound)."""
        return None if self.upper_bound is None else self.upper_bound - self.min_gain


def _energy(h: np.ndarray) -> np.ndarray:
    """‖h_i‖² per client, (..., n); its minimum bounds g* from above."""
    return (h.real ** 2 + h.imag ** 2).sum(-1)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x.real ** 2 + x.imag ** 2).sum(-1, keepdims=True))


def _check(h: ArrayLike) -> np.ndarray:
    h = np.asarray(h)
    if not np.iscomplexobj(h):
        raise ValueError(f"`h` must be complex (dtype {h.dtype} given): pass h_real + 1j * h_imag")
    if h.ndim < 2 or 0 in h.shape:
        raise ValueError(f"`h` must have shape (..., n_clients, M) with n, M >= 1; got {h.shape}")
    if not np.isfinite(h).all():
        raise ValueError("`h` contains NaN or Inf")
    with np.errstate(over="ignore", under="ignore"):
        energy = _energy(h.astype(np.complex128))
    if not np.isfinite(energy).all():
        raise ValueError("`h` is too large: |h_i|^2 overflows float64 (entries above ~1e150); "
                         "rescale the channels (the optimal beam does not change)")
    if not (energy > 0).all():
        if (np.abs(h) > 0).any(axis=-1).all():  # nonzero entries whose squares underflow
            raise ValueError("`h` is too small: |h_i|^2 underflows float64 (entries below "
                             "~1e-140); rescale the channels (the optimal beam does not change)")
        raise ValueError("a client's channel h_i is all zero: min_i |a^H h_i|^2 = 0 for every "
                         "beam; drop that client")
    if not (energy >= 1e-280).all():
        raise ValueError("`h` is too small: |h_i|^2 underflows float64 (entries below ~1e-140); "
                         "rescale the channels (the optimal beam does not change)")
    return h.astype(np.complex128)


def working_bytes(shape: tuple[int, ...], method: str = "fast", random_starts: int = 0) -> float:
    """Bytes :func:`solve` holds at once for channels of ``shape`` (..., n, M), an estimate.

    ``"fast"`` keeps every start of every instance: (n + 1 + random starts) beams and their
    n gains, a few complex copies of each; the other methods a few copies of ``h``.
    """
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {', '.join(METHODS)}; got {short(method)}")
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (tuple, list)) or len(shape) < 2:
        raise ValueError(f"`shape` must be a tuple (..., n, M) of sizes, got {short(shape)}")
    *batch, n, m = (as_int("shape", x, lo=0) for x in shape)
    random_starts = as_int("random_starts", random_starts, lo=0, hi=100_000)
    inst = float(np.prod(batch, dtype=float)) if batch else 1.0
    if method in ("fast", "certified"):
        starts = n + 1 + random_starts
        return inst * (4 * 16.0 * n * m + 6 * 16.0 * starts * (n + m))
    return inst * 4 * 16.0 * n * m


_FAST_OPTIONS = ("random_starts", "explore_iters", "keep", "refine_iters", "tau", "step")
OPTIONS = {"fast": _FAST_OPTIONS, "certified": (*_FAST_OPTIONS, "randomizations", "solver"),
           "sca": ("tol", "max_iter", "random_starts", "multistart", "solver"),
           "sdr": ("randomizations", "solver")}


def _check_options(method: str, options: dict) -> None:
    """Each option of ``method`` known, finite and in range (ValueError naming it)."""
    unknown = sorted(set(options) - set(OPTIONS.get(method, ())))
    if unknown:
        takes = ", ".join(OPTIONS.get(method, ())) or "none"
        raise ValueError(f"unknown option `{str(unknown[0])[:40]}` for method {method!r}; it takes "
                         f"{takes}")
    for key in ("random_starts", "explore_iters", "refine_iters", "max_iter", "randomizations",
                "keep"):
        if key in options and not (key == "keep" and options[key] is None):
            lo = 1 if key in ("keep", "max_iter", "randomizations") else 0
            as_int(key, options[key], lo=lo, hi=100_000)
    for key in ("tau", "step"):
        if key in options:
            pair = options[key]
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"`{key}` must be a pair (start, end), got {pair!r}")
            for v in pair:
                as_float(key, v, lo=0, hi=10, lo_open=True)
    if "tol" in options:
        as_float("tol", options["tol"], lo=0, hi=1, lo_open=True)
    if "multistart" in options and not isinstance(options["multistart"], bool):
        raise ValueError(f"`multistart` must be true or false, got {short(options['multistart'])}")
    if "solver" in options:
        import cvxpy as cp

        if options["solver"] not in cp.installed_solvers():
            raise ValueError(f"`solver` must be one of the installed cvxpy solvers "
                             f"({', '.join(cp.installed_solvers())}), got {options['solver']!r}")


# --- baselines and starting points -----------------------------------------------------------

def eigen_beam(h: ArrayLike) -> np.ndarray:
    """Principal eigenvector of Σ_i h_i h_iᴴ (maximises Σ_i |aᴴ h_i|²), shape (..., M).

    ``h``: complex channels (..., n, M), checked as in :func:`solve`.
    """
    return _eigen_beam(_check(h))


def _eigen_beam(h: np.ndarray) -> np.ndarray:
    _, v = np.linalg.eigh(np.swapaxes(h, -1, -2) @ h.conj())
    return v[..., -1]


def _strongest(h: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    strongest = _energy(h).argmax(-1)[..., None, None]
    return _unit(np.take_along_axis(h, strongest, -2)[..., 0, :])


def _random_beams(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return _unit(rng.standard_normal(shape) + 1j * rng.standard_normal(shape))


def _candidates(h: np.ndarray, random_starts: int, rng: np.random.Generator) -> np.ndarray:
    """§5.6 step 1: eigenvector, each matched filter h_i/‖h_i‖, random unit vectors: (..., S, M).

    The random beams are drawn once, (random_starts, M), and shared by every instance (they
    are independent of the channels either way), so a batched call gives each instance the
    starts, and the result, of a call on that instance alone.
    """
    parts = [_eigen_beam(h)[..., None, :], _unit(h)]
    if random_starts:
        beams = _random_beams((random_starts, h.shape[-1]), rng)
        parts.append(np.broadcast_to(beams, (*h.shape[:-2], *beams.shape)))
    return np.concatenate(parts, -2)


def _keep_best(best_a: np.ndarray, best_g: np.ndarray, beams: np.ndarray,
               g_min: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Replace the incumbent where one of ``beams`` (..., S, M), with g ``g_min``, beats it."""
    i = g_min.argmax(-1)[..., None]
    g = np.take_along_axis(g_min, i, -1)[..., 0]
    better = g > best_g
    a = np.take_along_axis(beams, i[..., None], -2)[..., 0, :]
    return np.where(better[..., None], a, best_a), np.where(better, g, best_g)


def _best(beams: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The beam of (..., S, M) with the largest g, and that g."""
    return _keep_best(beams[..., 0, :], np.full(beams.shape[:-2], -np.inf), beams,
                      gains(beams, h).min(-1))


# --- fast: batched multi-start ascent --------------------------------------------------------

def _fast(h: np.ndarray, rng: np.random.Generator, *, random_starts: int = 10,
          explore_iters: int = 20, keep: int | None = None, refine_iters: int = 300,
          tau: tuple[float, float] = (0.3, 1e-5), step: tuple[float, float] = (0.3, 1e-5),
          extra_starts: np.ndarray | None = None,
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Projected ascent on the sphere of a hinge soft-min of the gains, from many starts.

    Gains are normalised by min_i ‖h_i‖² (≥ g*, so g ∈ [0, 1]). Each step weights the clients
    by w_i = max(0, 1 − (g_i − min g)/τ), the near-weakest ones, takes the weighted gradient
    Σ_i w_i h_i (h_iᴴ a) (Wirtinger, ascent on Σ_i w_i |aᴴ h_i|²), keeps its component tangent
    to the sphere, and moves a fixed angle η along it; τ and η shrink geometrically, so
    early steps explore and late steps settle on a local max-min point. All §5.6 candidates
    (eigenvector, matched filters, ``random_starts`` random beams, and ``extra_starts``
    (..., K, M) when given, e.g. the SDR solution's) run ``explore_iters`` steps; the
    ``keep`` best (None: all) continue ``refine_iters`` more. The best beam seen so far is
    returned, so g never falls below the best starting candidate.

    Defaults: the starts of the multi-start SCA reference (10 random beams, as
    ``method="sca"``), every start refined, τ and η down to 1e-5. On fresh Rayleigh
    instances that is what comes within 0.0005 of the multi-start SCA's mean ratio to the
    SDR bound (``benchmarks/beamforming.py``); pruning to the best 2 after 20 steps lost
    0.004 (M = 10, n = 15) to 0.015 (M = 16, n = 30) of it, and stopping at τ, η = 3e-4
    another 0.0002-0.0004.
    """
    scale = _energy(h).min(-1)
    hn = h / np.sqrt(scale)[..., None, None]
    hc = np.swapaxes(hn.conj(), -1, -2)
    a = _candidates(hn, random_starts, rng)
    if extra_starts is not None:
        a = np.concatenate([a, _unit(extra_starts)], -2)
    keep = a.shape[-2] if keep is None else keep
    best_a, best_g = a[..., 0, :], np.full(h.shape[:-2], -1.0)
    total = explore_iters + refine_iters
    taus, steps = np.geomspace(*tau, total), np.geomspace(*step, total)
    for t in range(total + 1):
        p = a @ hc  # h_iᴴ a, (..., S, n)
        g = p.real ** 2 + p.imag ** 2
        g_min = g.min(-1)
        best_a, best_g = _keep_best(best_a, best_g, a, g_min)
        if t == 0:
            start = best_g
        if t == total:
            break
        if t == explore_iters:
            top = np.argsort(-g_min, -1)[..., :keep, None]
            a, p, g = (np.take_along_axis(x, top, -2) for x in (a, p, g))
        w = np.maximum(1.0 - (g - g.min(-1, keepdims=True)) / taus[t], 0.0)
        grad = (w * p) @ hn
        grad -= (a.real * grad.real + a.imag * grad.imag).sum(-1, keepdims=True) * a
        norm = np.sqrt((grad.real ** 2 + grad.imag ** 2).sum(-1, keepdims=True))
        # a zero tangent gradient (one distinct client: the matched filter) stays put
        a = _unit(a + steps[t] * grad / np.where(norm > 0, norm, 1.0))
    return best_a, best_g * scale, start * scale, total


# --- sca: the paper's reference ----------------------------------------------------------------

def _sca_subproblem(n: int, m: int) -> Callable[[np.ndarray], np.ndarray | None]:
    """(P_k) of §5.6 as a cvxpy SOCP built once: maps a^(k) to its solution (None if failed)."""
    import cvxpy as cp

    c, b = cp.Parameter((n, m), complex=True), cp.Parameter(n)
    a, s = cp.Variable(m, complex=True), cp.Variable()
    problem = cp.Problem(cp.Maximize(s), [2 * cp.real(c.conj() @ a) - b >= s,
                                          cp.norm(a, 2) <= 1])

    def solve_at(h: np.ndarray, ak: np.ndarray, solver: str) -> np.ndarray | None:
        p = h.conj() @ ak  # h_iᴴ a^(k)
        c.value, b.value = h * p[:, None], np.abs(p) ** 2  # c_i = h_i h_iᴴ a^(k), b_i
        problem.solve(solver=solver)
        return a.value

    return solve_at


def _sca_run(h: np.ndarray, ak: np.ndarray, subproblem: Callable, tol: float, max_iter: int,
             solver: str) -> tuple[np.ndarray, float, int, str]:
    """§5.6 steps 2–4 from one start: returns a, g(a), outer iterations, status."""
    gk, k = float(gains(ak, h).min()), 0
    for k in range(1, max_iter + 1):
        new = subproblem(h, ak, solver)
        if new is None:
            return ak, gk, k, "subproblem failed"
        new = _unit(new)
        gnew = float(gains(new, h).min())
        if gnew < gk:  # inexact subproblem: keep a^(k) and stop (§5.6 step 4)
            break
        ak, gk, progress = new, gnew, (gnew - gk) / gk
        if progress < tol:
            break
    return ak, gk, k, "ok"


def _sca(h: np.ndarray, rng: np.random.Generator, *, tol: float = 1e-4, max_iter: int = 50,
         random_starts: int = 10, multistart: bool = False, solver: str = "CLARABEL",
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Paper's SCA: from the best §5.6 candidate, or from every one with ``multistart``."""
    cands = _candidates(h, random_starts, rng)
    _, start = _best(cands, h)
    subproblem = _sca_subproblem(*h.shape[-2:])
    out = []
    for hi, ci in zip(h.reshape(-1, *h.shape[-2:]), cands.reshape(-1, *cands.shape[-2:])):
        order = np.argsort(-gains(ci, hi).min(-1))
        runs = [_sca_run(hi, ci[j], subproblem, tol, max_iter, solver)
                for j in (order if multistart else order[:1])]
        out.append(max(runs, key=lambda run: run[1]))
    a = np.stack([o[0] for o in out]).reshape(h.shape[:-2] + h.shape[-1:])
    iters = np.array([o[2] for o in out]).reshape(h.shape[:-2])
    bad = [o[3] for o in out if o[3] != "ok"]
    return a, gains(a, h).min(-1), start, iters, bad[0] if bad else "ok"


# --- sdr --------------------------------------------------------------------------------------

def sdr_bound(h: np.ndarray, solver: str = "CLARABEL") -> tuple[np.ndarray, np.ndarray]:
    """SDR of (33) for one instance h (n, M): max t s.t. h_iᴴ X h_i ≥ t, tr X ≤ 1, X ⪰ 0.

    Returns the optimal value (an upper bound on g*) and X. ``h`` is checked as in
    :func:`solve`; ``solver`` must be an installed cvxpy solver.
    """
    import cvxpy as cp

    h = _check(h)
    if h.ndim != 2:
        raise ValueError(f"`h` must be one instance of shape (n_clients, M); got {h.shape} "
                         "(solve(h, 'sdr') takes batches)")
    _check_options("sdr", {"solver": solver})
    n, m = h.shape
    scale = _energy(h).min()  # solve with g* ∈ (0, 1] for the solver's tolerances
    x, t = cp.Variable((m, m), hermitian=True), cp.Variable()
    q = np.einsum("im,ik->imk", h.conj(), h).reshape(n, m * m) / scale  # q_i·vec(X) = h_iᴴXh_i
    problem = cp.Problem(cp.Maximize(t), [x >> 0, cp.real(cp.trace(x)) <= 1,
                                          cp.real(q @ cp.vec(x, order="C")) >= t])
    with warnings.catch_warnings():  # Clarabel often flags "inaccurate" at ~1e-8 relative error
        warnings.filterwarnings("ignore", "Solution may be inaccurate")
        problem.solve(solver=solver)
    if x.value is None:
        raise RuntimeError(f"SDR solve failed: {problem.status}")
    return np.asarray(problem.value * scale, dtype=float), x.value


def _sdr_starts(h: np.ndarray, rng: np.random.Generator, randomizations: int,
                solver: str) -> tuple[np.ndarray, np.ndarray]:
    """Per instance the SDR bound and beams from X: its top eigenvector and Gaussian draws.

    Returns bounds (...,) and beams (..., 1 + randomizations, M), a ∝ X^{1/2} r with
    r ~ CN(0, I).
    """
    flat = h.reshape(-1, *h.shape[-2:])
    beams, bounds = [], []
    for hi in flat:
        bound, x = sdr_bound(hi, solver)
        lam, u = np.linalg.eigh(x)
        r = rng.standard_normal((randomizations, len(lam))) + 1j * rng.standard_normal(
            (randomizations, len(lam)))
        draws = _unit((r * np.sqrt(np.maximum(lam, 0.0))) @ u.T)
        beams.append(np.concatenate([u[:, -1][None], draws]))
        bounds.append(bound)
    return (np.array(bounds).reshape(h.shape[:-2]),
            np.stack(beams).reshape(h.shape[:-2] + beams[0].shape))


def _sdr(h: np.ndarray, rng: np.random.Generator, *, randomizations: int = 200,
         solver: str = "CLARABEL") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SDR bound and Gaussian randomisation: the best of X's top eigenvector and the draws."""
    bounds, beams = _sdr_starts(h, rng, randomizations, solver)
    a, g = _best(beams, h)
    return a, g, bounds


#: Relative accuracy of the SDR optimum as the conic solver returns it; the certified
#: bound is inflated by it so that it stays an upper bound on g*.
SDR_RTOL = 1e-6


def _certified(h: np.ndarray, rng: np.random.Generator, *, randomizations: int = 20,
               solver: str = "CLARABEL", **fast_options,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
    """``fast`` from its own starts and the SDR solution's, with the SDR bound.

    Returns a, g, the start's g, the ascent steps and the upper bound (1 + SDR_RTOL)·SDR.
    Every start of ``"fast"`` (same seed) runs as there, so g is never below fast's.
    """
    sdr_rng, = rng.spawn(1)  # fast's own starts stay those of method="fast" with this seed
    bounds, starts = _sdr_starts(h, sdr_rng, randomizations, solver)
    a, g, start, steps = _fast(h, rng, extra_starts=starts, **fast_options)
    return a, g, start, steps, bounds * (1 + SDR_RTOL)


# --- entry point ------------------------------------------------------------------------------

_BASELINES: dict[str, Callable[[np.ndarray, np.random.Generator], np.ndarray]] = {
    "eigen": lambda h, rng: _eigen_beam(h),
    "strongest": _strongest,
    "random": lambda h, rng: _random_beams(h.shape[:-2] + h.shape[-1:], rng),
}


def _closed_form(h: np.ndarray) -> np.ndarray | None:
    """Optimal beam when n = 1 (matched filter) or M = 1 (any phase); None otherwise."""
    if h.shape[-2] == 1:
        return _unit(h[..., 0, :])
    if h.shape[-1] == 1:
        return np.ones(h.shape[:-2] + (1,), complex)
    return None


def solve(h: ArrayLike, method: str = "fast", *, seed: int | np.random.Generator = 0,
          **options) -> BeamformingResult:
    """Solve the max-min receive beamforming problem (33) for one cell or a batch.

    Parameters
    ----------
    h : array_like, shape (..., n_clients, M), complex
        Channels h_i; leading dims are independent instances.
    method : str
        One of ``"fast"``, ``"certified"``, ``"sca"``, ``"sdr"``, ``"eigen"``,
        ``"strongest"``, ``"random"``.
    seed : int or numpy.random.Generator
        For random starts, randomisations and ``"random"``.
    **options
        ``"fast"``: ``random_starts`` (10), ``explore_iters`` (20), ``keep`` (None: all
        starts), ``refine_iters`` (300), ``tau`` ((0.3, 1e-5)), ``step`` ((0.3, 1e-5)).
        ``"certified"``: those of ``"fast"``, ``randomizations`` (20), ``solver``.
        ``"sca"``: ``tol`` (1e-4 = ε_sca), ``max_iter`` (50 = K_max), ``random_starts`` (10),
        ``multistart`` (False: start from the best candidate, as §5.6), ``solver``.
        ``"sdr"``: ``randomizations`` (200), ``solver``.

    Returns
    -------
    BeamformingResult

    Raises
    ------
    ValueError
        Real dtype, wrong shape, NaN/Inf or an all-zero client channel; unknown method/option.
    """
    started = time.perf_counter()
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {', '.join(METHODS)}; got {method!r}")
    _check_options(method, options)
    shape = np.shape(h)
    if len(shape) >= 2:
        check_memory(working_bytes(shape, method, int(options.get("random_starts", 10))
                                   + int(options.get("randomizations", 20))
                                   * (method == "certified")),
                     f"beamforming {shape[:-2]} instances of n={shape[-2]}, M={shape[-1]}",
                     "solve fewer or smaller instances at a time")
    h = _check(h)
    if not (isinstance(seed, np.random.Generator)
            or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0)):
        raise ValueError(f"`seed` must be an integer >= 0 or a numpy.random.Generator, got "
                         f"{str(seed)[:40]!r}")
    rng = np.random.default_rng(seed)
    batch = h.shape[:-2]
    closed = None if method == "random" else _closed_form(h)
    upper, status, iters = None, "ok", np.zeros(batch, int)
    try:
        if closed is not None:
            a, status = closed, "closed form"
            g = start = gains(a, h).min(-1)
            upper = g
        elif method == "fast":
            a, g, start, steps = _fast(h, rng, **options)
            iters = np.full(batch, steps)
        elif method == "certified":
            a, g, start, steps, upper = _certified(h, rng, **options)
            iters = np.full(batch, steps)
        elif method == "sca":
            a, g, start, iters, status = _sca(h, rng, **options)
        elif method == "sdr":
            a, g, upper = _sdr(h, rng, **options)
            start = g
        else:
            if options:
                raise TypeError(f"unexpected options {sorted(options)}")
            a = _BASELINES[method](h, rng)
            g = start = gains(a, h).min(-1)
    except TypeError as exc:  # unknown keyword for the method
        raise ValueError(f"method {method!r}: {exc}") from None
    return BeamformingResult(a, g, upper, start, iters, time.perf_counter() - started, method,
                             status)
