"""``network.model: nr`` (issue 69): a 5G NR uplink with Sionna's radio, checked against the
standards' closed forms, our own channels, and the digital links' deadline, resume and
re-timing contracts. Sionna's import and PHY tables are built once per test session."""

import numpy as np
import pytest
import torch

pytest.importorskip("sionna.sys", reason="network.model nr needs the [nr] extra (sionna-no-rt)")

from channels.rayleigh import simo_rayleigh  # noqa: E402
from solvers.uplink import deadline_outage  # noqa: E402
from wirelessfl.net.links import NetworkConfig, RoundCost, make_link  # noqa: E402
from wirelessfl.net.nr import NRSettings, sionna  # noqa: E402
from wirelessfl.rng import Seeds  # noqa: E402
from wirelessfl.run.kinds import open_run, run_job  # noqa: E402
from wirelessfl.run.records import RunRecord  # noqa: E402

RAW = {"seed": 4, "rounds": 4,
       "data": {"dataset": "synthetic", "num_clients": 12, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3},
       "algorithm": {"name": "fedavg", "clients_per_round": 6}}
NR = {"model": "nr", "params_per_vector": 10**6, "step_seconds": 0.01}
#: The link of runs made before 2026-11-28: one client a slot, HARQ without limit.
LEGACY = {"sharing": "tdma", "harq_max": 0, "min_sinr_db": None}


def _link(n=60, seed=0, **settings):
    return make_link(NetworkConfig.of("nr", **settings), 1000, n, Seeds(seed))


def _rows(folder):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(folder).rows()]


def _umi_pathloss(d3d, d2d, h_bs, h_ut, fc, los):
    """TR 38.901 Table 7.4.1-1, UMi street canyon, written out from the table."""
    fc_ghz, c = fc / 1e9, 3e8
    d_bp = 4 * (h_bs - 1.0) * (h_ut - 1.0) * fc / c
    pl1 = 32.4 + 21 * np.log10(d3d) + 20 * np.log10(fc_ghz)
    pl2 = (32.4 + 40 * np.log10(d3d) + 20 * np.log10(fc_ghz)
           - 9.5 * np.log10(d_bp**2 + (h_bs - h_ut) ** 2))
    pl_los = np.where(d2d <= d_bp, pl1, pl2)
    pl_nlos = 35.3 * np.log10(d3d) + 22.4 + 21.3 * np.log10(fc_ghz) - 0.3 * (h_ut - 1.5)
    return np.where(los, pl_los, np.maximum(pl_los, pl_nlos))


@pytest.mark.parametrize("los", [True, False])
def test_path_loss_at_three_distances_is_tr38901_s_formula(los):
    """Sionna's UMi scenario, the one the link drops its clients in, at 30, 150 and 600 m
    (both sides of the LoS breakpoint of 3.5 GHz, 10 m / 1.5 m heights: 163 m) equals the
    table's formula to 0.01 dB."""
    sn = sionna()
    tr = sn.phy.channel.tr38901
    fc, h_bs, h_ut = 3.5e9, 10.0, 1.5
    d2d = np.array([30.0, 150.0, 600.0])
    ut = torch.tensor([[[x, 0.0, h_ut] for x in d2d]], dtype=torch.float64)
    bs = torch.tensor([[[0.0, 0.0, h_bs]]], dtype=torch.float64)
    arr = [tr.PanelArray(num_rows_per_panel=1, num_cols_per_panel=1, polarization="single",
                         polarization_type="V", antenna_pattern="omni", carrier_frequency=fc,
                         precision="double", device="cpu") for _ in range(2)]
    sc = tr.UMiScenario(carrier_frequency=fc, o2i_model="low", ut_array=arr[0], bs_array=arr[1],
                        direction="uplink", precision="double", device="cpu")
    zeros = torch.zeros(1, 3, 3, dtype=torch.float64)
    sc.set_topology(ut, bs, zeros, torch.zeros(1, 1, 3, dtype=torch.float64), zeros,
                    torch.zeros(1, 3, dtype=torch.bool), los)
    got = sc.basic_pathloss[0, 0].numpy()
    d3d = np.sqrt(d2d**2 + (h_bs - h_ut) ** 2)
    np.testing.assert_allclose(got, _umi_pathloss(d3d, d2d, h_bs, h_ut, fc, los), atol=0.01)


def test_power_control_is_ts38213_s_open_loop_capped_at_the_maximum():
    """P_u = min(P_max, P0 + α PL_u + 10 log10 M_u) [dBm] for every client of a drop, with
    both sides of the cap present; M_u the most PRBs the power reaches, at least one."""
    link = _link(60, alpha=0.8, p0_dbm=-85.0)
    s, pl = link.settings, link.deployment(60).pathloss_db
    prbs, power, _ = link.budget(60)
    want = np.minimum(s.ut_max_power_dbm, s.p0_dbm + s.alpha * pl + 10 * np.log10(prbs))
    np.testing.assert_allclose(10 * np.log10(power) + 30, want, atol=1e-9)
    assert ((prbs >= 1) & (prbs <= s.prbs)).all()
    capped = want >= s.ut_max_power_dbm - 1e-9
    assert capped.any() and (~capped).any()
    assert (prbs[~capped & (prbs < s.prbs)] == np.floor(
        10 ** ((s.ut_max_power_dbm - s.p0_dbm - s.alpha * pl[~capped & (prbs < s.prbs)]) / 10))).all()


