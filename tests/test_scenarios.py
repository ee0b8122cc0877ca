"""The solver studies behind ``wirelessfl masks`` / ``beamform``, now on the solvers side."""

import numpy as np
import pytest

from channels.rayleigh import simo_rayleigh
from solvers.scenarios import beamforming_study, load_arrays, mask_size_study


def test_mask_size_study_is_feasible_and_never_slower_than_uniform(rng):
    c = rng.uniform(1e-3, 5e-3, size=6)
    s = mask_size_study(c, 300, eps_th=9.0, edge_rounds=5)
    assert s.sizes.sum() == 300 and (s.sizes <= s.cap).all() and s.uniform.sum() == 300
    np.testing.assert_allclose(s.round_latency_s, 5 * (c * s.sizes).max())
    assert s.round_latency_s <= s.uniform_round_latency_s and 0 <= s.saving < 1


def test_beamforming_study_stays_below_the_sdr_bound(rng):
    h = simo_rayleigh((4,), 5, 3, rng)
    s = beamforming_study(h, "fast", snr_db=20.0, bound=True)
    assert s.mse_db.shape == (4,) and np.isfinite(s.mse_db).all()
    assert (s.ratio_to_bound <= 1 + 1e-6).all() and (s.ratio_to_bound > 0.5).all()


def test_load_arrays_reads_data_and_refuses_what_is_not_an_npz(tmp_path):
    good = tmp_path / "s.npz"
    np.savez(good, h=np.ones((2, 3, 4), complex))
    assert load_arrays(good, ("h",), "an array h")["h"].shape == (2, 3, 4)
    bad = tmp_path / "bad.npz"
    bad.write_text("not a zip")
    with pytest.raises(ValueError, match="not a readable .npz file"):
        load_arrays(bad, ("h",), "an array h")
    with pytest.raises(ValueError, match="no array 'x'"):
        load_arrays(good, ("x",), "an array x")
