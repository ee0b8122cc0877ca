"""Over-the-air aggregation for any round-based algorithm (issue 33, item 1): HIST's AirComp
transceiver with weights, truncation and normalisation, used by the FedAvg family."""

import dataclasses

import numpy as np
import pytest
import torch

from channels.aircomp import AirCompCell
from channels.rayleigh import simo_rayleigh
from wirelessfl.errors import ConfigError
from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob
from wirelessfl.server.aggregation import AirComp, Mean

RAW = {"seed": 2, "rounds": 3,
       "data": {"dataset": "synthetic", "num_clients": 10, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3}}
OTA = {"model": "aircomp", "aggregation": "over_the_air", "snr_db": 10.0, "antennas": 4}


def _trees(rng, n=6, d=400):
    return [{"w": torch.tensor(rng.standard_normal(d), dtype=torch.float64),
             "b": torch.tensor(rng.standard_normal(3), dtype=torch.float64)} for _ in range(n)]


def _exp(algorithm, network=None, engine="batched", **extra):
    return open_run({**RAW, "engine": engine, "algorithm": algorithm,
                            **({"network": network} if network else {}), **extra}).exp


def _rounds(exp, n=3):
    state = exp.initial_state()
    for _ in range(n):
        state, report = exp.algorithm.apply(state)
    return state, report


@pytest.mark.parametrize("weights", [None, [1, 2, 3, 4, 0, 2]])
def test_weighted_transceiver_is_unbiased_with_the_closed_form_mse(weights):
    """(22) simulated literally: E δ̂ = Σ p_i δ_i and Var Re δ̂ = MSE/2 per entry (MC, 2%);
    every precoder obeys |α_i|² ≤ P/k² for the k transmitting clients and a zero weight
    sends nothing."""
    rng = np.random.default_rng(0)
    h = simo_rayleigh((), 6, 4, rng)
    a = simo_rayleigh((), 1, 4, rng)[0]
    cell = AirCompCell(h, a, power=10.0, weights=weights)
    delta = rng.standard_normal((6, 40_000))
    p = np.full(6, 1 / 6) if weights is None else np.array(weights) / np.sum(weights)
    est = cell.receive(delta, rng)
    err = est.real - p @ delta
    assert abs(err.mean()) < 4 * np.sqrt(cell.mse / 2 / err.size)
    assert err.var() == pytest.approx(cell.mse / 2, rel=0.02)
    k = 6 if weights is None else int(np.count_nonzero(weights))  # the transmitting clients
    assert (np.abs(cell.precoders) ** 2 <= 10.0 / k**2 * (1 + 1e-9)).all()
    if weights is not None:
        assert cell.precoders[4] == 0


@pytest.mark.parametrize("options", [{}, {"truncation_db": -3.0}, {"normalise": True},
                                     {"truncation_db": -3.0, "normalise": True}])
def test_over_the_air_estimate_is_unbiased_with_the_logged_mse(options):
    """The aggregator's estimate minus the exact weighted mean over the transmitting clients,
    divided by u·√MSE of each call, is N(0, 1): mean 0 and variance 1 within 2% (Monte Carlo,
    60 channel draws × 2,000 entries: 5 standard errors of the variance)."""
    rng = np.random.default_rng(1)
    trees, w = _trees(rng, d=2000), np.array([1.0, 2.0, 1.0, 3.0, 1.0, 2.0])
    agg = AirComp(5.0, 0.1, antennas=4, **options)
    z, silent = [], 0
    for call in range(60):
        got, info = agg.aggregate(trees, w, np.random.default_rng([7, call]))
        silent += info.silent
        h = simo_rayleigh((), 6, 4, np.random.default_rng([7, call]).spawn(2)[0])
        talk = ((np.abs(h) ** 2).mean(-1) >= 10 ** (options.get("truncation_db", -999) / 10))
        if not talk.any():
            continue
        p = np.where(talk, w, 0) / np.where(talk, w, 0).sum()
        exact = sum(pi * t["w"] for pi, t in zip(p, trees))
        unit = (max(float(torch.cat([t["w"], t["b"]]).pow(2).mean().sqrt())
                    for t, on in zip(trees, talk) if on) if options.get("normalise") else 0.1)
        z.append(((got["w"] - exact) / (unit * info.mse ** 0.5)).numpy())
    z = np.concatenate(z)
    assert abs(z.mean()) < 4 / np.sqrt(z.size)
    assert z.var() == pytest.approx(1.0, rel=0.02)
    if "truncation_db" in options:
        assert silent > 0