def test_link_adaptation_meets_the_bler_target_and_harq_attains_it_over_2000_slots():
    """The MCS chosen is the highest of PUSCH table 1 whose TBLER meets the target (every
    higher one misses it); a client no MCS serves (a power-limited one on 1 PRB) gets its
    lowest valid one. 2,000 slots of Sionna's own ACK/NACK draws at the chosen MCS fail
    with its TBLER (±0.02)."""
    from wirelessfl.net.nr import _seeded, radio

    link = _link(60, bler_target=0.1)
    sinr, prbs = link.sinr(60, np.random.default_rng(3))
    mcs, _, tbler = link.transport(sinr, prbs)
    phy, _ = radio()
    n = len(sinr)
    s = torch.as_tensor(sinr, dtype=torch.float64)
    re = torch.as_tensor(12 * 12 * prbs, dtype=torch.int32)
    every = torch.arange(28, dtype=torch.int32)[:, None].expand(28, n)
    table = phy(every, sinr_eff=s.expand(28, n), num_allocated_re=re.expand(28, n),
                check_mcs_index_validity=False)[3].numpy()  # (MCS, client); inf: invalid
    meets = table <= 0.1
    served = meets.any(0)
    assert served.mean() > 0.8
    highest = 27 - np.argmax(meets[::-1], axis=0)
    assert (mcs[served] == highest[served]).all()
    assert (mcs[~served] == np.argmax(np.isfinite(table), axis=0)[~served]).all()
    np.testing.assert_allclose(tbler, table[mcs, np.arange(n)])
    u = int(np.flatnonzero(served & (tbler > 0.01))[0])
    slots = 2000
    with _seeded(11):
        out = phy(torch.full((slots, 1), int(mcs[u]), dtype=torch.int32),
                  sinr_eff=s[u].expand(slots, 1), num_allocated_re=re[u].expand(slots, 1),
                  check_mcs_index_validity=False)
    nack = float((out[1] == 0).double().mean())
    assert abs(nack - tbler[u]) <= 0.02 and nack <= 0.1 + 0.02


def test_outer_loop_link_adaptation_slot_by_slot_meets_the_target_and_our_long_run_law():
    """Sionna's own OLLA, slot by slot for 2,000 slots over 8 clients of a UMi drop whose
    offset settles inside its clip: each slot fades anew (our SIMO Rayleigh draws, MRC over
    4 antennas), its MCS is OLLA's on the client's mean SINR, its block fails with Sionna's
    TBLER at the slot's SINR, and the HARQ feedback moves the offset. Each client's achieved
    BLER is within ±0.02 of the 0.1 target, and its decoded bits per slot within 5% of the
    link's long-run law (``link_adaptation: outer``), which the clock uses."""
    from wirelessfl.net.nr import DATA_SYMBOLS, radio

    link = _link(60, link_adaptation="outer", sharing="tdma")
    law = link.outer_loop(60)
    inside = np.flatnonzero((law.law[:, 0] < 1e-3) & (law.law[:, -1] < 1e-3))
    assert len(inside) >= 8
    pick = inside[:8]
    np.testing.assert_allclose(law.achieved_bler[inside], 0.1, atol=1e-9)
    mean, prbs = link.mean_sinr(60)
    phy, _ = radio()
    olla = sionna().sys.OuterLoopLinkAdaptation(phy, num_ut=8, bler_target=0.1,
                                                precision="double", device="cpu")
    res = torch.as_tensor(12 * DATA_SYMBOLS * prbs[pick], dtype=torch.int32)
    rng, slots = np.random.default_rng(5), 2000
    fading = np.sum(np.abs(simo_rayleigh((slots,), 8, 4, rng)) ** 2, -1) / 4
    draws = rng.random((slots, 8))
    estimate = torch.as_tensor(mean[pick])
    harq = torch.full((8,), -1, dtype=torch.int32)
    failed, bits = np.zeros(8), np.zeros(8)
    for t in range(slots):  # OLLA's feedback loop is sequential: the test's loop, not ours
        mcs = olla(res, harq, sinr_eff=estimate)
        tbler = phy(mcs, sinr_eff=estimate * torch.as_tensor(fading[t]), num_allocated_re=res,
                    check_mcs_index_validity=False)[3].numpy()
        ok = draws[t] >= tbler
        failed += ~ok
        bits += ok * link.block_bits(mcs, res).numpy()
        harq = torch.as_tensor(ok.astype(np.int32))
    assert np.all(np.abs(failed / slots - 0.1) <= 0.02)
    np.testing.assert_allclose(bits / slots, law.bits_per_slot[pick], rtol=0.05)


