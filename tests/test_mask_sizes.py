import itertools

import numpy as np
import pytest

from channels.rates import aircomp_upload_time, tdma_rate
from channels.rayleigh import simo_rayleigh
from solvers import mask_sizes
from solvers.latency import (
    full_model_latency_aircomp,
    full_model_latency_oma,
    round_latency,
    size_cap,
    uniform_sizes,
)


def _instances(count, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(1, 10))
        total = int(rng.integers(0, 150))
        c = rng.uniform(0.1, 5.0, n)
        if rng.random() < 0.4:
            c = np.round(c, 1)  # ties
        cap = int(np.ceil(total / n)) + int(rng.integers(0, total + 1))
        yield c, total, cap


@pytest.mark.parametrize("backend", ["highs", "gurobi"])
def test_exact_matches_milp_backends(backend):
    for c, total, cap in _instances(60 if backend == "gurobi" else 150):
        e = mask_sizes.solve(c, total, cap)
        m = mask_sizes.solve(c, total, cap, backend=backend)
        assert m.success and e.success
        np.testing.assert_allclose(e.latency, m.latency, rtol=1e-9, atol=1e-12)
        assert e.sizes.sum() == total and (e.sizes <= cap).all() and (e.sizes >= 0).all()
        np.testing.assert_allclose(e.latency, (c * e.sizes).max())