def test_noise_off_is_the_exact_mean_and_no_truncation_is_threshold_minus_infinity():
    rng = np.random.default_rng(2)
    trees, w = _trees(rng), np.ones(6)
    quiet, info = AirComp(0.0, 0.1, antennas=3, noise_power=0.0).aggregate(trees, w, rng)
    exact, none = Mean().aggregate(trees, w, rng)
    assert all(torch.equal(quiet[k], exact[k]) for k in exact)
    assert info.mse == 0.0 and none.mse is None and none.silent == 0   # the info carries the MSE
    a, info_a = AirComp(0.0, 0.1, antennas=3).aggregate(trees, w, np.random.default_rng(5))
    b, info_b = AirComp(0.0, 0.1, antennas=3, truncation_db=-200.0).aggregate(
        trees, w, np.random.default_rng(5))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert info_a == info_b and info_a.mse > 0 and info_a.silent == 0


@pytest.mark.parametrize("algorithm", [{"name": "fedavg"}, {"name": "scaffold", "clients_per_round": 6},
                                       {"name": "fadamgc", "clients_per_round": 6}])
def test_noise_off_runs_equal_the_noise_free_run(algorithm):
    """Every uploaded vector (deltas, SCAFFOLD's Δc_i, FAdamGC's y_i changes) goes over the air;
    with σ0² = 0 the run is the exact run (SCAFFOLD's and FAdamGC's second vectors up to the
    order of the float additions)."""
    exact, _ = _rounds(_exp(algorithm))
    exp = _exp(algorithm, OTA)
    exp.algorithm.aggregator.noise_power = 0.0
    quiet, report = _rounds(exp)
    for k in exact.params:
        torch.testing.assert_close(quiet.params[k], exact.params[k], rtol=1e-6, atol=1e-7)
    assert report.aircomp_mse == 0.0 and report.silent_clients == 0


def test_noisy_runs_loop_equals_batched_and_log_the_mse():
    loop, _ = _rounds(_exp({"name": "fedprox", "mu": 0.1}, OTA, engine="loop"))
    batched, report = _rounds(_exp({"name": "fedprox", "mu": 0.1}, OTA, engine="batched"))
    for k in loop.params:
        torch.testing.assert_close(loop.params[k], batched.params[k], rtol=1e-4, atol=1e-5)
    assert report.aircomp_mse > 0
    exact, _ = _rounds(_exp({"name": "fedprox", "mu": 0.1}))
    assert any(not torch.allclose(exact.params[k], batched.params[k]) for k in exact.params)


def test_an_over_the_air_run_resumes_to_the_uninterrupted_rows(tmp_path, interrupt_after):
    raw = {**RAW, "rounds": 4, "checkpoint_every": 1, "network": {**OTA, "truncation_db": -2.0},
           "algorithm": {"name": "scaffold", "clients_per_round": 6}}
    run_job(open_run(raw), tmp_path / "full", quiet=True)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(interrupt_after(open_run(raw).exp, 2)), tmp_path / "cut", quiet=True)
    run_job(open_run(raw), tmp_path / "cut", resume=True, quiet=True)

    def rows(f):
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(f).rows()]

    assert rows(tmp_path / "cut") == rows(tmp_path / "full")
    assert "aircomp_mse" in rows(tmp_path / "full")[-1]


@pytest.mark.parametrize("network, match", [
    ({"model": "tdma", "aggregation": "over_the_air"}, "use it with model: aircomp"),
    ({"model": "aircomp", "truncation_db": -3.0}, "add aggregation: over_the_air"),
    ({**OTA, "antennas": 0}, "antennas"),
    ({**OTA, "snr_db": float("nan")}, "snr_db"),
    ({**OTA, "truncation_db": float("inf")}, "truncation_db"),
    ({**OTA, "beamforming": "magic"}, "beamforming"),
    ({**OTA, "vector_channel": "other"}, "vector_channel"),
    ({**OTA, "real_part": "yes"}, "real_part"),
    ({"model": "aircomp", "real_part": False}, "add aggregation: over_the_air"),
])
def test_hostile_network_settings_are_config_errors(network, match):
    with pytest.raises(ConfigError, match=match):
        resolve({**RAW, "network": network})


