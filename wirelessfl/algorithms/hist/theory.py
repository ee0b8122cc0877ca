"""HIST's convergence bounds: Theorem 1 (14), Theorem 2 (29) and the step-size rule (13).

Fang, Han, Brinton, arXiv 2310.17890, Sec. III and V (``docs/papers/hist.md`` §3). The bound on
(1/TE) Σ_t Σ_e E‖∇f(x̂^{t,e})‖² is a sum of six terms,

    (I)   4 (f(x̄⁰) − f*) / (γ T E H)            initialisation
    (II)  100 γ Ñ L σ²                          SGD noise
    (III) 1356 γ L δ₁²                          cross-cell heterogeneity
    (IV)  60 γ L δ₂²                            in-cell heterogeneity
    (V)   6 (N/d) (1/T) Σ_t d^t_max δ₁²         partition sizes
    (VI)  48 (N−1) L² (1/T) Σ_t ‖x̄^t‖²         model masking

plus, for AirComp (29), γ (1/TE) Σ_t Σ_e Σ_j MSE_j^{t,e}. The outer sum runs over
t = 0..T−1 (§8.2 item 5). (I)–(IV) vanish as T → ∞ with γ = (TEHÑ)^{-1/2}; (V) and (VI) do
not. The constants are those of the paper (re-derived in ``tests/test_theory.py``).

Examples
--------
>>> b = hist_bound(L=1.0, sigma2=1.0, delta1_2=0.5, delta2_2=0.5, f0_minus_fstar=2.0, N=2,
...                n_list=[10, 10], E=5, H=20, T=1000, gamma=1e-5, d=300,
...                dmax_seq=[150] * 1000, xnorm2_seq=[0.0] * 1000)
>>> round(b.terms["V"], 6), b.step_ok, b.binding
(3.0, True, '13d')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from channels.validation import as_finite, as_float, as_int


@dataclass(frozen=True)
class Bound:
    """The evaluated bound.

    Attributes
    ----------
    terms : dict of str to float
        ``"I"``…``"VI"`` of (14) and, with AirComp, ``"MSE"`` of (29).
    total : float
        Their sum.
    step_limits : dict of str to float
        The four upper limits on γ in (13), ``"13a"``…``"13d"``.
    binding : str
        The smallest (binding) limit.
    step_ok : bool
        Whether γ satisfies (13); the bound holds only then.
    n_tilde : float
        Ñ = Σ_j 1/n_j.
    """

    terms: dict[str, float]
    total: float
    step_limits: dict[str, float]
    binding: str
    step_ok: bool
    n_tilde: float


def step_limits(L: float, N: int, n_tilde: float, E: int, H: int) -> dict[str, float]:
    """The four limits on γ of (13)."""
    L = as_float("L", L, lo=0, lo_open=True)
    N, E, H = as_int("N", N, lo=1), as_int("E", E, lo=1), as_int("H", H, lo=1)
    n_tilde = as_float("n_tilde", n_tilde, lo=0, lo_open=True)
    return {"13a": 1.0 / (45.0 * np.sqrt(N) * E * H * L),
            "13b": n_tilde / (N * H * L),
            "13c": 1.0 / (N * H**2 * L),
            "13d": 1.0 / (N * (N + 1) * E**2 * H**2 * L)}


def hist_bound(L: float, sigma2: float, delta1_2: float, delta2_2: float,
               f0_minus_fstar: float, N: int, n_list: Sequence[int], E: int, H: int, T: int,
               gamma: float, d: int, dmax_seq: ArrayLike, xnorm2_seq: ArrayLike,
               mse_seq: ArrayLike | None = None) -> Bound:
    """Evaluate every term of (14), or of (29) when ``mse_seq`` is given, and check (13).

    Parameters
    ----------
    L, sigma2, delta1_2, delta2_2 : float
        Smoothness L, SGD variance σ² (9), heterogeneity δ₁² (10) and δ₂² (11).
    f0_minus_fstar : float
        f(x̄⁰) − f*.
    N : int
        Cells (Theorem 1 needs N ≥ 2).
    n_list : sequence of int
        Clients per cell n_j.
    E, H, T : int
        Edge rounds, local steps, global rounds.
    gamma : float
        Step size γ.
    d : int
        Model dimension.
    dmax_seq : array_like, shape (T,)
        d^t_max (15) of every round.
    xnorm2_seq : array_like, shape (T,)
        ‖x̄^t‖² of every round.
    mse_seq : array_like, shape (T, E, N), optional
        MSE_j^{t,e} of Theorem 2 (gradient domain, §8.2 item 8).
    """
    L = as_float("L", L, lo=0, lo_open=True)
    gamma = as_float("gamma", gamma, lo=0, lo_open=True)
    for name, v in (("sigma2", sigma2), ("delta1_2", delta1_2), ("delta2_2", delta2_2),
                    ("f0_minus_fstar", f0_minus_fstar)):
        as_float(name, v, lo=0)
    N, E, H, T, d = (as_int("N", N, lo=1), as_int("E", E, lo=1), as_int("H", H, lo=1),
                     as_int("T", T, lo=1), as_int("d", d, lo=1))
    n = np.asarray(n_list, dtype=float)
    if N < 2 or n.shape != (N,) or (n < 1).any():
        raise ValueError(f"need N >= 2 cells and n_list of N positive counts, got N={N}, "
                         f"n_list={list(n_list)}")
    dmax, xnorm2 = as_finite("dmax_seq", dmax_seq, lo=0), as_finite("xnorm2_seq", xnorm2_seq, lo=0)
    if dmax.shape != (T,) or xnorm2.shape != (T,):
        raise ValueError(f"dmax_seq and xnorm2_seq need one value per round (T={T})")
    n_tilde = float((1.0 / n).sum())
    terms = {"I": 4.0 * f0_minus_fstar / (gamma * T * E * H),
             "II": 100.0 * gamma * n_tilde * L * sigma2,
             "III": 1356.0 * gamma * L * delta1_2,
             "IV": 60.0 * gamma * L * delta2_2,
             "V": 6.0 * N / d * float(dmax.mean()) * delta1_2,
             "VI": 48.0 * (N - 1) * L**2 * float(xnorm2.mean())}
    if mse_seq is not None:
        mse = as_finite("mse_seq", mse_seq, lo=0)
        if mse.shape != (T, E, N):
            raise ValueError(f"mse_seq must have shape (T, E, N) = ({T}, {E}, {N}), got "
                             f"{mse.shape}")
        terms["MSE"] = gamma * float(mse.sum()) / (T * E)
    limits = step_limits(L, N, n_tilde, E, H)
    binding = min(limits, key=limits.get)
    return Bound(terms, float(sum(terms.values())), limits, binding,
                 bool(gamma <= limits[binding]), n_tilde)