def test_exact_latency_is_the_dth_smallest_marginal_latency():
    """Independent optimum: greedy marginal allocation ⇒ τ* = D-th smallest of {c_j k, k ≤ U_j}."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 300))
        total = int(rng.integers(0, 20 * n))
        c = rng.uniform(1e-3, 2e-3, (2, n))
        c[:, rng.random(n) < 0.05] = 0.0
        cap = rng.integers(0, 40, (2, n))
        cap[:, 0] += total
        marginals = np.where(np.arange(1, cap.max() + 1) <= cap[..., None],
                             c[..., None] * np.arange(1, cap.max() + 1), np.inf)
        expected = np.sort(marginals.reshape(2, -1), -1)[:, total - 1] if total else np.zeros(2)
        r = mask_sizes.solve(c, total, cap)
        np.testing.assert_array_equal(r.latency, expected)
        assert (r.sizes.sum(-1) == total).all() and (r.sizes <= cap).all()


def test_tie_break_against_brute_force():
    """Optimal latency first, then the smallest max d_j (docs/papers/hist.md §4.2)."""
    rng = np.random.default_rng(1)
    for _ in range(80):
        n, total = int(rng.integers(1, 4)), int(rng.integers(0, 9))
        c = rng.choice([0.5, 1.0, 1.5, 2.0], n)
        cap = int(rng.integers(int(np.ceil(total / n)), total + 2))
        best = min(((c * np.array(d)).max(), max(d)) for d in
                   itertools.product(range(cap + 1), repeat=n) if sum(d) == total)
        r = mask_sizes.solve(c, total, cap)
        assert (float(r.latency), int(r.sizes.max())) == pytest.approx(best)


def test_homogeneous_cells_get_the_uniform_split():
    r = mask_sizes.solve(np.full(4, 0.01), 300, 112)
    assert r.sizes.tolist() == [75, 75, 75, 75]


def test_batched_equals_loop():
    c = np.random.default_rng(2).uniform(1, 3, (3, 5, 6))
    batched = mask_sizes.solve(c, 40, 12)
    for idx in np.ndindex(3, 5):
        single = mask_sizes.solve(c[idx], 40, 12)
        np.testing.assert_array_equal(batched.sizes[idx], single.sizes)
        assert batched.latency[idx] == single.latency


@pytest.mark.slow  # ~12 s of MILP instances: python -m pytest -m slow
def test_scalar_path_equals_the_batched_path_and_highs_including_ties():
    """One instance of <= 64 cells takes the compiled (Numba) path: the same sizes as the
    batched solver, ties included."""
    rng = np.random.default_rng(7)
    for t in range(3000):
        n = int(rng.integers(1, mask_sizes.SCALAR_CELLS + 1))
        c = [rng.uniform(1e-3, 2e-3, n), rng.integers(1, 4, n).astype(float),   # many ties
             np.where(rng.random(n) < 0.3, 0.0, rng.uniform(0, 1, n)),
             10.0 ** rng.uniform(-6, 6, n)][t % 4]
        total = int(rng.integers(0, 40 * n + 1))
        cap = np.maximum(rng.integers(0, 3 * total // n + 3, n), -(-total // n))
        single = mask_sizes.solve(c, total, cap)
        batched = mask_sizes.solve(np.stack([c, c]), total, cap)  # two rows: the NumPy path
        np.testing.assert_array_equal(single.sizes, batched.sizes[0])
        kernel = getattr(mask_sizes._solve_one_kernel, "py_func", mask_sizes._solve_one_kernel)
        if t % 10 == 0:  # the kernel's source run uncompiled: the same sizes
            np.testing.assert_array_equal(kernel(c, total, cap.astype(np.int64)), batched.sizes[0])
        top = int(cap.max())  # a scalar cap: the quick single-call path
        quick = mask_sizes.solve(c, total, top)
        np.testing.assert_array_equal(quick.sizes, mask_sizes.solve(np.stack([c, c]), total, top).sizes[0])
        assert single.latency == batched.latency[0]
        if t % 60 == 0:
            h = mask_sizes.solve(c, total, cap, backend="highs")
            np.testing.assert_allclose(single.latency, h.latency, rtol=1e-9, atol=1e-12)


def test_zero_latency_cells_and_zero_total():
    r = mask_sizes.solve([0.0, 1.0, 2.0], 5, 4)
    assert r.latency == pytest.approx(1.0) and r.sizes.sum() == 5 and r.sizes[0] == 4
    assert mask_sizes.solve([1.0, 2.0], 0, 3).sizes.tolist() == [0, 0]


@pytest.mark.parametrize("args,match", [
    (([1.0, 1.0], 7, 3), "infeasible: the caps allow at most 6"),
    (([1.0, np.nan], 2, 3), "finite and >= 0"),
    (([1.0, -1.0], 2, 3), "finite and >= 0"),
    (([1.0, 1.0], 2.5, 3), "must be an integer >= 0"),
    (([1.0, 1.0], 2, -1), "non-negative integers"),
])
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        mask_sizes.solve(*args)
    with pytest.raises(ValueError, match="backend"):
        mask_sizes.solve([1.0], 1, 1, backend="cplex")


def test_latency_formulas_by_hand():
    cpu = np.array([[1e9, 2e9, 1e9]])
    rate = np.array([[1e7, 2e7, 4e7]])
    mask = np.array([[True, True, False]])  # third client is padding
    c = full_model_latency_oma(cpu, rate, local_steps=20, cycles_per_step=1e6, model_bits=1e6,
                               client_mask=mask)
    # max(20e6/1e9 + 2*1e6/1e7, 20e6/2e9 + 2*1e6/2e7) = max(0.22, 0.11)
    assert c.tolist() == pytest.approx([0.22])
    exact = full_model_latency_oma(cpu, rate, local_steps=20, cycles_per_step=1e6,
                                   model_bits=1e6, client_mask=mask, tdma="exact")
    assert exact.tolist() == pytest.approx([0.02 + 0.1 + 0.05])
    air = full_model_latency_aircomp(cpu, local_steps=20, cycles_per_step=1e6, num_params=600,
                                     client_mask=mask)
    assert air.tolist() == pytest.approx([0.02 + 1 / 14e3])
    assert float(round_latency(c, [30], 300, edge_rounds=5)) == pytest.approx(5 * 0.022)
    assert aircomp_upload_time(900, ceil=True) == pytest.approx(2 / 14e3)
    with pytest.raises(ValueError, match="at least one client"):
        full_model_latency_oma(cpu, rate, local_steps=1, cycles_per_step=1, model_bits=1,
                               client_mask=np.zeros((1, 3), bool))


def test_size_cap_and_uniform():
    assert [size_cap(300, n) for n in (2, 4, 6, 8)] == [225, 112, 75, 56]  # §4.3
    assert size_cap(300, 4, kappa=6) == 75  # kappa = 6 forces the uniform split
    assert uniform_sizes(300, 8).tolist() == [37] * 7 + [41]  # [code] create_list


def test_rayleigh_statistics_and_rate():
    h = simo_rayleigh((4000,), 2, 10, np.random.default_rng(3))
    # CN(0, 1) entries: E|h|^2 = 1, real and imaginary parts each of variance 1/2
    assert np.mean(np.abs(h) ** 2) == pytest.approx(1.0, abs=0.02)
    assert np.var(h.real) == pytest.approx(0.5, abs=0.01)
    assert abs(np.mean(h[..., 0] * h[..., 1].conj())) < 0.02
    r = tdma_rate(h, 1000.0)
    np.testing.assert_allclose(r, 9e6 * np.log2(1 + 1000 * np.sum(np.abs(h) ** 2, -1)))


def test_offsets_match_brute_force_and_highs():
    """max_j c_j (d_j + σ) (HIST's shared parameters, §4.3): exact solver = enumeration = HiGHS."""
    import itertools

    rng = np.random.default_rng(7)
    for _ in range(60):
        n = int(rng.integers(1, 4))
        c = rng.uniform(0.1, 3.0, n)
        if rng.random() < 0.2:
            c[0] = 0.0
        total, cap = int(rng.integers(0, 10)), int(rng.integers(4, 10))
        sigma = float(rng.choice([0.0, 0.5, 3.7, 20.0]))
        if cap * n < total:
            continue
        r = mask_sizes.solve(c, total, cap, offset=sigma)
        best = min(max(c[j] * (d[j] + sigma) for j in range(n))
                   for d in itertools.product(range(cap + 1), repeat=n) if sum(d) == total)
        assert r.sizes.sum() == total and (r.sizes <= cap).all()
        assert float(r.latency) == pytest.approx(best, rel=1e-12, abs=1e-12)
    c = rng.uniform(0.1, 10, (20, 5))
    exact = mask_sizes.solve(c, 60, 20, offset=7.5)
    highs = mask_sizes.solve(c, 60, 20, offset=7.5, backend="highs")
    np.testing.assert_allclose(exact.latency, highs.latency, rtol=1e-8)