def test_outer_loop_clients_pay_for_not_knowing_the_fading():
    """Against the inner loop on each round's own SINR (its mean rate over 200 rounds): a
    client whose offset settles inside the clip uploads slower under OLLA, whose MCS cannot
    follow the fades. A client OLLA holds at the top MCS (27) fails less often than the
    target: the offset sinks to its clip. The clock's rate is OLLA's law."""
    outer = _link(60, link_adaptation="outer", sharing="tdma")
    inner = _link(60, **LEGACY)
    law = outer.outer_loop(60)
    rate = outer.rates(60, np.random.default_rng(0))
    np.testing.assert_allclose(rate, law.bits_per_slot / outer.settings.slot_s)
    mean = np.mean([inner.rates(60, np.random.default_rng(i)) for i in range(200)], 0)
    inside = (law.law[:, 0] < 1e-3) & (law.law[:, -1] < 1e-3)
    top = np.sum(law.law * (law.mcs == 27), -1) > 0.99
    assert inside.sum() >= 5 and top.sum() >= 5
    assert np.all(rate[inside] < mean[inside])
    assert np.all(law.achieved_bler[top] < 0.1)


def test_an_nr_upload_takes_longer_than_shannon_s_time_at_the_same_sinr():
    """R_u ≤ 12·M_u·Δf·log2(1 + SINR_u) for every client: the ratio is reported."""
    link = _link(60, **LEGACY)
    rng = lambda: np.random.default_rng(5)  # noqa: E731
    rates = link.rates(60, rng())
    sinr, prbs = link.sinr(60, rng())
    shannon = 12 * prbs * link.settings.scs_khz * 1e3 * np.log2(1 + sinr)
    ratio = rates / shannon
    assert (ratio < 1).all() and ratio.min() > 0
    print(f"NR rate / Shannon rate: median {np.median(ratio):.2f}, range "
          f"{ratio.min():.2f}-{ratio.max():.2f}")


def test_our_rayleigh_draws_are_sionna_s_rayleigh_block_fading():
    """With path loss removed: ‖h‖² over 4 antennas of channels' SIMO draw and of Sionna's
    RayleighBlockFading have one distribution (two-sample KS, 4,000 each)."""
    from scipy import stats

    sn = sionna()
    ours = np.sum(np.abs(simo_rayleigh((), 4000, 4, np.random.default_rng(0))) ** 2, -1)
    with __import__("wirelessfl.net.nr", fromlist=["_seeded"])._seeded(3):
        fading = sn.phy.channel.RayleighBlockFading(num_rx=1, num_rx_ant=4, num_tx=1,
                                                    num_tx_ant=1, device="cpu")
        a, _ = fading(batch_size=4000, num_time_steps=1)
    theirs = (a.abs() ** 2).reshape(4000, 4).sum(-1).numpy()
    assert stats.ks_2samp(ours, theirs).pvalue > 1e-3
    assert abs(theirs.mean() - 4) < 0.2 and abs(ours.mean() - 4) < 0.2


def test_a_client_with_more_path_loss_is_never_faster_on_average():
    """Mean rates over 200 rounds, clients by their loss PL_u (distance, shadowing, walls):
    never higher than a client with less loss beyond the 2% of Monte Carlo noise (full
    compensation gives every client the full band at one received power until its power is
    capped, so those nearer share one rate), and the farthest far slower than the nearest."""
    link = _link(40)
    mean = np.mean([link.rates(40, np.random.default_rng(t)) for t in range(200)], axis=0)
    ordered = mean[np.argsort(link.deployment(40).pathloss_db)]
    assert (ordered[1:] <= 1.02 * np.maximum.accumulate(ordered)[:-1]).all()
    assert ordered[-1] < 0.1 * ordered[0]


