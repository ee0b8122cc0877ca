"""Any algorithm timed under any link model; HIST keeps its own exact accounting."""

import numpy as np
import pytest

from wirelessfl.algorithms.base import RoundReport
from wirelessfl.net.links import NetworkConfig, make_link
from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob

RAW = {"seed": 1, "rounds": 2,
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 30},
       "model": {"name": "linear"}, "local": {"lr": 0.05, "batch_size": 10, "steps": 4}}


def _time(tmp_path, name, algorithm, network):
    raw = {**RAW, "name": name, "algorithm": algorithm, "network": network}
    run_job(open_run(raw), tmp_path / name, quiet=True)
    return [r.get("sim_time_s") for r in RunRecord(tmp_path / name).rows()]


def test_fixed_links_time_payloads_and_steps(tmp_path):
    d = 60 * 10 + 10  # linear model on Synthetic(1,1): 60 features, 10 classes
    net = {"model": "fixed", "rate_mbps": 100, "step_seconds": 0.01}
    fedavg = _time(tmp_path, "a", {"name": "fedavg"}, net)
    scaffold = _time(tmp_path, "s", {"name": "scaffold"}, net)
    per_round = 2 * 32 * d / 1e8 + 4 * 0.01  # down x, up Δx; 4 steps
    assert fedavg[1] == pytest.approx(per_round) and fedavg[2] == pytest.approx(2 * per_round)
    assert scaffold[1] == pytest.approx(4 * 32 * d / 1e8 + 4 * 0.01)  # down x, c; up Δx, Δc
    assert _time(tmp_path, "n", {"name": "fedavg"}, {"model": "none"})[1] is None


def test_tdma_grows_with_clients_and_aircomp_does_not():
    def report(n):
        return RoundReport(uplink_params=1e5, train_loss=0.0,
                           clients={i: {"steps": 5} for i in range(n)})

    tdma, air = make_link(NetworkConfig.of("tdma")), make_link(NetworkConfig.of("aircomp"))
    t = [np.mean([tdma.round_seconds(report(n), np.random.default_rng(s)) for s in range(50)])
         for n in (2, 8)]
    assert t[1] > 3 * t[0]
    a = [air.round_seconds(report(n), np.random.default_rng(0)) for n in (2, 8)]
    assert a[0] == a[1] == pytest.approx(1e5 * (1 / 14e3) * 15e3 / 9e6)


def test_hist_keeps_its_own_latency_under_any_network(tmp_path):
    algorithm = {"name": "hist", "cells": 2, "edge_rounds": 1}
    raw = {**RAW, "model": {"name": "fcnn", "options": {"hidden": 8}}}
    times = []
    for net in ({"model": "none"}, {"model": "fixed", "step_seconds": 5.0}):
        out = tmp_path / net["model"]
        run_job(open_run({**raw, "name": "h", "algorithm": algorithm,
                                           "network": net}), out, quiet=True)
        times.append([r.get("sim_time_s") for r in RunRecord(out).rows()])
    assert times[0] == times[1]


def test_resnet18_vectors_at_100_mbps_give_the_per_round_costs_implied_by_table2():
    # docs/papers/fadamgc.md §4.6 / §5.4: 7.2 (2 vectors), 10.8 (3), 12.6 (3.5), 17.4 (5; we keep 17.9)
    import torch

    from wirelessfl.models import build_model

    with torch.device("meta"):
        d = sum(p.numel() for p in build_model("resnet18_bn", (3, 32, 32), 10, seed=0).parameters())
    assert d == 11_173_962
    link = make_link(NetworkConfig.of("fixed", rate_mbps=100))
    implied = {(1, 1): 7.2, (1, 2): 10.8, (1.5, 2): 12.6, (2, 3): 17.4}
    for (up, down), paper in implied.items():
        report = RoundReport(uplink_params=up * d, downlink_params=down * d, train_loss=0.0, clients={})
        seconds = link.round_seconds(report, np.random.default_rng(0))
        assert seconds == pytest.approx((up + down) * 32 * d / 1e8)
        assert abs(seconds / paper - 1) < (0.03 if paper == 17.4 else 0.01)
    # a stand-in model timed as if its vectors were ResNet-18's
    small = make_link(NetworkConfig.of("fixed", rate_mbps=100, params_per_vector=d), 610)
    report = RoundReport(uplink_params=1.5 * 610, downlink_params=2 * 610, train_loss=0.0,
                         clients={})
    assert small.round_seconds(report, np.random.default_rng(0)) == pytest.approx(3.5 * 32 * d / 1e8)


