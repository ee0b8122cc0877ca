"""Frequency-domain sharing of a cell's PRBs (``solvers.sharing``, issue 90): against a
slot-by-slot, PRB-by-PRB simulation written here, against brute force, against Sionna's
proportional-fair scheduler, and the phases' fixed point against stepping from finish to
finish."""

import itertools

import numpy as np
import pytest

from solvers.sharing import (
    _events,
    _finish,
    best_prbs,
    finish_times,
    proportional_fair_shares,
    round_robin_shares,
    share_rates,
)

SLOT = 1e-3


def _table(rng, s, m):
    """Rates that grow linearly up to a power cap, then fall (a power-limited client spreads
    its power thinner), each client with its own efficiency and cap."""
    eff = rng.uniform(0.2e6, 2e6, s)
    cap = rng.integers(1, m + 1, s)
    prbs = np.arange(1, m + 1)
    return np.where(prbs <= cap[:, None], eff[:, None] * prbs,
                    eff[:, None] * cap[:, None] * (1 - 0.01 * (prbs - cap[:, None])))


def _slots(table, bits):
    """Round robin over PRBs, slot by slot: each slot hands its PRBs one at a time to the
    clients still uploading, in turn from a pointer that moves on each slot, skipping a client
    at its rate-maximising count; a client sends r_u(its PRBs)·T_slot bits in the slot."""
    s, m = table.shape
    caps = best_prbs(table)
    left, ends, now, start = bits.astype(float).copy(), np.full(s, np.nan), 0.0, 0
    while np.isnan(ends).any():
        active = np.flatnonzero(np.isnan(ends))
        got = dict.fromkeys(active.tolist(), 0)
        order = np.roll(active, -start % len(active))
        given, moved = 0, True
        while given < m and moved:
            moved = False
            for u in order:
                if given < m and got[u] < caps[u]:
                    got[u] += 1
                    given += 1
                    moved = True
        start += 1
        for u in active:
            sent = table[u, got[u] - 1] * SLOT if got[u] else 0.0
            if sent >= left[u]:
                ends[u] = now + SLOT * left[u] / sent
            left[u] -= sent
        now += SLOT
    return ends


@pytest.mark.parametrize("seed", range(4))
def test_round_robin_finish_times_equal_a_slot_by_slot_prb_by_prb_simulation(seed):
    rng = np.random.default_rng(seed)
    s, m = 6, 12
    table = _table(rng, s, m)
    bits = rng.uniform(0.2, 1.0, s) * 2e6 * 0.3  # a few hundred slots each
    want = _slots(table, bits)
    got = finish_times(table, bits, "round_robin")
    np.testing.assert_allclose(got, want, rtol=0.03, atol=3 * SLOT)
    assert np.argmax(got) == np.argmax(want)


def test_water_filling_gives_capped_clients_their_cap_and_the_rest_equal_shares():
    table = np.array([[1.0, 2.0, 1.5, 1.0, 0.5, 0.1],       # m* = 2
                      [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],       # m* = 6
                      [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
    x = round_robin_shares(table, np.ones(3, bool))
    np.testing.assert_allclose(x, [2.0, 2.0, 2.0])  # 6 PRBs: everyone at 2
    x = round_robin_shares(np.pad(table, ((0, 0), (0, 4)), mode="edge"),
                           np.ones(3, bool))  # 10 PRBs: the capped one stays at 2
    np.testing.assert_allclose(x, [2.0, 4.0, 4.0])
    x = round_robin_shares(table, np.array([True, False, False]))
    np.testing.assert_allclose(x, [2.0, 0.0, 0.0])  # alone: its rate-maximising PRBs only
    assert share_rates(table, x)[0] == table[0, 1]


def test_proportional_fair_shares_maximise_the_log_utility_by_brute_force():
    """Rates concave in the PRBs (the greedy's condition): the integer allocation that
    maximises Σ log r_u(x_u) with Σ x_u ≤ M, every client at least one PRB."""
    rng = np.random.default_rng(3)
    m, s = 7, 3
    prbs = np.arange(1, m + 1)
    for _ in range(5):
        table = rng.uniform(1, 3, (s, 1)) * np.log1p(rng.uniform(0.2, 2, (s, 1)) * prbs)
        got = proportional_fair_shares(table, np.ones(s, bool))
        best = max((c for c in itertools.product(range(1, m + 1), repeat=s) if sum(c) <= m),
                   key=lambda c: sum(np.log(table[u, c[u] - 1]) for u in range(s)))
        assert got.tolist() == list(map(float, best))


def test_proportional_fair_equals_sionnas_pf_scheduler_in_the_long_run():
    """Sionna's ``PFSchedulerSUMIMO`` slot by slot (each PRB to the highest achievable over
    past rate) on flat, static rates: over 4,000 slots each user's share of the PRBs equals
    ours (linear rates: M/|A| each, time-shared in Sionna, frequency-shared here)."""
    pytest.importorskip("sionna.sys")
    import torch

    from wirelessfl.net.nr import sionna

    s, m, slots = 4, 8, 4000
    eff = torch.tensor([1.0, 2.0, 0.5, 4.0], dtype=torch.float64)
    pf = sionna().sys.PFSchedulerSUMIMO(s, m, 1, beta=0.98, precision="double", device="cpu")
    last = torch.ones(s, dtype=torch.float64)
    used = torch.zeros(s, dtype=torch.float64)
    for _ in range(slots):
        got = pf(last, eff.expand(1, m, s)).to(torch.float64)  # (1, m, s, streams)
        per = got.reshape(1, m, s, -1)[..., 0].sum((0, 1))
        used += per
        last = per * eff
    ours = proportional_fair_shares(np.outer(eff.numpy(), np.arange(1, m + 1)), np.ones(s, bool))
    np.testing.assert_allclose(used.numpy() / slots, ours, rtol=0.05)


@pytest.mark.parametrize("rule", ["round_robin", "proportional_fair"])
def test_the_phases_fixed_point_equals_stepping_from_finish_to_finish(rule):
    rng = np.random.default_rng(7)
    for _ in range(20):
        s, m = int(rng.integers(2, 12)), int(rng.integers(1, 30))
        table = _table(rng, s, m)
        bits = rng.uniform(0.01, 1.0, s) * 1e6
        np.testing.assert_allclose(_finish(table, bits, rule), _events(table, bits, rule),
                                   rtol=1e-9)


def test_zero_payloads_end_at_once_and_a_client_without_rate_never_ends():
    table = np.array([[1e6, 2e6], [0.0, 0.0], [1e6, 1.5e6]])
    got = finish_times(table, np.array([1e6, 1e6, 0.0]), "round_robin", compute_s=0.5)
    assert got[2] == 0.5 and np.isinf(got[1]) and got[0] == pytest.approx(0.5 + 0.5)


@pytest.mark.parametrize("bad, match", [
    (dict(table=np.ones(3)), "shape"),
    (dict(table=-np.ones((2, 3))), "table"),
    (dict(payload_bits=np.ones(3)), "payload_bits"),
    (dict(rule="fifo"), "rule"),
    (dict(compute_s=-1.0), "compute_s"),
])
def test_bad_inputs_are_one_line_each(bad, match):
    args = dict(table=np.ones((2, 3)), payload_bits=np.ones(2), rule="round_robin",
                compute_s=0.0)
    with pytest.raises(ValueError, match=match):
        finish_times(**{**args, **bad})
