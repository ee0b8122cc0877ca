"""Digital links that shape learning (issue 33, items 2, 3, 5): deadline outage, channel-aware
scheduling, deadline-fitted compression, and their solver API."""


import numpy as np
import pytest
import torch

from channels.aircomp import AirCompCell
from channels.rayleigh import simo_rayleigh
from solvers.scheduling import schedule
from solvers.uplink import aircomp_mse, deadline_outage, fit_bit_widths
from wirelessfl.cli import main
from wirelessfl.errors import ConfigError
from wirelessfl.net.links import NetworkConfig, RoundCost, make_link
from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob

RAW = {"seed": 4, "rounds": 4,
       "data": {"dataset": "synthetic", "num_clients": 10, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3}}
TDMA = {"model": "tdma", "snr_db": 0.0, "params_per_vector": 10**6, "step_seconds": 0.01}


def _yaml(folder, raw):
    import yaml

    path = folder / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _raw(network, algorithm=None, **extra):
    return {**RAW, "algorithm": algorithm or {"name": "fedavg", "clients_per_round": 5},
            "network": network, **extra}


def _rows(folder):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(folder).rows()]


# ---------------------------------------------------------------- the solver API
def test_tdma_serves_the_shortest_uploads_first_and_fdma_splits_the_band():
    rate = np.array([8e6, 2e6, 4e6])
    out = deadline_outage(rate, 4e6, 2.0, access="tdma", compute_s=0.25)
    # uploads 0.5, 2, 1 s in the order 0, 2, 1 after 0.25 s: ends 0.75, 3.75, 1.75
    assert out.finish_s.tolist() == [0.75, 3.75, 1.75]
    assert out.arrived.tolist() == [True, False, True] and float(out.seconds) == 2.0
    fd = deadline_outage(rate, 4e6, None, access="fdma")
    np.testing.assert_allclose(fd.finish_s, 3 * 4e6 / rate)  # each on B/3
    assert fd.arrived.all() and float(fd.seconds) == pytest.approx(6.0)


def test_no_deadline_is_the_link_models_clock_and_an_infinite_deadline_drops_nobody():
    rng = np.random.default_rng(1)
    rates = rng.uniform(1e6, 9e6, (50, 7))
    for access in ("tdma", "round_robin", "fdma"):
        free = deadline_outage(rates, 3e6, None, access=access, compute_s=0.1)
        late = deadline_outage(rates, 3e6, 1e12, access=access, compute_s=0.1)
        assert late.arrived.all() and np.array_equal(free.seconds, late.seconds)
    np.testing.assert_allclose(free.seconds, 0.1 + (7 * 3e6 / rates).max(-1), rtol=1e-15)


def test_round_robin_finishes_as_its_slots_served_one_by_one_say():
    """Equal shares of the slots among the clients still uploading, against the slots served
    one by one (0.1 ms each, a client's turn carrying 0.1 ms of its upload): every finish
    within a few slots, the last at Σ uploads as under tdma, and the deadline's arrivals a
    subset of tdma's (shortest first lets the most finish)."""
    rng = np.random.default_rng(3)
    rate, bits = rng.uniform(1e6, 9e6, 6), rng.uniform(1e5, 6e5, 6)
    out = deadline_outage(rate, bits, None, access="round_robin", compute_s=0.02)
    slot, left, now, finish = 1e-4, bits / rate, 0.02, np.zeros(6)
    while (left > 0).any():  # the test's own loop over slots
        for i in np.flatnonzero(left > 0):
            left[i] -= slot
            now += slot
            if left[i] <= 0:
                finish[i] = now + left[i]  # its last slot, only the part it used
                now += left[i]
    np.testing.assert_allclose(out.finish_s, finish, atol=6 * slot)
    tdma = deadline_outage(rate, bits, None, access="tdma", compute_s=0.02)
    assert float(out.seconds) == pytest.approx(float(tdma.seconds), rel=1e-12)
    assert np.all(out.finish_s >= tdma.finish_s - 1e-12)
    for t in np.quantile(tdma.finish_s, [0.2, 0.5, 0.8]):
        rr = deadline_outage(rate, bits, t, access="round_robin", compute_s=0.02).arrived
        td = deadline_outage(rate, bits, t, access="tdma", compute_s=0.02).arrived
        assert not (rr & ~td).any() and rr.sum() <= td.sum()


