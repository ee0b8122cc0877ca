"""Outer-loop link adaptation's offset chain (issue 69): its stationary law against closed
forms and against the chain run forward, and its drift balance at the BLER target."""

import numpy as np
import pytest
import torch

from wirelessfl.net import olla


def _falling(lattice, centre):
    """A p̄ falling with the offset, as a real MCS ladder's: 1 far below ``centre``, 0 above."""
    return torch.sigmoid(-(lattice - centre) * 1.5)


def test_a_constant_error_rate_at_an_equal_step_gives_the_birth_death_law():
    """p* = 0.5 makes δ_down = δ_up, one lattice step each way; with p̄ ≡ q the chain is a
    clipped birth-death walk and π_k ∝ (q/(1 − q))^k (detailed balance)."""
    lattice = olla.offsets(1.0, 0.5)
    assert lattice.numel() == 41 and float(lattice[1] - lattice[0]) == pytest.approx(1.0)
    q = 0.45
    law = olla.stationary_law(torch.full((2, 41), q, dtype=torch.float64), 1.0, 0.5, lattice)
    expected = (q / (1 - q)) ** np.arange(41)
    np.testing.assert_allclose(law[0].numpy(), expected / expected.sum(), rtol=1e-9)
    np.testing.assert_allclose(law[1].numpy(), law[0].numpy())


@pytest.mark.parametrize("target, step", [(0.1, 1.0), (0.3, 0.5), (0.01, 1.0), (0.7, 2.0)])
def test_the_law_is_stationary_and_meets_the_target_inside_the_clip(target, step):
    """For targets whose steps are and are not whole lattice units (0.3, 0.7: the nearer
    units with their mean kept; 0.01: a lattice coarser than δ_down): the transition rows sum
    to 1, πP = π, and the achieved BLER Σπp̄ is the target (the drift balance)."""
    lattice = olla.offsets(step, target)
    assert lattice.numel() <= olla.MAX_STATES + 1
    bler = torch.stack([_falling(lattice, c) for c in (-3.0, 0.0, 4.0)])
    p = olla.transitions(bler, step, target, lattice)
    np.testing.assert_allclose(p.sum(-1).numpy(), 1.0, rtol=1e-12)
    law = olla.stationary_law(bler, step, target, lattice)
    np.testing.assert_allclose((law[:, None, :] @ p)[:, 0].numpy(), law.numpy(), atol=1e-12)
    assert law[:, [0, -1]].max() < 1e-6  # the mass stays inside the clip
    np.testing.assert_allclose((law * bler).sum(-1).numpy(), target, rtol=1e-6)


def test_the_law_is_where_the_chain_run_forward_spends_its_slots():
    """20,000 slots of the offset moving with Bernoulli(p̄) feedback (δ_up = 1 dB,
    p* = 0.1): the fraction of slots at each offset is π to within Monte Carlo error."""
    lattice = olla.offsets(1.0, 0.1)
    bler = _falling(lattice, 2.0)
    law = olla.stationary_law(bler[None], 1.0, 0.1, lattice)[0].numpy()
    rng = np.random.default_rng(0)
    k, visits, up = int(np.argmax(law)), np.zeros(lattice.numel()), 9  # δ_up / δ_down
    for u in rng.random(20000):
        visits[k] += 1
        k = min(k + up, lattice.numel() - 1) if u < float(bler[k]) else max(k - 1, 0)
    assert np.abs(visits / visits.sum() - law).sum() < 0.08  # total variation 0.04
    assert float((visits / visits.sum()) @ bler.numpy()) == pytest.approx(0.1, abs=0.01)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="bler_target"):
        olla.offsets(1.0, 1.0)
    with pytest.raises(ValueError, match="delta_up"):
        olla.offsets(0.0, 0.1)
    lattice = olla.offsets(1.0, 0.1)
    with pytest.raises(ValueError, match="shape"):
        olla.stationary_law(torch.zeros(3, 7, dtype=torch.float64), 1.0, 0.1, lattice)
    for bad in (float("nan"), 1.5, -0.1):
        with pytest.raises(ValueError, match="probabilities"):
            olla.stationary_law(torch.full((lattice.numel(),), bad, dtype=torch.float64),
                                1.0, 0.1, lattice)
    with pytest.raises(TypeError, match="floating"):
        olla.transitions(torch.zeros(lattice.numel(), dtype=torch.int64), 1.0, 0.1, lattice)