@pytest.mark.parametrize("link", [
    {"model": "tdma", "snr_db": 10.0, "step_seconds": 0.01},
    {"model": "aircomp", "step_seconds": 0.02},
    {"model": "fixed", "rate_mbps": 20.0},
    {"model": "shadowed", "rate_mbps": 20.0, "shadowing_db": 6.0},
])
def test_a_run_retimed_under_a_link_is_the_run_trained_under_it(tmp_path, link):
    """Training never reads the link's streams: re-timing a finished run under another link
    gives exactly the times of a run trained under that link (rows every 2 rounds)."""
    base = {**RAW, "rounds": 5, "eval_every": 2, "algorithm": {"name": "scaffold"}}
    net = {"model": "fixed", "params_per_vector": 12345}
    run_job(open_run({**base, "name": "f", "network": net}), tmp_path / "f",
               quiet=True)
    run_job(open_run({**base, "name": "l", "network": {**net, **link}}),
               tmp_path / "l", quiet=True)
    trained = RunRecord(tmp_path / "l").rows()
    assert [r["round"] for r in trained] == [0, 2, 4, 5]
    from wirelessfl.run.retime import retime_run

    retimed = retime_run(tmp_path / "f", [f"network.{k}={v}" for k, v in link.items()])
    assert retimed[0]["sim_time_s"] == 0.0   # the initial model
    assert [r["sim_time_s"] for r in retimed[1:]] == [r["sim_time_s"] for r in trained[1:]]
    assert [r["test_accuracy"] for r in retimed] == [r["test_accuracy"] for r in trained]