def test_deadline_outage_is_batched():
    rng = np.random.default_rng(2)
    rates, bits = rng.uniform(1e6, 9e6, (4, 3, 6)), rng.uniform(1e6, 5e6, (4, 3, 6))
    got = deadline_outage(rates, bits, 1.5, access="tdma")
    for i in np.ndindex(4, 3):
        one = deadline_outage(rates[i], bits[i], 1.5, access="tdma")
        assert np.array_equal(one.arrived, got.arrived[i]) and one.seconds == got.seconds[i]


@pytest.mark.parametrize("access", ["tdma", "fdma"])
def test_bit_widths_meet_the_deadline_exactly_at_the_boundary(access):
    d, b, s = 1000, 7, 4
    need = b * d + 64  # seven bits an entry and the grid's two fp32 ends
    rate = np.full(s, need * s / 2.0)  # budget R (T - c)/S = need exactly, T = 2.5, c = 0.5
    fit = fit_bit_widths(rate, d, 2.5, access=access, compute_s=0.5)
    assert fit.bits.tolist() == [b] * s and fit.payload_bits.tolist() == [need] * s
    out = deadline_outage(rate, fit.payload_bits, 2.5, access=access, compute_s=0.5)
    assert out.arrived.all() and float(out.finish_s.max()) == pytest.approx(2.5, rel=1e-12)
    less = fit_bit_widths(rate * (1 - 1 / need), d, 2.5, access=access, compute_s=0.5)
    assert less.bits.tolist() == [b - 1] * s
    whole = fit_bit_widths(rate * 32 * d / need, d, 2.5, access=access, compute_s=0.5)
    assert whole.bits.tolist() == [32] * s  # fp32 fits: no compression
    none = fit_bit_widths(rate * 63 / need, d, 2.5, access=access, compute_s=0.5)
    assert not none.fits.any()  # not even the grid's ends fit


def test_topk_widths_count_values_and_indices():
    d = 1024  # an index is 10 bits, a kept entry 42
    fit = fit_bit_widths(np.array([42 * 100.0, 42 * 100.5]), d, 1.0, operator="topk",
                         access="fdma")  # S = 2: budgets 2100 and 2110.5 bits -> 50 entries
    assert fit.keep.tolist() == [50 / d, 50 / d]
    assert fit.payload_bits.tolist() == [50 * 42.0, 50 * 42.0]


def test_aircomp_mse_of_a_selection_is_the_transceivers():
    rng = np.random.default_rng(3)
    h = simo_rayleigh((5,), 6, 4, rng)
    sel = rng.random((5, 6)) < 0.6
    sel[:, 0] = True
    got = aircomp_mse(h, snr_db=10.0, selection=sel)
    for i in range(5):  # the beam is solved for the selected clients; the rest are silent
        cell = AirCompCell(h[i], got.beam[i], power=10.0, weights=sel[i].astype(float))
        assert got.mse[i] == pytest.approx(float(cell.mse))
        gains = np.abs(h[i] @ got.beam[i].conj()) ** 2  # (25) over the k that transmit
        assert got.mse[i] == pytest.approx(1 / (10.0 * gains[sel[i]].min()))
    with pytest.raises(ValueError, match="selection"):   # nobody to aggregate: refused
        aircomp_mse(h[0], snr_db=10.0, selection=np.zeros(6, bool))
    some = sel.copy()
    some[0] = False   # one instance of a batch empty: reported as inf, the others solved
    part = aircomp_mse(h, snr_db=10.0, selection=some)
    assert part.mse[0] == np.inf and np.isfinite(part.mse[1:]).all()