def test_the_drop_is_the_run_s_own_and_leaves_torch_s_generator_alone():
    torch.manual_seed(7)
    want = torch.rand(3)
    torch.manual_seed(7)
    a = _link(30, seed=1).deployment(30)
    assert torch.equal(torch.rand(3), want)  # Sionna's seeding restored torch's state
    b = _link(30, seed=1).deployment(30)
    c = _link(30, seed=2).deployment(30)
    np.testing.assert_array_equal(a.pathloss_db, b.pathloss_db)
    assert not np.allclose(a.pathloss_db, c.pathloss_db)
    cells = _link(30, cells=3).deployment(30)
    assert cells.cell.tolist() == [u * 3 // 30 for u in range(30)]


def test_interference_changes_the_sinr_only_and_is_the_written_out_sum():
    """``interference: true`` keeps the drop (the clients' own losses) and the fading, and
    lowers every SINR by exactly the other sectors' mean interference, written out here
    transmitter by transmitter from the drop's cross losses (module docstring's I_c)."""
    quiet, loud = _link(24, cells=3), _link(24, cells=3, interference=True)
    a, b = quiet.deployment(24), loud.deployment(24)
    np.testing.assert_array_equal(a.pathloss_db, b.pathloss_db)
    assert a.cross_db is None and b.cross_db.shape == (21, 24 + 18)
    s = loud.settings
    own = np.array([b.pathloss_db[j] if j < 24 else b.cross_db[b.serving[j], j]
                    for j in range(len(b.serving))])
    prbs, power = loud.open_loop(own)
    want = np.zeros(3)
    for c in range(3):
        for j, sector in enumerate(b.serving):
            if sector == c:
                continue
            per_prb = power[j] / (s.prbs * 8) if j < 24 else power[j] / prbs[j]
            want[c] += per_prb * 10 ** (-b.cross_db[c, j] / 10)
    np.testing.assert_allclose(loud.interference(24), want, rtol=1e-12)
    (sq, mq), (sl, ml) = quiet.sinr(24, np.random.default_rng(1)), loud.sinr(24, np.random.default_rng(1))
    np.testing.assert_array_equal(mq, ml)
    thermal = quiet.budget(24)[2]
    np.testing.assert_allclose(sq / sl, 1 + ml * want[b.cell] / thermal, rtol=1e-12)
    assert (sl < sq).all()
    assert (loud.rates(24, np.random.default_rng(1)) <= quiet.rates(24, np.random.default_rng(1))).all()
    print(f"interference over thermal noise per PRB, 3 UMi sectors (dB): "
          f"{np.round(10 * np.log10(want / (thermal[0] / mq[0])), 1)}")


def test_the_sector_pattern_is_tr38901_s_horizontal_element_pattern():
    """A(φ) = −min(12(φ/65°)², 30) dB off boresight, both sides, and 0 dB to the own sector."""
    from wirelessfl.net.nr import sector_pattern_db

    angles = np.radians([0.0, 65.0, -65.0, 100.0, 180.0, 30.0])
    ut = np.stack([np.cos(angles), np.sin(angles), np.zeros(6)], 1) * 50.0
    bs = np.zeros((2, 6, 3))
    att = sector_pattern_db(bs, ut, np.radians([0.0, 100.0]), np.array([1, 1, 1, 1, 1, 0]))
    np.testing.assert_allclose(att[0], [0.0, -12.0, -12.0, -12 * (100 / 65) ** 2, -30.0, 0.0])
    np.testing.assert_allclose(att[1], [0.0] * 5 + [-12 * (70 / 65) ** 2])  # own links: 0 dB


@pytest.mark.parametrize("sharing", ["tdma", "round_robin"])
def test_a_deadline_drops_exactly_the_clients_whose_nr_upload_misses_it(tmp_path, sharing):
    """Under both ways of sharing a sector's slots; round robin, where every upload but the
    last ends later than shortest first, drops at least as many in every round."""
    deadline = 3.0
    rows = {}
    for how in {"tdma", sharing}:
        raw = {**RAW, "rounds": 2, "network": {**NR, "deadline_s": deadline, "sharing": how}}
        run_job(open_run(raw), tmp_path / how, quiet=True)
        rows[how] = _rows(tmp_path / how)
    link = _link(12, seed=4, sharing=sharing)
    for row in rows[sharing][1:]:
        t = row["round"]
        ids = np.array(sorted(row["arrived"] + row["dropped"]))
        rates = link.rates(12, Seeds(4).generator("network", t))[ids]
        out = deadline_outage(rates, 32e6, deadline, access=sharing, compute_s=3 * 0.01)
        assert sorted(row["arrived"]) == ids[out.arrived].tolist()
        assert sorted(row["dropped"]) == ids[~out.arrived].tolist()
    got = rows[sharing][1:]
    assert any(r["dropped"] for r in got) and any(r["arrived"] for r in got)
    for mine, td in zip(got, rows["tdma"][1:]):
        assert len(mine["dropped"]) >= len(td["dropped"])


def test_an_nr_run_cut_and_resumed_gives_the_uninterrupted_rows(cut_and_resume):
    full, resumed = cut_and_resume({**RAW, "network": {**NR, "deadline_s": 3.0}})
    assert resumed == full


def test_a_tdma_run_retimed_under_nr_is_the_run_trained_under_nr(tmp_path):
    from wirelessfl.run.retime import retime_run

    base = {**RAW, "rounds": 3, "eval_every": 1}
    run_job(open_run({**base, "network": {**NR, "model": "tdma"}}), tmp_path / "t", quiet=True)
    run_job(open_run({**base, "network": NR}), tmp_path / "n", quiet=True)
    trained = RunRecord(tmp_path / "n").rows()
    retimed = retime_run(tmp_path / "t", ["network.model=nr"])
    assert [r["sim_time_s"] for r in retimed[1:]] == [r["sim_time_s"] for r in trained[1:]]
    assert trained[-1]["sim_time_s"] > 0


@pytest.mark.parametrize("setting, match", [
    ("network.bandwidth_mhz=7", "Table 5.3.2-1"),
    ("network.alpha=1.5", "alpha"),
    ("network.scenario=indoor", "scenario"),
    ("network.scs_khz=120", "scs_khz"),
    ("network.interference=maybe", "interference"),
    ("network.link_adaptation=fast", "link_adaptation"),
    ("network.olla_step_db=0", "olla_step_db"),
    ("network.olla_step_db=0.5", "link_adaptation: outer"),
    ("network.sharing=pf", "sharing"),
    ("network.harq_max=-1", "harq_max"),
    ("network.harq_max=0", "arq_max"),  # with arq_max 3 below
    ("network.min_sinr_db=nan", "min_sinr_db"),
    ("network.link_adaptation=outer", "sharings in time"),
])
def test_bad_nr_settings_are_one_line_each(cli_error, setting, match):
    extra = ["--set", "network.arq_max=3"] if setting == "network.harq_max=0" else []
    assert match in cli_error({**RAW, "network": {"model": "nr"}}, "--set", setting, *extra)


def test_a_hierarchical_algorithm_s_cells_must_be_the_nr_sectors(cli_error):
    raw = {**RAW, "algorithm": {"name": "hfedavg", "cells": 2}, "network": {"model": "nr"}}
    assert "network.cells: 2" in cli_error(raw)


def test_settings_are_checked_in_the_api_too():
    assert NRSettings().prbs == 51 and NRSettings().slot_s == 0.5e-3
    assert NRSettings(scs_khz=15, bandwidth_mhz=10).prbs == 52
    with pytest.raises(ValueError, match="cells"):
        NRSettings(cells=22)
    with pytest.raises(ValueError, match="deadline_s"):
        NRSettings(compression="quantize")
    cost = RoundCost(1e6, 1e6, 0.0, 3, 10, (2, 5, 7))
    assert _link(10).timed(cost, np.random.default_rng(0)) > 0


# --------------------------------------------------------------- over the air on 38.901
def test_over_the_air_gains_equal_to_a_constant_are_that_snr_exactly():
    """g_i ≡ 10^(x/10) at 0 dB is the unit-gain channel at x dB: the same aggregate and MSE
    (the channel h√g and the power scale alike in (23)-(25)), to the iterative beamformer's
    tolerance (1e-5)."""
    from wirelessfl.server.aggregation import AirComp

    stack = {"w": torch.randn(6, 40, generator=torch.Generator().manual_seed(0), dtype=torch.float64)}
    plain = AirComp(12.0, 0.1, antennas=4, real_part=True)
    gained = AirComp(0.0, 0.1, antennas=4, real_part=True,
                     gains=lambda ids: np.full(len(ids), 10 ** 1.2))
    a, ia = plain.aggregate_stack(stack, np.ones(6), np.random.default_rng(3))
    b, ib = gained.aggregate_stack(stack, np.ones(6), np.random.default_rng(3),
                                   clients=np.arange(6))
    torch.testing.assert_close(a["w"], b["w"], rtol=1e-5, atol=1e-7)
    assert ia.mse == pytest.approx(ib.mse, rel=1e-5)
    with pytest.raises(ValueError, match="client ids"):
        gained.aggregate_stack(stack, np.ones(6), np.random.default_rng(3))


@pytest.mark.parametrize("algorithm", [{"name": "fedavg", "clients_per_round": 6},
                                       {"name": "scaffold", "clients_per_round": 6},
                                       {"name": "fadamgc", "clients_per_round": 6}])
def test_over_the_air_on_a_umi_drop_trains_with_each_client_s_own_gain(tmp_path, algorithm,
                                                                        cut_and_resume):
    """Over the air on the drop: every aggregation reads its clients' own path gains (the
    MSE differs from the unit-gain channel's), and the run resumes to its uninterrupted rows."""
    net = {"model": "aircomp", "aggregation": "over_the_air", "antennas": 4,
           "large_scale": "umi"}
    raw = {**RAW, "algorithm": algorithm, "network": net}
    full, resumed = cut_and_resume(raw)
    assert resumed == full
    unit = {**raw, "network": {k: v for k, v in net.items() if k != "large_scale"}}
    run_job(open_run(unit), tmp_path / "unit", quiet=True)
    assert full[-1]["aircomp_mse"] != _rows(tmp_path / "unit")[-1]["aircomp_mse"]


def test_truncation_on_the_drop_silences_the_clients_with_the_most_loss():
    from wirelessfl.net.aircomp import NOISE_FIGURE_DB, UT_POWER_DBM

    link = make_link(NetworkConfig.of("aircomp", aggregation="over_the_air", antennas=4,
                                      large_scale="umi", truncation_db=10.0), 1000, 12, Seeds(4))
    agg = link.aggregator(0.1)
    g = agg.gains(np.arange(12))
    pl = link.settings  # the drop's losses give the gains: g = P 10^(-PL/10) / (kT F B)
    loss = __import__("wirelessfl.net.nr", fromlist=["drop"]).drop(
        NRSettings(scenario="umi"), 12, Seeds(4).int_seed("deployment")).pathloss_db
    noise = -174 + NOISE_FIGURE_DB + 10 * np.log10(pl.bandwidth_hz)
    np.testing.assert_allclose(10 * np.log10(g), UT_POWER_DBM - loss - noise)
    stack = {"w": torch.ones(12, 5)}
    silent = [agg.aggregate_stack(stack, np.ones(12), np.random.default_rng(t),
                                  clients=np.arange(12))[1].silent for t in range(50)]
    weakest = int(np.argmin(g))
    assert 10 * np.log10(g[weakest]) < 0 and min(silent) >= 1  # far below 10 dB: always silent


@pytest.mark.parametrize("setting, match", [({"large_scale": "indoor"}, "large_scale"),
                                            ({"large_scale": "umi", "snr_db": 5.0}, "snr_db"),
                                            ({"large_scale": "umi", "aggregation": "exact"},
                                             "over_the_air")])
def test_bad_large_scale_settings_are_refused(setting, match):
    with pytest.raises(ValueError, match=match):
        NetworkConfig.of("aircomp", **{"aggregation": "over_the_air", **setting})


# ------------------------------------------- issue 90: the band shared, HARQ that gives up
def test_the_phy_tables_link_adaptation_equals_sionnas_inner_loop_and_phy_abstraction():
    """The look-up the frequency sharings read (Sionna's TBLER on a 0.05 dB grid, linear in
    the nearest point) picks Sionna's own MCS for ≥ 97% of random (SINR, PRBs), and its TBLER
    and TBS there agree (TBS exactly; TBLER to 0.02 for ≥ 97% of them: on a waterfall
    steeper than 0.02 per 0.025 dB the grid point is another SINR)."""
    from wirelessfl.net.nr import phy_tables

    link = _link(60, **LEGACY)
    rng = np.random.default_rng(0)
    sinr = 10 ** rng.uniform(-0.6, 3.0, 400)
    prbs = rng.integers(1, 52, 400)
    mcs, tbs, tbler = link.transport(sinr, prbs)
    tables = phy_tables(51)
    per = np.zeros((400, 51))
    per[np.arange(400), prbs - 1] = sinr
    got_mcs, got_tbs, got_tbler = (v[np.arange(400), prbs - 1]
                                   for v in tables.adapt(per + 1e-30, 0.1))
    same = got_mcs == mcs
    assert same.mean() >= 0.97
    np.testing.assert_array_equal(got_tbs[same], tbs[same])
    assert (np.abs(got_tbler[same] - np.minimum(tbler[same], 1)) <= 0.02).mean() >= 0.97


def test_legacy_settings_give_the_rates_and_clock_of_runs_made_before():
    """sharing tdma, harq_max 0, min_sinr_db None: the plain rates of the open-loop PRBs (no
    extra draw), as an old folder's stored config is read (``as_made``)."""
    from wirelessfl.net.digital import RoundChannels, Upload
    from wirelessfl.run.key_schema import as_made

    old = as_made({"network": {"model": "nr", "sharing": "tdma"}})["network"]
    assert old == {"model": "nr", **LEGACY}
    assert as_made({"network": {"model": "tdma"}})["network"] == {"model": "tdma"}
    link = _link(20, **LEGACY)
    ch = link.channels(20, np.random.default_rng(2))
    assert type(ch) is RoundChannels and not isinstance(ch, Upload)
    sinr, prbs = link.sinr(20, np.random.default_rng(2))
    _, tbs, tbler = link.transport(sinr, prbs)
    np.testing.assert_allclose(ch.rates, tbs * (1 - np.minimum(tbler, 0.999)) / 0.5e-3)


def test_alone_a_client_takes_the_prbs_that_maximise_its_rate_and_sharing_beats_one_a_slot():
    """Per client, the rate alone is the best of its 51 PRB counts, never below the open-loop
    count's; the round of 20 clients sharing the band in frequency ends sooner than one
    client a slot (the same fading)."""
    new, old = _link(20), _link(20, **LEGACY)
    ch = new.channels(20, np.random.default_rng(1))
    np.testing.assert_array_equal(ch.rates, ch.table.max(1))
    ol = old.budget(20)[0]
    assert (ch.rates >= ch.table[np.arange(20), ol - 1] - 1e-9).all()
    ids, bits = np.arange(20), np.full(20, 7.6e6)
    fast = ch.uplink(ids, bits, None, 0.0).seconds
    slow = old.channels(20, np.random.default_rng(1)).uplink(ids, bits, None, 0.0).seconds
    assert fast < slow


def test_association_outage_matches_its_rayleigh_closed_form():
    """A client is unserved when its SINR on one PRB, S̄·G with G ~ Gamma(A, 1)/... (MRC over
    A Rayleigh antennas), is below min_sinr_db: over 400 rounds each client's unserved share
    matches P(G < γ/S̄) (binomial 4σ)."""
    from scipy.stats import gamma

    link = _link(40, min_sinr_db=15.0)
    draws = np.array([link.channels(40, np.random.default_rng(t)).associated
                      for t in range(400)])
    ch = link.channels(40, np.random.default_rng(0))
    s = link.settings
    pl = link.deployment(40).pathloss_db
    p1 = np.minimum(s.ut_max_power_dbm, s.p0_dbm + s.alpha * pl) - 30
    n_prb = 10 ** ((-174 + s.noise_figure_db - 30) / 10) * 12 * s.scs_khz * 1e3
    mean = 10 ** (p1 / 10) / (10 ** (pl / 10) * n_prb)  # per antenna: E‖h‖² = A
    want = gamma.cdf(10 ** 1.5 / mean, s.bs_antennas)
    got = 1 - draws.mean(0)
    assert ((want > 0.05) & (want < 0.95)).sum() >= 3
    np.testing.assert_array_less(np.abs(got - want), 4 * np.sqrt(want * (1 - want) / 400) + 3 / 400)
    assert ch.associated.dtype == bool


def test_harq_failures_match_their_closed_form_and_never_exceed_the_transmission_limit():
    """An upload of K blocks fails when a block loses all L = harq_max·(arq_max + 1)
    transmissions: P = 1 − (1 − TBLER^L)^K. Forcing one client's TBLER, its failures over
    4,000 geometric draws match; its time before failing is at most (J − 1) blocks and L
    transmissions."""
    import dataclasses

    link = _link(20, harq_max=2, arq_max=0)
    ch = link.channels(20, np.random.default_rng(0))
    assert ch.transmissions == 2
    rng = np.random.default_rng(9)
    p, k = 0.3, 40
    eps = p ** 2
    u = rng.random(4000)
    loss = np.maximum(np.ceil(np.log1p(-u) / np.log1p(-eps)), 1)
    want = 1 - (1 - eps) ** k
    assert abs((loss <= k).mean() - want) < 4 * np.sqrt(want * (1 - want) / 4000)
    one = dataclasses.replace(ch, tbler=np.full_like(ch.tbler, p), associated=np.ones(20, bool),
                              first_loss=np.full(20, 3.0))
    tbs = one.tbs[0, one.prbs[0] - 1]
    up = one.uplink(np.array([0]), np.array([k * tbs]), None, 0.0)
    assert up.outage[0] and not up.arrived[0]
    slots = up.finish_s[0] / link.settings.slot_s
    assert slots <= (3 - 1) / (1 - p) + 2 + 1e-6


def test_a_client_in_deep_outage_never_makes_the_round_longer_than_the_others_plus_l_slots():
    import dataclasses

    link = _link(12)
    ch = link.channels(12, np.random.default_rng(3))
    ids, bits = np.arange(12), np.full(12, 7.6e6)
    others = ch.uplink(ids[1:], bits[1:], None, 0.0).seconds
    deep = dataclasses.replace(ch, tbler=np.where(np.arange(12)[:, None] == 0, 0.999, ch.tbler),
                               first_loss=np.where(np.arange(12) == 0, 1.0, ch.first_loss))
    up = deep.uplink(ids, bits, None, 0.0)
    assert up.outage[0] and up.radio["outage"] >= 1
    assert up.seconds <= others + ch.transmissions * link.settings.slot_s * 12
    unserved = dataclasses.replace(ch, associated=np.arange(12) != 0)
    up = unserved.uplink(ids, bits, None, 0.0)
    assert up.outage[0] and up.seconds <= others + 1e-9


def test_an_nr_run_drops_clients_in_outage_and_logs_the_radio_of_each_round(tmp_path):
    """A run whose association threshold leaves some clients unserved: they are dropped from
    the aggregate, counted, and every row carries the round's per-client radio."""
    raw = {**RAW, "rounds": 3, "eval_every": 1, "network": {**NR, "min_sinr_db": 28.0}}
    run_job(open_run(raw), tmp_path / "o", quiet=True)
    rows = _rows(tmp_path / "o")[1:]
    assert sum(len(r["outage"]) for r in rows) > 0
    for r in rows:
        assert set(r["outage"]) <= set(r["dropped"])
        radio = r["radio"]
        assert radio["outage"] == len(r["outage"])
        assert len(radio["mcs"]) == len(radio["clients"]) == len(r["arrived"] + r["dropped"])
        assert all(1 <= m <= 51 for m in radio["prbs"])
    assert rows[-1]["dropped_clients"] >= sum(len(r["outage"]) for r in rows)
    assert rows[-1]["outage_clients"] == sum(len(r["outage"]) for r in rows)
    assert RunRecord(tmp_path / "o").summary()["outage_uploads"] == rows[-1]["outage_clients"]


def test_the_radio_command_prints_plots_and_writes_the_distributions(tmp_path, capsys):
    from wirelessfl.cli import main

    raw = {**RAW, "rounds": 2, "eval_every": 1, "network": NR}
    run_job(open_run(raw), tmp_path / "r", quiet=True)
    png, csv_path = tmp_path / "radio.png", tmp_path / "radio.csv"
    assert main(["radio", str(tmp_path / "r"), "--out", str(png), "--csv", str(csv_path)]) == 0
    text = capsys.readouterr().out
    assert "SINR [dB]" in text and "12 client-rounds" in text
    assert png.stat().st_size > 1000
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("round,client,sinr_db") and len(lines) == 13
    assert main(["radio", str(tmp_path / "r"), "--out", str(png)]) == 2  # never overwritten
    assert "exists" in capsys.readouterr().err
    run_job(open_run({**raw, "network": {"model": "tdma"}}), tmp_path / "t", quiet=True)
    assert main(["radio", str(tmp_path / "t")]) == 2
    assert "no radio rows" in capsys.readouterr().err


def test_runs_made_before_keep_their_keys_and_the_new_default_gets_a_new_one():
    """The link of runs made before (as an old folder's config is read) leaves the new fields
    out of its run key, so its stored runs are found again; the new default enters them."""
    from wirelessfl.run.config import resolve
    from wirelessfl.run.configtypes import key_view
    from wirelessfl.run.key_schema import as_made

    old = key_view(resolve(as_made({**RAW, "network": {"model": "nr", "sharing": "tdma"}})))
    new = key_view(resolve({**RAW, "network": {"model": "nr"}}))
    assert not {"sharing", "harq_max", "min_sinr_db"} & set(old["network"])
    assert {"sharing", "harq_max", "min_sinr_db"} <= set(new["network"])


def test_the_shannon_rate_model_is_the_capacity_on_the_same_prbs_and_drop():
    """``rate_model: shannon``: r_u(m) = 12·m·Δf·log2(1 + SINR_u(m)) on the same drop, fading
    and power control as the tables (so never below them), no BLER; refused with a sharing in
    time."""
    tables, ideal = _link(20), _link(20, rate_model="shannon")
    a = tables.channels(20, np.random.default_rng(4))
    b = ideal.channels(20, np.random.default_rng(4))
    np.testing.assert_allclose(a.sinr, b.sinr)
    m = np.arange(1, 52)
    np.testing.assert_allclose(b.table, 12 * m * 30e3 * np.log2(1 + b.sinr))
    assert (b.rates >= a.rates).all() and (b.tbler == 0).all()
    with pytest.raises(ValueError, match="sharings in frequency"):
        NRSettings(rate_model="shannon", sharing="tdma")


def test_a_hierarchical_run_over_nr_is_clocked_with_outage_but_aggregates_its_own_cells(tmp_path):
    """HFedAvg times its own uplink: no digital uplink, its cells' clients all aggregated,
    the clock the link's, cell by cell."""
    raw = {**RAW, "rounds": 1, "algorithm": {"name": "hfedavg", "cells": 2, "edge_rounds": 2},
           "network": {**NR, "cells": 2}}
    run_job(open_run(raw), tmp_path / "h", quiet=True)
    row = _rows(tmp_path / "h")[-1]
    assert row["sim_time_s"] > 0 and "radio" not in row


def test_clients_beyond_the_cell_edge_are_named_once_before_anything_trains(tmp_path, capsys):
    """An association threshold above most clients' mean SINR: the run names them on stderr
    once, at start-up, and trains."""
    link = _link(12, seed=4, min_sinr_db=25.0)
    edge = link.edge_clients(12)
    assert 0 < len(edge) <= 12
    assert len(_link(12, seed=4, **LEGACY).edge_clients(12)) == 0
    raw = {**RAW, "rounds": 1, "network": {**NR, "min_sinr_db": 25.0}}
    run_job(open_run(raw), tmp_path / "e", quiet=True)
    err = capsys.readouterr().err
    assert err.count("beyond the cell edge") == 1
    assert ", ".join(map(str, edge[:10].tolist())) in err


@pytest.mark.slow  # other processes started, killed or signalled: CI's second step
def test_kill_9_of_an_nr_run_with_radio_records_resumes_to_the_uninterrupted_rows(
        tmp_path, kill_9_and_resume):
    """SIGKILL of a real ``wirelessfl run`` process once it has written rows (every round
    checkpointed), then ``--resume``: the rows, radio records included, equal a run straight
    through."""
    raw = {**RAW, "rounds": 10, "eval_every": 1, "checkpoint_every": 1,
           "network": {**NR, "min_sinr_db": 20.0}}
    run_job(open_run(raw), tmp_path / "straight", quiet=True)
    got, want = _rows(kill_9_and_resume(raw, 2)), _rows(tmp_path / "straight")
    assert got == want and any(r.get("outage") for r in want)


def test_retime_under_nr_counts_the_client_rounds_in_outage_as_a_trained_run_drops_them(tmp_path):
    from wirelessfl.run.retime import retime_run

    base = {**RAW, "rounds": 3, "eval_every": 1}
    net = {**NR, "min_sinr_db": 22.0}
    run_job(open_run({**base, "network": {**NR, "model": "tdma"}}), tmp_path / "t", quiet=True)
    run_job(open_run({**base, "network": net}), tmp_path / "n", quiet=True)
    trained = RunRecord(tmp_path / "n").rows()
    retimed = retime_run(tmp_path / "t", ["network.model=nr", "network.min_sinr_db=22.0"])
    counts = np.cumsum([len(r.get("outage", [])) for r in trained])
    assert [r["outage_clients"] for r in retimed] == counts.tolist() and counts[-1] > 0
    assert [r["sim_time_s"] for r in retimed[1:]] == [r["sim_time_s"] for r in trained[1:]]
    plain = retime_run(tmp_path / "t", ["network.model=fixed"])
    assert "outage_clients" not in plain[-1]
