"""HIST's bound evaluator and the constants 100, 1356, 60 of Theorem 1 (docs/papers/hist.md §3.5)."""

import numpy as np
import pytest

from wirelessfl.algorithms.hist.theory import hist_bound, step_limits


def _admissible(rng):
    N = int(rng.integers(2, 9))
    n = rng.integers(1, 30, N)
    E, H, L = int(rng.integers(1, 16)), int(rng.integers(1, 61)), float(rng.uniform(0.1, 10))
    n_tilde = float((1.0 / n).sum())
    gamma = min(step_limits(L, N, n_tilde, E, H).values()) * rng.uniform(0.01, 1.0)
    return N, n, E, H, L, n_tilde, gamma


@pytest.mark.parametrize("seed", range(5))
def test_per_round_inequality_45_is_within_theorem_1_constants(seed):
    """Re-derive (14) from (45): under (13) its σ², δ₁², δ₂² coefficients fit 100, 1356, 60."""
    rng = np.random.default_rng(seed)
    for _ in range(100):
        _check_constants(rng)


def _check_constants(rng):
    N, n, E, H, L, n_tilde, g = _admissible(rng)
    share = rng.uniform(1.0 / N, 1.0)  # d_max / d
    sigma = 4 * g * n_tilde * L + g**2 * L**2 * (72 * (N + 1) * E * H * n_tilde + 24 * N * H)
    delta1 = g**2 * L**2 * (1296 * (N + 1) * N * share * E**2 * H**2 + 60 * N * H**2)
    delta2 = 60 * g**2 * L**2 * N * H**2
    assert sigma <= 100 * g * n_tilde * L * (1 + 1e-12)
    assert delta1 <= 1356 * g * L * (1 + 1e-12)
    assert delta2 <= 60 * g * L * (1 + 1e-12)
    # (44): the factor in front of the gradient sum stays >= 1/2
    assert 1 - g**2 * L**2 * (972 * (N - 1) * E**2 * H**2 + 30 * N * H**2) >= 0.5


def test_bound_terms_by_hand_and_step_check():
    T = 10
    kw = dict(L=2.0, sigma2=3.0, delta1_2=0.5, delta2_2=0.25, f0_minus_fstar=1.0, N=2,
              n_list=[5, 5], E=2, H=3, T=T, d=100, dmax_seq=np.full(T, 60),
              xnorm2_seq=np.full(T, 4.0))
    b = hist_bound(gamma=1e-4, **kw)
    assert b.terms["I"] == pytest.approx(4 / (1e-4 * T * 2 * 3))
    assert b.terms["II"] == pytest.approx(100 * 1e-4 * 0.4 * 2 * 3)
    assert b.terms["V"] == pytest.approx(6 * 2 / 100 * 60 * 0.5)
    assert b.terms["VI"] == pytest.approx(48 * 1 * 4 * 4.0)
    assert b.step_ok and b.binding == "13a"  # 1/(45√2·6·2) < 1/(2·3·4·9·2)
    assert b.total == pytest.approx(sum(b.terms.values()))
    uniform = hist_bound(gamma=1e-4, **{**kw, "dmax_seq": np.full(T, 50)})
    assert uniform.terms["V"] == pytest.approx(6 * 0.5)  # = 6 δ₁² at the uniform split
    assert not hist_bound(gamma=1.0, **kw).step_ok
    air = hist_bound(gamma=1e-4, mse_seq=np.ones((T, 2, 2)), **kw)
    assert air.terms["MSE"] == pytest.approx(1e-4 * 2)  # γ (1/TE) Σ MSE = γ N


def test_bound_refuses_one_cell_and_bad_shapes():
    kw = dict(L=1, sigma2=1, delta1_2=1, delta2_2=1, f0_minus_fstar=1, E=1, H=1, T=2,
              gamma=1e-3, d=10, dmax_seq=[5, 5], xnorm2_seq=[1, 1])
    with pytest.raises(ValueError, match="N >= 2"):
        hist_bound(N=1, n_list=[3], **kw)
    with pytest.raises(ValueError, match="mse_seq"):
        hist_bound(N=2, n_list=[3, 3], mse_seq=np.ones((2, 2, 2)), **kw)