@pytest.mark.parametrize("call, match", [
    (lambda: deadline_outage([1e6], 1e6, 0.0), "deadline_s"),
    (lambda: deadline_outage([1e6], 1e6, float("nan")), "deadline_s"),
    (lambda: deadline_outage([-1e6], 1e6, 1.0), "rate_bps"),
    (lambda: deadline_outage([1e6], 1e6, 1.0, access="cdma"), "access"),
    (lambda: fit_bit_widths([1e6], 0, 1.0), "num_params"),
    (lambda: fit_bit_widths([1e6], 10, None), "deadline_s"),
    (lambda: fit_bit_widths([1e6], 10, 1.0, operator="zip"), "operator"),
    (lambda: aircomp_mse(np.ones((3, 0)), snr_db=10.0), "h"),
    (lambda: aircomp_mse(np.ones((3, 2)), snr_db=float("inf")), "snr_db"),
])
def test_hostile_solver_inputs_are_one_line_errors(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- training over the link
def test_a_deadline_everyone_meets_is_no_deadline_exactly(tmp_path):
    run_job(open_run(_raw(TDMA)), tmp_path / "free", quiet=True)
    run_job(open_run(_raw({**TDMA, "deadline_s": 1e9})), tmp_path / "late", quiet=True)
    free, late = _rows(tmp_path / "free"), _rows(tmp_path / "late")
    assert [r["test_accuracy"] for r in free] == [r["test_accuracy"] for r in late]
    assert [r.get("sim_time_s") for r in free] == [r.get("sim_time_s") for r in late]
    assert late[-1]["dropped"] == [] and late[-1]["dropped_clients"] == 0


def test_dropped_clients_leave_the_aggregate_and_the_round_lasts_the_deadline():
    exp = open_run(_raw({**TDMA, "deadline_s": 1.2})).exp
    link, state = exp.algorithm.env.link, exp.initial_state()
    plan = exp.algorithm.configure(state)
    results = exp.algorithm.train(state, plan)
    new, report = exp.algorithm.apply(state)
    d = report.delivery
    assert d.dropped and d.arrived and report.latency_s == 1.2  # some miss it at 0 dB
    rates = link.rates(0)[plan.clients]
    up = 10**6 * 32 / rates  # the rest arrive, shortest first, after 3 steps of 0.01 s
    ends = 0.03 + np.cumsum(np.sort(up))
    assert sorted(d.arrived) == sorted(plan.clients[np.argsort(up)[ends <= 1.2]].tolist())
    only, _ = exp.algorithm.server_update(state, plan, [r for r in results if r.client in d.arrived])
    for k in new.params:
        assert torch.equal(new.params[k], only.params[k])


def test_nobody_in_time_keeps_the_model_and_the_round_is_counted():
    """Computing fits the deadline (0.03 of 0.05 s), no 32 Mbit upload does at 0 dB: the
    model stays, the round counts as aggregating nothing, and the summary says so."""
    exp = open_run(_raw({**TDMA, "deadline_s": 0.05})).exp
    state = exp.initial_state()
    new, report = exp.algorithm.apply(state)
    assert new.round == 1 and not report.delivery.arrived and report.latency_s == 0.05
    assert report.cumulative["empty_rounds"] == 1.0
    assert all(torch.equal(new.params[k], state.params[k]) for k in state.params)


@pytest.mark.parametrize("network, match", [
    ({**TDMA, "deadline_s": 0.01}, "computing alone"),       # 3 steps x 0.01 s
    ({**TDMA, "deadline_s": 0.03 + 1e-6}, "one symbol"),
    ({"model": "aircomp", "aggregation": "over_the_air", "truncation_db": 200}, "silences"),
])
def test_a_link_no_upload_can_cross_is_refused_before_training(network, match):
    with pytest.raises(ConfigError, match=match):
        open_run(_raw(network))


def test_rounds_that_aggregate_nothing_are_said_in_the_summary(tmp_path, capsys):
    raw = {**_raw({**TDMA, "deadline_s": 0.05}), "rounds": 2}
    summary = run_job(open_run(raw), tmp_path / "r", quiet=True)
    assert summary["empty_rounds"] == 2
    assert _rows(tmp_path / "r")[-1]["empty_rounds"] == 2.0
    assert main(["run", str(_yaml(tmp_path, raw)), "--out", str(tmp_path / "c")]) == 0
    assert "2 of 2 rounds aggregated nothing" in capsys.readouterr().out


def test_late_uploads_join_the_next_round_and_their_clients_rest():
    exp = open_run(_raw({**TDMA, "deadline_s": 1.2, "late": "next_round"})).exp
    algo, link = exp.algorithm, exp.algorithm.env.link
    state = exp.initial_state()
    plan = algo.configure(state)
    results = {r.client: r for r in algo.train(state, plan)}
    s1, report = algo.apply(state)
    d = report.delivery
    up = 10**6 * 32 / link.rates(0)[plan.clients]
    ends = 0.03 + np.cumsum(np.sort(up))  # shortest first
    order = plan.clients[np.argsort(up)]
    assert list(d.late) == sorted(order[(ends > 1.2) & (ends <= 2.4)].tolist()) and d.late
    assert [r.client for r in s1.late] == list(d.late)
    assert set(d.dropped) == set(order[ends > 2.4].tolist())
    # round 1: the late clients are not sampled, and their round-0 updates are aggregated
    plan1 = algo.configure(s1)
    assert not set(plan1.clients) & set(d.late)
    fresh = algo.train(s1, plan1)
    s2, report1 = algo.apply(s1)
    arrived = [r for r in fresh if r.client in report1.delivery.arrived]
    want, _ = algo.server_update(s1, plan1, [results[c] for c in d.late] + arrived)
    for k in want.params:
        assert torch.equal(s2.params[k], want.params[k])


def test_late_arrivals_refuse_what_they_cannot_serve():
    with pytest.raises(ConfigError, match="set deadline_s"):
        resolve(_raw({**TDMA, "late": "next_round"}))
    with pytest.raises(ConfigError, match="scheduler uniform"):
        resolve(_raw({**TDMA, "deadline_s": 1.0, "late": "next_round", "scheduler": "age"}))
    with pytest.raises(ConfigError, match="late: drop"):
        open_run(_raw({**TDMA, "deadline_s": 1.0, "late": "next_round"},
                             {"name": "fadamgc", "clients_per_round": 5}))


@pytest.mark.parametrize("policy", ["best_channel", "proportional_fair", "age"])
def test_schedulers_read_the_rounds_channels(policy):
    exp = open_run(_raw({**TDMA, "scheduler": policy})).exp
    algo, link = exp.algorithm, exp.algorithm.env.link
    state, avg, age = exp.initial_state(), np.full(10, link.rates(0).mean()), np.zeros(10)
    for t in range(4):
        rates = link.rates(t)
        want = schedule(rates, 5, policy, average_bps=avg, age=age).mask
        got = algo.sample(t)
        assert np.flatnonzero(want).tolist() == got.tolist()
        if policy == "best_channel":
            assert set(got) == set(np.argsort(-rates)[:5])
        avg = (0.9 * avg + 0.1 * rates * want)
        age = np.where(want, 0, age + 1)
        state, report = algo.apply(state)
        assert sorted(report.delivery.arrived) == got.tolist()


def test_compression_fits_each_client_to_the_deadline_and_stays_unbiased():
    exp = open_run(_raw({**TDMA, "model": "fdma", "deadline_s": 0.5,
                                "compression": "quantize"})).exp
    state = exp.initial_state()
    _, report = exp.algorithm.apply(state)
    bits = report.delivery.bits_per_param
    assert bits and all(1 <= b <= 16 for b in bits) and report.latency_s <= 0.5
    widths = fit_bit_widths(exp.algorithm.env.link.rates(0)[list(report.delivery.arrived)],
                            10**6, 0.5, access="fdma", compute_s=0.03, num_tensors=4)
    assert list(bits) == widths.bits.tolist()


def test_scaffold_counts_its_control_variates_in_the_upload():
    fed = open_run(_raw({**TDMA, "deadline_s": 1e9})).exp
    sca = open_run(_raw({**TDMA, "deadline_s": 1e9},
                               {"name": "scaffold", "clients_per_round": 5})).exp
    t_fed = fed.algorithm.apply(fed.initial_state())[1].latency_s
    t_sca = sca.algorithm.apply(sca.initial_state())[1].latency_s
    assert t_sca - 0.03 == pytest.approx(2 * (t_fed - 0.03))


@pytest.mark.parametrize("network", [
    {**TDMA, "deadline_s": 0.6, "scheduler": "proportional_fair"},
    {**TDMA, "model": "fdma", "deadline_s": 0.4, "compression": "topk", "scheduler": "age"},
    {**TDMA, "deadline_s": 1.2, "late": "next_round"},
])
def test_a_run_under_outage_and_scheduling_resumes_to_the_uninterrupted_rows(
        tmp_path, interrupt_after, network):
    raw = {**_raw(network), "checkpoint_every": 1}
    run_job(open_run(raw), tmp_path / "full", quiet=True)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(interrupt_after(open_run(raw).exp, 2)), tmp_path / "cut", quiet=True)
    run_job(open_run(raw), tmp_path / "cut", resume=True, quiet=True)
    assert _rows(tmp_path / "cut") == _rows(tmp_path / "full")
    assert "arrived" in _rows(tmp_path / "full")[-1]
    if network.get("late"):
        assert any(r.get("late") for r in _rows(tmp_path / "full"))