def test_algorithms_that_aggregate_their_own_way_refuse_the_network_uplink():
    with pytest.raises(ConfigError, match="aggregates its own way"):
        _exp({"name": "hist", "cells": 2}, OTA)


def test_aircomp_refuses_unusable_settings():
    with pytest.raises(ValueError, match="antennas"):
        AirComp(10.0, 0.1, antennas=0)
    with pytest.raises(ValueError, match="finite"):
        AirComp(float("nan"), 0.1)
    with pytest.raises(ValueError, match="non-negative weight"):
        AirComp(10.0, 0.1).aggregate(_trees(np.random.default_rng(0), n=2), np.array([1.0, np.nan]),
                                     np.random.default_rng(0))
    with pytest.raises(ValueError, match="power"):
        AirCompCell(simo_rayleigh((), 3, 2, np.random.default_rng(0)), np.ones(2), power=-1.0)


def test_retime_refuses_settings_that_change_learning(tmp_path):
    from wirelessfl.run.retime import retime_run

    run_job(open_run({**RAW, "rounds": 1, "algorithm": {"name": "fedavg"}}),
            tmp_path / "r", quiet=True)
    with pytest.raises(ConfigError, match="what the run learned"):
        retime_run(tmp_path / "r", ["network.model=aircomp", "network.aggregation=over_the_air"])
    assert retime_run(tmp_path / "r", ["network.model=aircomp"])[-1]["sim_time_s"] > 0


@pytest.mark.parametrize("name", ["rafed", "ramfed"])
def test_rafed_over_the_air_is_exact_without_noise_and_unbiased_with_it(name):
    """RA-Fed's masked slices add up in the air: with σ0² = 0 the run is the exact one; with
    noise the received sum is Σ_n w_n m_n ⊙ D_n plus noise of variance (Σw)² u² MSE per entry,
    which the coverage then divides (a Monte Carlo over the noise of one aggregation)."""
    algorithm = {"name": name, "clients_per_round": 6, "ratios": [1.0, 0.5, 0.25]}
    exact, _ = _rounds(_exp(algorithm))
    exp = _exp(algorithm, OTA)
    exp.algorithm.env.uplink.noise_power = 0.0
    quiet, report = _rounds(exp)
    for k in exact.params:
        torch.testing.assert_close(quiet.params[k], exact.params[k], rtol=1e-6, atol=1e-7)
    assert report.aircomp_mse == 0.0

    air = AirComp(10.0, 0.05, antennas=4, normalise=False)
    rng = np.random.default_rng(7)
    trees, w = _trees(rng, n=5, d=4000), np.array([1.0, 2.0, 1.0, 3.0, 1.0])
    for t in trees:  # scattered slices: zeros off each client's mask
        t["w"][rng.random(4000) < 0.5] = 0.0
    want = sum(float(a) * t["w"] for a, t in zip(w, trees))
    errs, mses = [], []
    for s in range(40):
        got, info = air.aggregate(trees, w, np.random.default_rng(100 + s), unit=1.0)
        errs.append((w.sum() * got["w"] - want).numpy())
        mses.append(info.mse)
    mse = np.mean(mses)
    errs = np.concatenate(errs)
    assert abs(errs.mean()) < 4 * w.sum() * np.sqrt(mse / errs.size * 2)
    assert errs.var() == pytest.approx(w.sum() ** 2 * mse, rel=0.15)


def test_rafed_logs_its_aircomp_mse_over_the_air():
    exp = _exp({"name": "rafed", "clients_per_round": 6}, OTA)
    _, report = _rounds(exp, 2)
    assert report.aircomp_mse > 0 and "aircomp_mse" in report.logged()