def test_retime_cli_refuses_training_keys_and_existing_files(tmp_path, capsys):
    from wirelessfl.cli import main

    run = tmp_path / "r"
    run_job(open_run({**RAW, "name": "r", "algorithm": {"name": "fedavg"}}),
               run, quiet=True)
    assert main(["retime", str(run), "--set", "network.model=aircomp",
                 "--out", str(tmp_path / "t.csv")]) == 0
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0] == "round,test_accuracy,sim_time_s" and len(lines) == 4
    capsys.readouterr()
    for argv in (["--set", "local.lr=1"], ["--set", "network.params_per_vector=5"], [],
                 ["--set", "network.model=tdma", "--out", str(tmp_path / "t.csv")],
                 ["--set", "network.model=carrier_pigeon"]):
        assert main(["retime", str(run), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("wirelessfl: error:") and len(err.strip().splitlines()) == 1
    assert main(["retime", str(tmp_path), "--set", "network.model=tdma"]) == 2


def test_round_costs_between_rows_survive_a_resume(tmp_path, interrupt_after):
    """A checkpoint between two evaluations carries the costs of the rounds since the last
    row, so a resumed run logs the same round_costs as an uninterrupted one."""
    raw = {**RAW, "name": "c", "rounds": 5, "eval_every": 3, "checkpoint_every": 1,
           "algorithm": {"name": "fedavg"}, "network": {"model": "fixed"}}
    run_job(open_run(raw), tmp_path / "full", quiet=True)
    exp = interrupt_after(open_run(raw).exp, 4)   # checkpoint at round 4, row at 3
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    run_job(open_run(raw), tmp_path / "cut", resume=True, quiet=True)
    full, cut = (RunRecord(tmp_path / f).rows() for f in ("full", "cut"))
    assert [len(r.get("round_costs", [])) for r in full] == [0, 3, 2]
    assert [r["round_costs"] for r in cut[1:]] == [r["round_costs"] for r in full[1:]]
    assert [r["sim_time_s"] for r in cut[1:]] == [r["sim_time_s"] for r in full[1:]]


def test_shadowed_links_are_fixed_links_with_log_normal_rates():
    """σ = 0 is ``fixed`` exactly; σ > 0 draws per-client rates whose dB values are normal
    around the median (a Monte Carlo check of mean and spread), and the round waits for the
    slowest client, so it is never faster than the median link."""
    from wirelessfl.net.links import RoundCost

    cost = RoundCost(uplink=1e6, downlink=1e6, max_steps=3, clients=4, population=50,
                     ids=(0, 7, 8, 40))
    fixed = make_link(NetworkConfig.of("fixed", rate_mbps=20.0, step_seconds=0.1))
    flat = make_link(NetworkConfig.of("shadowed", rate_mbps=20.0, shadowing_db=0.0,
                                      step_seconds=0.1))
    rng = np.random.default_rng
    assert flat.seconds(cost, rng(0)) == pytest.approx(fixed.seconds(cost, rng(0)))
    link = make_link(NetworkConfig.of("shadowed", rate_mbps=20.0, shadowing_db=8.0))
    db = 10 * np.log10(link.rates(200_000, rng(1)) / 20e6)
    assert abs(db.mean()) < 0.05 and db.std() == pytest.approx(8.0, rel=0.01)
    times = [link.seconds(cost, rng(s)) for s in range(200)]
    assert min(times) > 0 and np.median(times) > 2e6 * 32 / 20e6


def test_a_user_registered_link_model_runs_from_a_config_and_is_retimed(tmp_path):
    """One class and one register_link line: ``network.model: <name>`` with its own settings
    trains, keeps a clock, and re-times; its settings are checked like the project's own."""
    from dataclasses import dataclass
    from typing import ClassVar

    from wirelessfl.net.links import LinkModel, register_link, unregister_link
    from wirelessfl.run.config import ConfigError
    from wirelessfl.run.retime import retime_run

    @dataclass(frozen=True)
    class HalfSettings:
        seconds_per_param: float = 1e-6

        def __post_init__(self):
            if not self.seconds_per_param > 0:
                raise ValueError("`seconds_per_param` must be > 0")

    class Half(LinkModel):
        Settings: ClassVar[type] = HalfSettings

        def seconds(self, cost, rng):
            return cost.uplink * self.settings.seconds_per_param / 2

    register_link("my_half", Half)
    try:
        net = {"model": "my_half", "seconds_per_param": 2e-6}
        times = _time(tmp_path, "mine", {"name": "fedavg"}, net)
        d = 60 * 10 + 10
        assert times[1] == pytest.approx(d * 1e-6) and times[2] == pytest.approx(2 * d * 1e-6)
        with pytest.raises(ConfigError, match="seconds_per_param"):
            resolve({**RAW, "algorithm": {"name": "fedavg"},
                     "network": {"model": "my_half", "seconds_per_param": -1}})
        with pytest.raises(ConfigError, match="setting of link model my_half, not of fixed"):
            resolve({**RAW, "algorithm": {"name": "fedavg"},
                     "network": {"model": "fixed", "seconds_per_param": 1.0}})
        retimed = retime_run(tmp_path / "mine", ["network.seconds_per_param=4e-6"])
        assert retimed[2]["sim_time_s"] == pytest.approx(4 * d * 1e-6)
    finally:
        unregister_link("my_half")
    with pytest.raises(ConfigError, match="my_half"):
        resolve({**RAW, "algorithm": {"name": "fedavg"}, "network": {"model": "my_half"}})


def test_register_link_refuses_what_is_no_link_model():
    from wirelessfl.net.links import register_link

    with pytest.raises(ValueError, match="registered already"):
        register_link("tdma", type(make_link(NetworkConfig.of("tdma"))))
    with pytest.raises(TypeError, match="subclass of wirelessfl.net.links.LinkModel"):
        register_link("my_int", int)
    with pytest.raises(ValueError, match="identifier"):
        register_link("../x", int)


def test_a_run_folder_written_before_the_link_seam_resumes(tmp_path):
    """Run folders written before the link models had their own settings hold every
    network field flat (``rate_mbps`` and ``aggregation`` under tdma too): they resume, and
    their run keys are those of today's configs."""
    import yaml

    from wirelessfl.report import RunSpec

    raw = {**RAW, "name": "old", "algorithm": {"name": "fedavg"},
           "network": {"model": "tdma", "snr_db": 12.0}}
    run_job(open_run(raw), tmp_path / "old", quiet=True)
    path = tmp_path / "old" / "config.yaml"
    stored = yaml.safe_load(path.read_text())
    stored["network"] = {"model": "tdma", "rate_mbps": 100.0, "step_seconds": 0.0,
                         "bits_per_param": 32, "snr_db": 12.0, "antennas": 10,
                         "bandwidth_hz": 9e6, "params_per_vector": None, "aggregation": "exact",
                         "beamforming": "fast", "truncation_db": None, "normalise": True,
                         "deadline_s": None, "scheduler": "uniform", "compression": "none",
                         "max_bits": 16, "late": "drop"}
    path.write_text(yaml.safe_dump(stored))
    before = RunRecord(tmp_path / "old").rows()
    run_job(open_run(raw), tmp_path / "old", resume=True, quiet=True)
    assert RunRecord(tmp_path / "old").rows() == before
    assert RunSpec("", "", None, 0, stored).key == RunSpec("", "", None, 0, raw).key
    with pytest.raises(Exception, match="different config"):
        run_job(open_run({**raw, "network": {"model": "tdma"}}),
                tmp_path / "old", resume=True, quiet=True)


@pytest.mark.parametrize("bad, match", [(float("nan"), "gave nan"), (float("inf"), "gave inf"),
                                        (1e308, "gave 1e"), (-5.0, "gave -5"),
                                        (True, "gave True"), ("3 s", "gave '3 s'"),
                                        (np.ones(2), "gave"), (ZeroDivisionError("x"), "failed")])
def test_a_user_link_model_s_seconds_are_checked_wherever_a_clock_reads_them(tmp_path, bad,
                                                                             match):
    """NaN, inf, 1e308, a negative, True, a string, an array or an exception from a plug-in's
    seconds(): one line naming the model, in a run and in re-timing, not a clock gone null,
    negative or a traceback. shadowed with no clients gives its compute time."""
    from dataclasses import dataclass
    from typing import ClassVar

    from wirelessfl.net.links import LinkModel, RoundCost, make_link, register_link, unregister_link

    @dataclass(frozen=True)
    class BadSettings:
        pass

    class Bad(LinkModel):
        Settings: ClassVar[type] = BadSettings

        def seconds(self, cost, rng):
            if isinstance(bad, Exception):
                raise bad
            return bad

    register_link("my_bad", Bad)
    try:
        with pytest.raises(ValueError, match=f"network.model 'my_bad': its seconds\\(\\) {match}"):
            _time(tmp_path, "bad", {"name": "fedavg"}, {"model": "my_bad"})
    finally:
        unregister_link("my_bad")
    link = make_link(resolve({**RAW, "network": {"model": "shadowed"}}).network)
    cost = RoundCost(1.0, 1.0, 3, 0, 10, ())
    assert link.timed(cost, np.random.default_rng(0)) == pytest.approx(3 * link.cfg.step_seconds)


CELLS = {"name": "hist", "cells": 2, "edge_rounds": 3, "clock": "link"}


@pytest.mark.parametrize("split", [False, True])
def test_a_hierarchical_round_is_clocked_cell_by_cell_by_the_named_link(split):
    """Under a named link an HFedAvg/HIST round lasts E edge rounds, each its slowest cell's
    uploads (the cells' bands in parallel, each cell's clients under the link alone),
    written out here from the round's stream; without one HIST keeps its own clock."""
    from wirelessfl.net.links import RoundCost

    raw = {**RAW, "data": {**RAW["data"], "num_clients": 8}, "model": {"name": "fcnn",
           "options": {"hidden": 16}}, "algorithm": {**CELLS, "split": split},
           "network": {"model": "tdma", "snr_db": 10.0, "step_seconds": 0.01}}
    exp = open_run(raw).exp
    state, report = exp.algorithm.apply(exp.initial_state())
    cost = exp.link.cost(report)
    assert cost.cells == (0, 0, 0, 0, 1, 1, 1, 1) and cost.edge_rounds == 3
    assert cost.cell_uplink == tuple(float(v) for v in report.submodel_params)
    rng, want = exp.seeds.generator("network", 1), 0.0
    for _ in range(3):
        want += max(exp.link.seconds(RoundCost(size, size, cost.max_steps, 4, 8,
                                               tuple(range(4 * j, 4 * j + 4))), rng)
                    for j, size in enumerate(cost.cell_uplink))
    assert exp.link.timed(cost, exp.seeds.generator("network", 1)) == pytest.approx(want, rel=1e-12)
    assert RoundCost.from_list(cost.as_list()) == cost
    assert "cell_of" not in report.logged()  # for the clock, not the rows


def test_a_hierarchical_run_retimed_under_a_link_is_the_run_trained_under_it(tmp_path):
    base = {**RAW, "rounds": 3, "data": {**RAW["data"], "num_clients": 8},
            "model": {"name": "fcnn", "options": {"hidden": 16}}}
    link = {"model": "tdma", "snr_db": 10.0}
    run_job(open_run({**base, "name": "own", "algorithm": {**CELLS, "clock": "own"}}),
            tmp_path / "own", quiet=True)
    run_job(open_run({**base, "name": "tdma", "algorithm": CELLS, "network": link}),
            tmp_path / "tdma", quiet=True)
    from wirelessfl.run.retime import retime_run

    trained = RunRecord(tmp_path / "tdma").rows()
    retimed = retime_run(tmp_path / "own", [f"network.{k}={v}" for k, v in link.items()])
    assert [r["sim_time_s"] for r in retimed[1:]] == [r["sim_time_s"] for r in trained[1:]]
    own = RunRecord(tmp_path / "own").rows()
    assert own[-1]["sim_time_s"] != trained[-1]["sim_time_s"]  # HIST's own (18) without a link
    assert [r["test_accuracy"] for r in own] == [r["test_accuracy"] for r in trained]


def test_hist_s_link_clock_needs_a_link(cli_error):
    err = cli_error({**RAW, "model": {"name": "fcnn", "options": {"hidden": 8}},
                     "algorithm": CELLS})
    assert "clock: own" in err


def test_a_damaged_hierarchical_round_cost_is_refused():
    from wirelessfl.net.links import RoundCost

    good = [10.0, 10.0, 3, 2, 4, [0, 1], [0, 1], [5.0, 6.0], 2]
    assert RoundCost.from_list(good).cells == (0, 1)
    for bad in ([*good[:6], [0, 2], [5.0, 6.0], 2], [*good[:6], [0], [5.0, 6.0], 2],
                [*good[:8], 0], [*good[:6], [0, 1], [5.0, -1.0], 2]):
        with pytest.raises(ValueError):
            RoundCost.from_list(bad)