def test_channels_belong_to_clients_not_to_who_is_sampled():
    link = make_link(NetworkConfig.of("tdma"), num_clients=10)
    cost = RoundCost(1e6, 1e6, 0.0, 3, 10, (2, 5, 7))
    rng = lambda: np.random.default_rng(9)  # noqa: E731
    rates = link.rates(10, rng())[[2, 5, 7]]
    assert link.seconds(cost, rng()) == pytest.approx(float((32e6 / rates).sum()))
    assert RoundCost.from_list(cost.as_list()) == cost
    old = RoundCost.from_list([1e6, 1e6, 0.0, 3])  # rows written before: an S-client draw
    assert link.seconds(old, rng()) == pytest.approx(float((32e6 / link.rates(3, rng())).sum()))
    with pytest.raises(ValueError, match="ids"):
        RoundCost.from_list([1e6, 1e6, 0.0, 3, 10, [2, 5, 70]])


@pytest.mark.parametrize("network, match", [
    ({"model": "tdma", "deadline_s": 0.0}, "deadline_s"),
    ({"model": "tdma", "deadline_s": -1.0}, "deadline_s"),
    ({"model": "tdma", "deadline_s": float("nan")}, "deadline_s"),
    ({"model": "aircomp", "deadline_s": 1.0}, "setting of link model tdma / fdma / nr, not of aircomp"),
    ({"model": "tdma", "scheduler": "loudest"}, "scheduler"),
    ({"model": "tdma", "compression": "quantize"}, "set deadline_s"),
    ({"model": "fdma", "deadline_s": 1.0, "compression": "gzip"}, "compression"),
    ({"model": "fdma", "deadline_s": 1.0, "compression": "quantize", "max_bits": 40}, "max_bits"),
])
def test_hostile_link_settings_are_config_errors(network, match):
    with pytest.raises(ConfigError, match=match):
        resolve(_raw(network))