def test_one_mse_metric_name_and_old_run_folders_read_by_it(tmp_path):
    """HIST, FedAvg and RA-Fed log one name, ``aircomp_mse``; rows written before under HIST's
    old ``aircomp_mse_mean`` are read by the new name."""
    from wirelessfl.algorithms.hist.hist import HISTReport

    assert "aircomp_mse" in {f.name for f in dataclasses.fields(HISTReport)}
    (tmp_path / "metrics.jsonl").write_text(
        '{"round": 0, "test_accuracy": 0.1}\n{"round": 1, "aircomp_mse_mean": 0.25}\n')
    rows = RunRecord(tmp_path).rows()
    assert rows[1]["aircomp_mse"] == 0.25 and "aircomp_mse_mean" not in rows[1]


def test_silent_clients_do_not_count_in_the_power_limit_eq25_over_the_k_that_transmit():
    """D1: with clients 3-5 silent the cell is the 3 that transmit, (25) over them exactly:
    MSE = σ0² / (P min_{i<3} |aᴴh_i|²), the cell of those 3 alone, not (6/3)² times it."""
    from solvers.uplink import aircomp_mse

    rng = np.random.default_rng(4)
    h = simo_rayleigh((), 6, 4, rng)
    a = simo_rayleigh((), 1, 4, rng)[0]
    a = a / np.linalg.norm(a)
    silent = AirCompCell(h, a, power=10.0, weights=[1, 1, 1, 0, 0, 0])
    alone = AirCompCell(h[:3], a, power=10.0)
    closed = 1.0 / (10.0 * np.min(np.abs(h[:3] @ a.conj()) ** 2))
    assert silent.mse == pytest.approx(closed, rel=1e-12) == alone.mse
    assert (np.abs(silent.precoders) ** 2 <= 10.0 / 9 * (1 + 1e-9)).all()
    tight = AirCompCell(h, a, power=10.0, weights=[1, 1, 1, 0, 0, 0], tight_power=True)
    assert tight.mse == pytest.approx(closed / 9, rel=1e-12)  # ν = k √P min ...
    sel = np.array([True, True, True, False, False, False])
    assert aircomp_mse(h, snr_db=10.0, selection=sel, beam=a).mse == pytest.approx(closed, rel=1e-12)


@pytest.mark.parametrize("real_part", [False, True])
def test_over_the_air_noise_is_mse_or_the_real_part_of_eq22(real_part):
    """D2: the added noise has variance u² MSE (HIST's (28)) or u² MSE/2 (the real part of
    (22), the network link's default); Monte Carlo over 60 channels × 2,000 entries, 2%."""
    rng = np.random.default_rng(5)
    trees, w = _trees(rng, d=2000), np.ones(6)
    agg = AirComp(5.0, 0.1, antennas=4, real_part=real_part)
    z = []
    for call in range(60):
        got, info = agg.aggregate(trees, w, np.random.default_rng([9, call]))
        exact = sum(t["w"] for t in trees) / 6
        z.append(((got["w"] - exact) / (0.1 * info.mse ** 0.5)).numpy())
    z = np.concatenate(z)
    assert z.var() == pytest.approx(0.5 if real_part else 1.0, rel=0.02)


def test_a_rounds_second_vector_goes_over_the_rounds_channel():
    """D2: with ``round_channel`` the second aggregation of a round (SCAFFOLD's Δc) draws the
    round's channel (same h and beam: the same MSE for the same weights) and its own noise."""
    rng = np.random.default_rng(6)
    trees, w = _trees(rng), np.ones(6)
    first_stream = lambda: np.random.default_rng([3, 0])  # noqa: E731 (the round's stream)
    for same in (True, False):
        agg = AirComp(0.0, 0.1, antennas=4, round_channel=same)
        model, a = agg.aggregate(trees, w, first_stream())
        second, b = agg.aggregate(trees, w, np.random.default_rng([3, 0, 1]),
                                  channel=first_stream())
        assert (a.mse == b.mse) is same
        assert not torch.equal(model["w"], second["w"])  # its own noise either way


def test_the_links_over_the_air_settings_reach_the_aggregator_and_rekey_only_aircomp_runs():
    from wirelessfl.run.config import key_view

    link = resolve({**RAW, "network": OTA}).network
    agg = open_run({**RAW, "algorithm": {"name": "scaffold"}, "network": OTA}).exp.algorithm.aggregator
    assert agg.real_part and agg.round_channel
    old = resolve({**RAW, "network": {**OTA, "real_part": False, "vector_channel": "fresh"}})
    assert key_view(old)["network"] != key_view(resolve({**RAW, "network": OTA}))["network"]
    assert link.settings.real_part is True
    assert "real_part" not in str(key_view(resolve({**RAW, "network": {"model": "tdma"}})))


