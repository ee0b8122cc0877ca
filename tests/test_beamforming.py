import json

import numpy as np
import pytest

from channels.aircomp import AirCompCell
from channels.rayleigh import simo_rayleigh
from solvers import beamforming as bf


def _h(shape, n, m, seed=0):
    return simo_rayleigh(shape, n, m, np.random.default_rng(seed))


@pytest.mark.parametrize("method", ["fast", "sca", "sdr", "eigen", "strongest"])
def test_closed_forms(method):
    one_client = _h((3,), 1, 4)
    r = bf.solve(one_client, method)
    np.testing.assert_allclose(r.min_gain, (np.abs(one_client) ** 2).sum((-1, -2)))
    one_antenna = _h((3,), 6, 1)
    r = bf.solve(one_antenna, method)
    np.testing.assert_allclose(r.min_gain, (np.abs(one_antenna[..., 0]) ** 2).min(-1))
    np.testing.assert_allclose(r.upper_bound, r.min_gain)


@pytest.mark.parametrize("h, match", [
    (np.ones((4, 3)), "complex"),
    (np.ones(3, complex), "shape"),
    (np.full((2, 3), np.nan, complex), "NaN"),
    (np.array([[1, 1j], [0, 0]]), "all zero"),
])
def test_bad_channels(h, match):
    with pytest.raises(ValueError, match=match):
        bf.solve(h)


def test_bad_method_and_option():
    h = _h((), 3, 2)
    with pytest.raises(ValueError, match="method"):
        bf.solve(h, "mirror")
    with pytest.raises(ValueError, match="unknown option `iters`"):
        bf.solve(h, "fast", iters=3)
    with pytest.raises(ValueError, match="unknown option `keep` for method .eigen.; it takes none"):
        bf.solve(h, "eigen", keep=3)


def test_eigen_maximises_the_sum_of_gains():
    h = _h((20,), 8, 4)
    best = bf.gains(bf.solve(h, "eigen").a, h).sum(-1)
    others = bf.gains(bf.solve(h, "random", seed=1).a, h).sum(-1)
    assert (best >= others - 1e-9).all()
    eig = np.linalg.eigvalsh(np.swapaxes(h, -1, -2) @ h.conj())[..., -1]
    np.testing.assert_allclose(best, eig)


def test_methods_against_the_sdr_bound():
    """SDR bounds every method; fast reaches near it and never loses to its start or to SCA."""
    h = _h((12,), 8, 4, seed=3)
    sdr = bf.solve(h, "sdr")
    fast = bf.solve(h)
    sca = bf.solve(h, "sca")
    for r in (fast, sca, sdr, bf.solve(h, "eigen")):
        assert (r.min_gain <= sdr.upper_bound * (1 + 1e-5)).all()
        np.testing.assert_allclose(np.linalg.norm(r.a, axis=-1), 1.0)
    assert (fast.min_gain >= fast.start_gain).all() and (sca.min_gain >= sca.start_gain).all()
    assert (fast.min_gain / sdr.upper_bound).mean() > 0.9
    assert fast.min_gain.mean() >= 0.99 * sca.min_gain.mean()


@pytest.mark.parametrize("m,n", [(4, 8), (10, 15), (3, 20)])
def test_fast_between_its_start_and_the_sdr_bound_and_certified_gaps(m, n):
    """fast never below its start nor above the SDR bound; certified: gap = bound - g >= 0."""
    h = _h((6,), n, m, seed=m * n)
    cert = bf.solve(h, "certified", seed=5)
    fast = bf.solve(h, seed=5)
    assert (fast.min_gain >= fast.start_gain).all()
    assert (fast.min_gain <= cert.upper_bound).all()
    assert (cert.gap >= 0).all() and np.allclose(cert.gap, cert.upper_bound - cert.min_gain)
    assert (cert.min_gain >= fast.min_gain).all()  # fast's starts plus the SDR solution's
    sdr = bf.solve(h, "sdr")
    np.testing.assert_allclose(cert.upper_bound, sdr.upper_bound * (1 + bf.SDR_RTOL), rtol=1e-5)
    assert fast.gap is None


def test_batched_fast_equals_per_instance_and_is_seeded():
    h = _h((2, 3), 6, 4, seed=4)
    batched = bf.solve(h, "fast")
    single = bf.solve(h[1, 2], "fast")
    np.testing.assert_allclose(batched.min_gain[1, 2], single.min_gain)
    np.testing.assert_allclose(batched.a[1, 2], single.a)
    np.testing.assert_array_equal(bf.solve(h).a, batched.a)
    assert batched.a.shape == (2, 3, 4) and batched.iterations.shape == (2, 3)


def test_cli_reads_instances_and_reports_the_bound(tmp_path, capsys):
    from wirelessfl.cli import main

    h = _h((4,), 6, 3, seed=5)
    np.savez(tmp_path / "h.npz", h=h)
    assert main(["beamform", "--instances", str(tmp_path / "h.npz"), "--bound", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["instances"] == 4 and out["clients"] == 6 and out["antennas"] == 3
    np.testing.assert_allclose(out["min_gain_mean"], bf.solve(h).min_gain.mean())
    assert 0.8 < out["ratio_to_sdr_bound_mean"] <= 1 + 1e-6


# --- AirComp transceiver ----------------------------------------------------------------------

def _cell(tight=False, n=5, m=3, seed=0):
    h = _h((2,), n, m, seed)
    return AirCompCell(h, bf.solve(h).a, power=np.array([10.0, 100.0]), noise_power=2.0,
                       tight_power=tight)


def test_precoders_meet_the_power_budget():
    for tight, budget in ((False, np.array([10.0, 100.0]) / 25), (True, np.array([10.0, 100.0]))):
        cell = _cell(tight)
        power = np.abs(cell.precoders) ** 2
        assert (power <= budget[:, None] * (1 + 1e-9)).all()
        np.testing.assert_allclose(power.max(-1), budget)  # the weakest client at full budget
    np.testing.assert_allclose(_cell(False).mse / _cell(True).mse, 25.0)


def test_literal_signal_is_unbiased_with_the_mse_of_eq25():
    """Monte-Carlo of (22): mean = exact average, E|noise|² = MSE (25), Re part MSE/2."""
    cell = _cell()
    rng = np.random.default_rng(7)
    k = 200_000
    delta = rng.normal(size=(2, 5, 4)).repeat(k // 4, -1)
    est = cell.receive(delta, rng)
    noise = est - delta.mean(-2)
    sem = np.sqrt(cell.mse / k)[:, None]
    assert (np.abs(noise.mean(-1)) < 5 * sem[:, 0]).all()  # unbiased
    mse = cell.noise_power / (10 ** np.array([1, 2]) * cell.min_gain)
    np.testing.assert_allclose(cell.mse, mse)
    np.testing.assert_allclose((np.abs(noise) ** 2).mean(-1), cell.mse, rtol=0.02)
    np.testing.assert_allclose(noise.real.var(-1), cell.mse / 2, rtol=0.02)
    fast = cell.estimate(delta, rng, real_part=True) - delta.mean(-2)
    np.testing.assert_allclose(fast.var(-1), noise.real.var(-1), rtol=0.03)  # fast == literal
    np.testing.assert_allclose((cell.estimate(delta, rng) - delta.mean(-2)).var(-1), cell.mse,
                               rtol=0.02)
    np.testing.assert_allclose(cell.update_variance(100, 0.1), 0.01 * 100 * cell.mse)