def test_link_settings_need_an_algorithm_that_can_use_them():
    with pytest.raises(ConfigError, match="clients_per_round"):
        open_run(_raw({**TDMA, "scheduler": "age"}, {"name": "fedavg"}))
    with pytest.raises(ConfigError, match="its own uplink"):
        open_run(_raw({**TDMA, "deadline_s": 1.0}, {"name": "hist", "cells": 2}))


def test_cli_one_line_errors_and_retime_refuses_runs_the_link_shaped(tmp_path, capsys):
    assert main(["run", "experiments/quickstart.yaml", "--out", str(tmp_path / "x"),
                 "--set", "network.model=tdma", "--set", "network.deadline_s=-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "deadline_s" in err and len(err.splitlines()) == 1
    run_job(open_run({**_raw({**TDMA, "deadline_s": 1.0}), "rounds": 1}), tmp_path / "r",
        quiet=True)
    assert main(["retime", str(tmp_path / "r"), "--set", "network.model=fdma"]) == 2
    assert "link decided who" in capsys.readouterr().err


def test_the_uplink_counts_the_bits_sent_at_their_widths_and_those_delivered():
    """Issue 57: with quantisation and drops, uplink_params counts every transmitted upload
    at its fitted width (dropped ones used the channel too) and the delivered metric only
    the arrivals: fp32-parameter units, per client of the round."""
    exp = open_run(_raw({**TDMA, "model": "fdma", "deadline_s": 0.5,
                                "compression": "quantize"})).exp
    state = exp.initial_state()
    d = sum(v.numel() for v in state.params.values())
    _, report = exp.algorithm.apply(state)
    dv = report.delivery
    n = len(dv.arrived) + len(dv.dropped) + len(dv.late)
    assert report.uplink_params == dv.sent_params < d            # compressed: below fp32
    arrived_bits = sum(dv.bits_per_param) * d / 32 / n           # the arrivals' payloads
    delivered = report.cumulative["uplink_delivered_params_per_client"]
    assert delivered == pytest.approx(arrived_bits, rel=1e-3) and delivered <= dv.sent_params
    plain = open_run(_raw({**TDMA, "deadline_s": 1e9})).exp   # fp32, everyone arrives
    _, r = plain.algorithm.apply(plain.initial_state())
    assert r.uplink_params == pytest.approx(d) and r.cumulative[
        "uplink_delivered_params_per_client"] == pytest.approx(d)


def test_a_link_whose_rates_round_to_zero_is_refused_not_clocked_as_null():
    """fdma at -200 dB: log2(1 + SNR |h|^2) underflows to 0 for any plausible channel, so
    sim_time_s would be null; refused in one line (a low but usable SNR still runs)."""
    with pytest.raises(ConfigError, match="rounds to 0 bit/s"):
        open_run(_raw({**TDMA, "model": "fdma", "snr_db": -200.0}))
    open_run(_raw({**TDMA, "model": "fdma", "snr_db": -60.0}))


def test_a_user_aggregate_sees_the_delivery_of_its_round(tmp_path):
    """``server_update`` receives the round's Delivery (arrived, dropped, late), as Flower's
    failures: a user override sees exactly the clients the deadline dropped, and its results
    are the arrived ones."""
    from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
    from wirelessfl.registry import register, unregister

    seen = []

    class Watching(FedAvg):
        def server_update(self, state, plan, results, delivery=None):
            seen.append((delivery, sorted(r.client for r in results)))
            return super().server_update(state, plan, results, delivery)

    register("watching", FedAvgHParams, Watching)
    try:
        raw = {"seed": 3, "rounds": 4, "name": "w",
               "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 30},
               "model": {"name": "linear"}, "local": {"lr": 0.05, "batch_size": 10, "steps": 2},
               "algorithm": {"name": "watching"},
               "network": {"model": "tdma", "snr_db": 0.0, "deadline_s": 2e-3}}
        run_job(open_run(raw), tmp_path / "w", quiet=True)
    finally:
        unregister("watching")
    assert seen and all(d is not None for d, _ in seen)
    assert all(list(d.arrived) == got for d, got in seen)
    assert any(d.dropped for d, _ in seen)  # the deadline dropped someone, and it was said


def test_the_summary_counts_dropped_and_late_uploads(tmp_path):
    """The summary line said nothing of 30 dropped uploads of 50: it now counts them."""
    raw = {"seed": 3, "rounds": 4, "name": "d",
           "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 30},
           "model": {"name": "linear"}, "local": {"lr": 0.05, "batch_size": 10, "steps": 2},
           "algorithm": {"name": "fedavg", "clients_per_round": 5},
           "network": {"model": "tdma", "snr_db": -10.0, "deadline_s": 2e-3,
                       "late": "next_round"}}
    job = open_run(raw)
    summary = run_job(job, tmp_path / "d", quiet=True)
    rows = RunRecord(tmp_path / "d").rows()
    dropped = sum(len(r.get("dropped", [])) for r in rows)  # a row each round: its delivery
    assert summary["dropped_uploads"] == dropped
    assert summary["uploads"] == 20 and summary["dropped_uploads"] >= 1
    assert summary["late_uploads"] == rows[-1]["late_clients"]
    assert "of 20 uploads dropped by the link" in job.describe(summary, tmp_path / "d")
    assert dropped <= summary["dropped_uploads"] + summary["late_uploads"] + 20