def test_the_codesign_docs_state_the_model_the_runs_use():
    """D3: the co-design runs' FCNN on Fashion-MNIST is 784-300-10, d = 238,510 (7.63 Mbit in
    fp32), as the guide and the figures' comments say."""
    from pathlib import Path

    from wirelessfl.models import build_model

    model = build_model("fcnn", (1, 28, 28), 10, seed=0)
    d = sum(p.numel() for p in model.parameters())
    assert d == 238_510 and f"{d * 32 / 1e6:.2f}" == "7.63"
    root = Path(__file__).resolve().parent.parent
    for path in ("docs/guide/codesign.md", "experiments/codesign/figures.yaml"):
        text = (root / path).read_text()
        assert "784-300-10" in text and "238,510" in text and "7.63 Mbit" in text, path
        assert "200-200" not in text and "6.4 Mbit" not in text, path


def test_a_subset_s_second_vector_goes_over_its_members_own_channels():
    """D4: a second vector sent by a subset of the round's clients (RoundChannel rows) sees
    exactly those clients' rows of the round's channel, not a smaller fresh draw."""
    from wirelessfl.server.aggregation import RoundChannel

    agg = AirComp(0.0, 0.1, antennas=4, round_channel=True)
    stream = lambda: np.random.default_rng([9, 2])  # noqa: E731 (the round's stream)
    full, _ = agg.round_channel_of(stream(), 6)
    rows = np.array([4, 1, 5])
    sub, _ = agg.round_channel_of(RoundChannel(stream(), 6, rows), 3)
    np.testing.assert_array_equal(sub, full[rows])
    with pytest.raises(ValueError, match="rows of the round's clients"):
        agg.round_channel_of(RoundChannel(stream(), 6, rows), 2)
    # runs made before (subset_rows: false, recorded in the key schema) keep their own draw
    old_way = AirComp(0.0, 0.1, antennas=4, round_channel=True, subset_rows=False)
    before, _ = old_way.round_channel_of(RoundChannel(stream(), 6, rows), 3)
    np.testing.assert_array_equal(before, agg.round_channel_of(stream(), 3)[0])
    assert not np.array_equal(before, sub)
    from wirelessfl.run.config import key_view
    keyed = key_view(resolve({**RAW, "network": OTA}))["network"]
    assert keyed["subset_rows"] is True  # new runs are keyed apart from those made before


def test_fadamgc_s_tracked_clients_send_their_dy_over_their_own_round_channels(monkeypatch):
    """In training (S̃ = half the round's clients, ``vector_channel: round``): the Δy_i
    aggregation's channel is the round's channel of all its clients, restricted to S̃'s rows."""
    import copy

    from wirelessfl.server import aggregation

    checked, real = [], aggregation.AirComp.round_channel_of

    def spy(self, channel, n):
        if isinstance(channel, aggregation.RoundChannel):
            full, _ = real(self, copy.deepcopy(channel.stream), channel.clients)
            h, stream = real(self, channel, n)
            np.testing.assert_array_equal(h, full[channel.rows])
            checked.append((channel.clients, len(channel.rows)))
            return h, stream
        return real(self, channel, n)

    monkeypatch.setattr(aggregation.AirComp, "round_channel_of", spy)
    exp = open_run({**RAW, "algorithm": {"name": "fadamgc", "clients_per_round": 6},
                    "network": OTA}).exp
    state = exp.initial_state()
    for _ in range(2):
        state, _ = exp.algorithm.apply(state)
    assert checked and all(c == (6, 3) for c in checked)  # S̃ = S/2 of the round's 6


def test_vector_channel_with_a_one_vector_algorithm_is_refused():
    """Issue 71: an inert setting is refused (FedAvg sends one vector); SCAFFOLD takes it."""
    net = {**OTA, "vector_channel": "fresh"}
    with pytest.raises(ValueError, match="one vector a round"):
        open_run({**RAW, "network": net, "algorithm": {"name": "fedavg", "clients_per_round": 6}})
    open_run({**RAW, "network": net, "algorithm": {"name": "scaffold", "clients_per_round": 6}})
