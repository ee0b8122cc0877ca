"""Figure regeneration: runs shared and reused, outputs consistent with the run records."""

import csv
import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from wirelessfl.cli import main
from wirelessfl.report import (
    all_done_time,
    load_figures,
    mean_accuracy_time,
    mean_steps,
    missing_runs,
    regenerate,
    run_folder,
    to_target,
)
from wirelessfl.run.config import ConfigError, list_presets, presets_dir
from wirelessfl.run.records import RunRecord

TOY = {
    "base": {"rounds": 2, "target_accuracy": 0.5,
             "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 40},
             "model": {"name": "fcnn", "options": {"hidden": 16}},
             "local": {"lr": 0.05, "batch_size": 10, "steps": 2},
             "algorithm": {"name": "hist", "cells": 2, "edge_rounds": 1}},
    "scales": {"quick": {"seeds": [0, 1], "overrides": {}},
               "paper": {"seeds": [0], "overrides": {"rounds": 3}}},
    "figures": {
        "curves": {"kind": "curves", "x": ["round", "uplink_mb_per_client"],
                   "claim": {"finding": "HIST ends more accurate", "better": "HIST",
                             "than": "HFedAvg", "measure": "final_accuracy", "lower": False},
                   "series": {"HIST": {}, "HFedAvg": {"algorithm.split": False}},
                   "sweep": {"key": "algorithm.cells", "label": "N", "values": [2, 4]}},
        "bars": {"kind": "sweep", "metric": "uplink_mb_paper_per_client", "target": 0.3,
                 "series": {"HIST": {}, "fixed": {"algorithm.cells": 2}},
                 "sweep": {"key": "algorithm.cells", "label": "N", "values": [2, 4]}},
        "tab": {"kind": "table", "metric": "round", "targets": [0.2, 0.99],
                "series": {"HIST": {}}, "reference": {"": {0.2: [1.0]}},
                "quick": {"overrides": {"rounds": 2}}},
    },
}


def write_study(tmp_path, monkeypatch, study):
    """``study`` as the paper ``toy`` (a figures.yaml in an experiments folder of the test's)."""
    root = tmp_path / "experiments"
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "figures.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(root))


@pytest.fixture
def toy(tmp_path, monkeypatch):
    write_study(tmp_path, monkeypatch, TOY)
    return tmp_path / "report"


def test_runs_are_shared_reused_and_rendered(toy):
    figs = load_figures("toy", "quick")
    assert [len(f.runs) for f in figs] == [8, 6, 2]
    # "bars" HIST N=2 and its fixed N=2 line and "tab" are the same configs as "curves" HIST N=2
    assert len(missing_runs(figs, toy)) == 8
    written = regenerate("toy", "quick", toy, quiet=True, log=lambda _: None)
    names = {p.name for p in written}
    assert {"curves.png", "curves.csv", "bars.png", "bars.csv", "tab.csv", "tab.md",
            "README.md"} <= names
    assert missing_runs(figs, toy) == []
    run = next(r for r in figs[2].runs if r.seed == 0)
    rows = RunRecord(run_folder(toy, run)).rows()
    table = list(csv.DictReader(open(toy / "tab.csv")))
    mean = sum(to_target(RunRecord(run_folder(toy, r)).rows(), 0.2, "round")
               for r in figs[2].runs) / 2
    assert float(table[0]["HIST"]) == pytest.approx(mean, abs=0.01)
    assert table[0]["HIST paper"] == "1.0" and table[1]["HIST reached"].endswith("/2")
    assert to_target(rows, 2.0, "round") != to_target(rows, 2.0, "round")  # never: NaN
    assert "| 20% |" in (toy / "tab.md").read_text()
    # a later --only keeps the other figures in the report's index
    regenerate("toy", "quick", toy, only=["tab"], quiet=True, log=lambda _: None)
    index = (toy / "README.md").read_text()
    assert all(f"## {n}\n" in index for n in ("curves", "bars", "tab")), index
    assert index.count("## tab\n") == 1 and index.count("**The paper:**") == 1


def _curves_at_three_seeds(toy):
    """The toy "curves" rendered at seeds 0-2: its README section and, per N, each series'
    final accuracies [%] (in seed order) with the section's line for that N."""
    import numpy as np

    from wirelessfl.report.metrics import final_accuracy

    regenerate("toy", "quick", toy, only=["curves"], quiet=True, log=lambda _: None,
               seeds=[0, 1, 2])
    section = (toy / "README.md").read_text().split("## curves\n")[1]
    fig = load_figures("toy", "quick", only=["curves"], seeds=[0, 1, 2])[0]
    lines = {}
    for n in (2, 4):
        acc = {s: 100 * np.array([final_accuracy(RunRecord(run_folder(toy, r)).rows(), 10)
                                  for r in sorted(fig.runs, key=lambda r: r.seed)
                                  if r.series == s and r.value == n])
               for s in ("HIST", "HFedAvg")}
        lines[n] = (acc, next(x for x in section.splitlines() if f"N={n}: HIST" in x))
    return section, lines


def test_a_figure_section_gives_the_finding_ours_and_a_verdict_from_the_rows(toy):
    """The README's verdict per setting is the paired t-test over the runs' own final
    accuracies (both series ran seeds 0-2): scipy's p decides at 5%, and its interval shows."""
    import numpy as np
    from scipy import stats

    section, lines = _curves_at_three_seeds(toy)
    assert "- **The paper:** HIST ends more accurate" in section and "**Verdict:**" in section
    assert "decided by a two-sided test at the 5% level" in section
    for acc, line in lines.values():
        assert f"HIST {acc['HIST'].mean():.4g} ± " in line, line  # in %, as the tables
        gap = acc["HIST"] - acc["HFedAvg"]
        if np.ptp(gap) == 0:
            continue  # no spread: scipy's p is undefined, ours is exact (tested apart)
        p = stats.ttest_rel(acc["HIST"], acc["HFedAvg"]).pvalue
        want = ("undecided" if p >= 0.05 else "holds" if gap.mean() > 0 else "does not hold")
        assert line.split("→ ")[1].startswith(f"{want} (paired t, 2 df"), line


def test_two_seeds_never_decide_a_figure(toy):
    regenerate("toy", "quick", toy, only=["curves"], quiet=True, log=lambda _: None)
    section = (toy / "README.md").read_text().split("## curves\n")[1]
    assert "a verdict needs at least 3 per series" in section
    verdict = next(x for x in section.splitlines() if x.startswith("- **Verdict:**"))
    assert "undecided in all 2 settings" in verdict and "2 seeds" in verdict, verdict


def test_a_claim_naming_a_series_the_figure_lacks_is_refused(toy):
    import copy

    bad = copy.deepcopy(TOY)
    bad["figures"]["curves"]["claim"]["than"] = "FedAvg"
    (toy.parent / "experiments" / "toy" / "figures.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="claim.than 'FedAvg' is not one of its series"):
        load_figures("toy", "quick")


@pytest.mark.parametrize("claim, match", [
    ({"close": "HIST", "to": "HFedAvg", "within": -1}, "claim.within -1 must be a positive"),
    ({"close": "HIST", "to": "HFedAvg", "within": True}, "must be a positive number"),
    ({"close": "HIST", "within": 1.0}, "names `close`"),
    ({"better": "HIST", "than": "HFedAvg", "within": 1.0}, "names `close`"),
    ({"close": [], "to": "HFedAvg", "within": 1.0}, "non-empty list of series"),
    ({"close": ["HIST", "FedAvg"], "to": "HFedAvg", "within": 1.0}, "claim.close 'FedAvg' is"),
    ({"close": "HIST", "to": "HFedAvg"}, "need `within`"),
    ({"close": "HIST", "to": "FedAvg", "within": 1.0}, "claim.to 'FedAvg' is not one of"),
])
def test_a_closeness_claim_needs_two_series_and_a_positive_margin(toy, claim, match):
    import copy

    bad = copy.deepcopy(TOY)
    bad["figures"]["curves"]["claim"] = {"finding": "about as accurate", **claim}
    (toy.parent / "experiments" / "toy" / "figures.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match=match):
        load_figures("toy", "quick")


def test_a_closeness_claim_is_decided_by_two_one_sided_tests_on_the_runs(toy):
    """``close``/``to``/``within``: each setting's line is :func:`within` on the final
    accuracies (paired over seeds 0-2), its 90% interval against the margin shown."""
    import copy

    from wirelessfl.report.verdict import within

    spec = copy.deepcopy(TOY)
    spec["figures"]["curves"]["claim"] = {"finding": "HIST learns about as well as HFedAvg",
                                          "close": ["HIST"], "to": "HFedAvg", "within": 5.0,
                                          "measure": "final_accuracy"}
    (toy.parent / "experiments" / "toy" / "figures.yaml").write_text(yaml.safe_dump(spec))
    section, lines = _curves_at_three_seeds(toy)
    assert "close: the gap's 90% interval inside ±5" in section
    for acc, line in lines.values():
        want = within(acc["HIST"], acc["HFedAvg"], 5.0, ([0, 1, 2], [0, 1, 2]))
        assert line.split("→ ")[1] == want.text(), line
    verdict = next(x for x in section.splitlines() if x.startswith("- **Verdict:**"))
    assert "two one-sided tests at the 5% level each (closeness within ±5)" in verdict


def test_scales_change_the_runs_and_bad_names_are_refused(toy):
    paper = load_figures("toy", "paper", only=["tab"])
    assert len(paper[0].runs) == 1 and paper[0].runs[0].raw["rounds"] == 3
    with pytest.raises(ConfigError, match="unknown"):
        load_figures("toy", "quick", only=["fig99"])
    with pytest.raises(ConfigError, match="no figures for paper"):
        load_figures("nope", "quick")
    assert main(["figures", "toy", "--only", "fig99", "--out", str(toy)]) == 2
    assert not toy.exists()


def test_figures_yaml_is_not_a_preset_and_hist_figures_resolve():
    assert "figures" not in list_presets()
    for scale in ("quick", "paper"):
        figs = load_figures("hist", scale)
        assert {"fig3", "fig4", "fig5", "fig6", "fig6c", "fig7a", "fig7a_normalised", "fig7b",
                "fig7c", "table1", "table2"} <= {f.name for f in figs}
    fedast = {f.name: f for f in load_figures("fedast", "quick")}
    assert {"e1", "e2", "e3", "e4", "e4_curves", "e7_pair", "e9", "e10"} == set(fedast)
    paper = {f.name for f in load_figures("fedast", "paper")}
    assert paper == set(fedast) | {"e5", "e8", "e8_curves", "e10_fmnist"}
    assert {r.key for r in fedast["e4"].runs} == {r.key for r in fedast["e4_curves"].runs}


def test_codesign_figures_resolve_to_the_links_they_compare():
    from wirelessfl.run.config import resolve

    figs = {f.name: f for f in load_figures("codesign", "quick")}
    assert {"snr", "noise_free", "antennas", "clients", "scheduling", "scheduling_curves",
            "bit_widths"} <= set(figs)   # the figures this test reads (more may be added)
    nets = {(r.panel, r.series, r.value): resolve(r.raw).network for r in figs["snr"].runs}
    snrs = {n.settings.snr_db for n in nets.values()}
    assert len(nets) == 2 * 4 * len(snrs) and all(
        (getattr(n.settings, "aggregation", "exact") == "over_the_air") == p.startswith("AirComp")
        for (p, _, _), n in nets.items())
    assert {-10, 0, 10, 20, 30} <= snrs and min(snrs) <= -30  # down to where over the air fails
    sched = [resolve(r.raw) for r in figs["scheduling"].runs]
    assert {c.network.settings.scheduler for c in sched} == {"uniform", "best_channel",
                                                    "proportional_fair", "age"}
    assert {(c.network.settings.antennas, c.algorithm.hparams.clients_per_round)
            for c in sched} == {(1, 5)}
    assert {r.key for r in figs["scheduling"].runs} == {r.key for r in figs["scheduling_curves"].runs}


def test_multitask_times_to_target_on_hand_made_rows():
    rows = [{"task": "a", "sim_time": 1.0, "test_accuracy": 0.8},
            {"task": "b", "sim_time": 2.0, "test_accuracy": 0.5},
            {"task": "a", "sim_time": 3.0, "test_accuracy": 0.9},
            {"task": "b", "sim_time": 4.0, "test_accuracy": 0.75}]
    times, means = mean_steps(rows)
    assert times.tolist() == [1, 2, 3, 4] and means.tolist() == pytest.approx([0.4, 0.65, 0.7, 0.825])
    times, means = mean_steps(rows, "test_accuracy", ["b"])
    assert times.tolist() == [2, 4] and means.tolist() == [0.5, 0.75]
    losses = [{**r, "test_loss": 1.0 / r["sim_time"]} for r in rows]
    _, means = mean_steps(losses, "test_loss")
    assert math.isnan(means[0]) and means[1:].tolist() == pytest.approx([0.75, 5 / 12, 7 / 24])
    assert mean_accuracy_time(rows, 0.7) == 3.0 and math.isnan(mean_accuracy_time(rows, 0.9))
    assert all_done_time(rows, {"a": 0.85, "b": 0.7}) == 4.0
    assert math.isnan(all_done_time(rows, {"a": 0.95, "b": 0.7}))


MULTI = {
    "base": {"tasks": ["synthetic_linear"], "copies": 2, "pool": {"clients": 20, "available": 10},
             "method": {"name": "fedast", "requests": 8, "ratio": 4}, "max_time": 15.0,
             "stop_at_target": False},
    "scales": {"quick": {"seeds": [0], "overrides": {}}, "paper": {"seeds": [0], "overrides": {}}},
    "figures": {
        "fin": {"kind": "final", "y": ["accuracy", "loss", "time"],
                "series": {"FedAST": {}, "NoBuffer": {"method.buffer": 1},
                           "centralized": {"method": {"name": "centralized", "epochs": 2},
                                           "copies": 1}},
                "sweep": {"label": "ratio", "points": {
                    0.25: {"pool.available": 5, "method.requests": 4},
                    0.5: {"pool.available": 10, "method.requests": 8}}}},
        "per_task": {"kind": "time_curves", "per_task": True, "y": ["accuracy", "loss"],
                     "series": {"FedAST": {}}},
    },
}


def test_estimate_times_a_multi_task_figure_against_its_simulated_time(tmp_path, monkeypatch):
    """FedAST's runs are estimated: a simulation that ends within MULTI_S is its own sample,
    within an order of magnitude of the runs it estimates; one cut short is extrapolated
    from the slope of its cost; a server learning rate or a seed does not change the cost;
    centralized training, which has no clock, runs whole."""
    import time

    from wirelessfl.report import estimate

    root = tmp_path / "experiments"
    (root / "multi").mkdir(parents=True)
    spec = {**MULTI, "figures": {"fin": {
        "kind": "final", "y": ["accuracy"],
        "series": {"FedAST": {}, "slower": {"method.server_lr": 0.05},
                   "NoBuffer": {"method.buffer": 1},
                   "central": {"method": {"name": "centralized", "epochs": 2}, "copies": 1}}}}}
    (root / "multi" / "figures.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(root))
    (fig,) = load_figures("multi", "quick")
    by = {r.series: r for r in fig.runs}
    assert estimate.cost_key(by["FedAST"]) == estimate.cost_key(by["slower"])
    assert estimate.cost_key(by["FedAST"]) != estimate.cost_key(by["NoBuffer"])
    report, logs = tmp_path / "report", []
    regenerate("multi", "quick", tmp_path / "warm", quiet=True, log=lambda _: None)  # imports
    (whole,) = estimate.estimate([fig], report, log=logs.append)
    assert whole.runs == 4 and whole.rounds == 0 and whole.seconds > 0 and not whole.note
    assert len(logs) == 3 and all("of simulated time" in m for m in logs)
    assert whole.simulated == 3 and "simulated time to max_time" in estimate.estimate_table(
        [whole], "CPU")
    t0 = time.perf_counter()
    regenerate("multi", "quick", report, quiet=True, log=lambda _: None)
    took = time.perf_counter() - t0
    assert took / 10 < whole.seconds < took * 10, (whole.seconds, took)
    monkeypatch.setattr(estimate, "MULTI_S", 0.0)  # cut at the first aggregation
    (cut,) = estimate.estimate([fig], tmp_path / "none", log=lambda _: None)
    assert math.isfinite(cut.seconds) and cut.seconds > 0 and cut.runs == 4


def test_a_multi_task_cost_reads_its_sample_to_the_run_s_horizon():
    from wirelessfl.report.estimate import STOP_HORIZON, _SimCost

    cost = _SimCost(((0.0, 0.0), (10.0, 5.0), (20.0, 8.0)), per_t=0.3, rounds_per_t=0.5, tasks=2)
    run = {"max_time": 100.0, "stop_at_target": False, "max_rounds": None}
    assert cost.of(run) == pytest.approx(8 + 0.3 * 80)  # beyond the sample: its slope
    assert cost.of({**run, "max_time": 15.0}) == 8.0  # inside: the aggregation that ends it
    assert cost.of({**run, "max_time": 5.2e5, "stop_at_target": True}) == pytest.approx(
        8 + 0.3 * (STOP_HORIZON - 20))  # stops at its targets: the stated horizon
    assert cost.of({**run, "max_time": 1e6, "max_rounds": 10}) == pytest.approx(
        8 + 0.3 * (10 * 2 / 0.5 - 20))  # 10 rounds of 2 tasks at 0.5 aggregations a unit
    assert cost.rounds_of(run) == 0


def test_final_figures_sweep_points_and_draw_reference_lines(tmp_path, monkeypatch):
    root = tmp_path / "experiments"
    (root / "multi").mkdir(parents=True)
    (root / "multi" / "figures.yaml").write_text(yaml.safe_dump(MULTI, sort_keys=False))
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(root))
    report = tmp_path / "report"
    fin, per_task = load_figures("multi", "quick")
    # two points for each swept series, one unswept centralized run
    assert sorted((r.series, r.value) for r in fin.runs) == [
        ("FedAST", 0.25), ("FedAST", 0.5), ("NoBuffer", 0.25), ("NoBuffer", 0.5),
        ("centralized", None)]
    at = {(r.series, r.value): r.raw for r in fin.runs}
    assert at[("FedAST", 0.25)]["pool"]["available"] == 5
    assert at[("FedAST", 0.25)]["method"]["requests"] == 4
    assert at[("centralized", None)]["method"] == {"name": "centralized", "epochs": 2}
    # the FedAST run at ratio 0.5 is the per-task figure's run: shared
    assert len(missing_runs([fin, per_task], report)) == 5
    regenerate("multi", "quick", report, quiet=True, log=lambda _: None)
    table = {(r["series"], r["ratio"]): r for r in csv.DictReader(open(report / "fin.csv"))}
    run = next(r for r in fin.runs if (r.series, r.value) == ("FedAST", 0.5))
    rows = RunRecord(run_folder(report, run)).rows()
    finals = [[r for r in rows if r["task"] == t][-1] for t in ("synthetic_linear-0", "synthetic_linear-1")]
    assert rows[-1]["sim_time"] <= 15.0 and max(r["sim_time"] for r in rows) > 10.0  # no stop at target
    assert float(table[("FedAST", "0.5")]["accuracy"]) == pytest.approx(
        sum(r["test_accuracy"] for r in finals) / 2)
    assert float(table[("FedAST", "0.5")]["loss"]) == pytest.approx(
        sum(r["test_loss"] for r in finals) / 2)
    central = RunRecord(run_folder(report, fin.runs[-1])).rows()
    assert [r["round"] for r in central] == [1, 2] and table[("centralized", "")]["accuracy"]
    curves = list(csv.DictReader(open(report / "per_task.csv")))
    assert {r["task"] for r in curves} == {"synthetic_linear-0", "synthetic_linear-1"}
    assert {"accuracy_mean", "loss_mean"} <= set(curves[0])


@pytest.mark.slow  # other processes started, killed or signalled: CI's second step
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_run_locked_by_another_process_is_skipped_and_the_rest_go_on(toy, jobs):
    figs = load_figures("toy", "quick", only=["tab"])
    locked = run_folder(toy, figs[0].runs[0])
    lines = []
    with RunRecord(locked).writing({"name": "x"}, 0, "cpu", resume=False):   # another writer
        regenerate("toy", "quick", toy, only=["tab"], quiet=True, log=lines.append, jobs=jobs)
    assert any("skipped" in ln and "another run" in ln for ln in lines)
    assert [r.key for r in missing_runs(figs, toy)] == [figs[0].runs[0].key]
    assert "## tab\n\ntab — " in (readme := (toy / "README.md").read_text()) and "Runs missing" in readme
    assert not (toy / "tab.md").exists()   # an incomplete figure is not drawn


SESSIONS_TOY = {
    "base": {"rounds": 10, "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 30},
             "model": {"name": "fcnn", "options": {"hidden": 8}},
             "local": {"lr": 0.05, "batch_size": 10, "steps": 2, "schedule": "poly",
                       "schedule_rounds": 2},
             "population": {"kind": "alternating", "rounds_per_session": 2},
             "initial_model": {"rule": "proposed", "pilot_sessions": 1}},
    "scales": {"quick": {"seeds": [0, 1], "overrides": {}}, "paper": {"seeds": [0], "overrides": {}}},
    "figures": {
        "tab": {"kind": "transitions", "transitions": [1, 2], "window": 2, "method": "Proposed",
                "panels": [{"A": {}}, {"FedAvg": {"algorithm": {"name": "fedavg"}},
                                       "FedProx": {"algorithm": {"name": "fedprox", "mu": 0.5}}}],
                "series": {"Proposed": {}, "Continuous": {"algorithm": {"name": "continuous"},
                                                          "initial_model.rule": "previous"},
                           "Previous": {"initial_model.rule": "previous"}},
                "reference": {"A FedAvg": [1, 2, 3, 4, 5, 6]}},
        "curves": {"kind": "curves", "x": "round", "y": "active_accuracy",
                   "panels": {"A FedAvg": {"algorithm": {"name": "fedavg"}}},
                   "series": {"Proposed": {}, "Previous": {"initial_model.rule": "previous"}}},
    },
}


def test_transition_tables_average_the_first_rounds_of_each_session(tmp_path, monkeypatch):
    """docs/papers/dynamic_clients.md §4.3: transition k = session P+1+k, mean of its first
    rounds, over seeds."""
    from wirelessfl.report import panel_grid, session_starts, transition_accuracy

    root = tmp_path / "experiments"
    (root / "dyn").mkdir(parents=True)
    (root / "dyn" / "figures.yaml").write_text(yaml.safe_dump(SESSIONS_TOY, sort_keys=False))
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(root))
    figs = {f.name: f for f in load_figures("dyn", "quick")}
    runs = figs["tab"].runs
    # Continuous overrides the row's algorithm section, so it is one run set for both rows
    assert len({r.key for r in runs if r.series == "Continuous"}) == 2
    assert len({r.key for r in runs}) == 10
    assert list(panel_grid(SESSIONS_TOY["figures"]["tab"]["panels"])) == ["A FedAvg", "A FedProx"]
    out = tmp_path / "report"
    regenerate("dyn", "quick", out, quiet=True, log=lambda _: None)
    table = {r["setting"]: r for r in csv.DictReader(open(out / "tab.csv"))}
    for panel in ("A FedAvg", "A FedProx"):
        for k in (1, 2):
            mine = [r for r in runs if r.panel == panel and r.series == "Proposed"]
            vals = []
            for r in mine:
                rows = RunRecord(run_folder(out, r)).rows()
                s = 1 + 1 + k  # P = 1
                acc = [x["active_accuracy"] for x in rows if x["round"] in (2 * s + 1, 2 * s + 2)]
                assert transition_accuracy(rows, s, 2) == pytest.approx(sum(acc) / 2)
                vals.append(100 * sum(acc) / 2)
            assert float(table[panel][f"Proposed T{k}"]) == pytest.approx(sum(vals) / 2, abs=0.01)
    assert table["A FedAvg"]["Previous T2 paper"] == "6"
    assert (table["A FedAvg"]["Continuous T1"], table["A FedAvg"]["Continuous T2"]) == \
        (table["A FedProx"]["Continuous T1"], table["A FedProx"]["Continuous T2"])
    md = (out / "tab.md").read_text()
    assert "| A FedAvg |" in md and "(6)" in md and "- T2: Proposed ≥ Continuous in" in md
    rows = RunRecord(run_folder(out, runs[0])).rows()
    assert [rows[i]["round"] for i in session_starts(rows)] == [3, 5, 7, 9]
    assert (out / "curves.png").is_file()
    curve = list(csv.DictReader(open(out / "curves.csv")))
    assert {c["session"] for c in curve} == {"0", "1", "2", "3", "4"}


def test_dynamic_clients_figures_resolve_at_both_scales():
    quick = {f.name: f for f in load_figures("dynamic", "quick")}
    t3 = quick["table3"]
    assert len({r.panel for r in t3.runs}) == 12  # 2 overlaps x 6 algorithm rows
    assert all(r.raw["data"]["dataset"] == "fashion_mnist" for f in quick.values() for r in f.runs)
    scaffold = next(r for r in t3.runs if r.panel.endswith("SCAFFOLD") and r.series == "Continuous")
    assert scaffold.raw["algorithm"] == {"name": "continuous"} and scaffold.raw["local"]["lr"] == 0.03
    # fig2's runs are table3's
    assert {r.key for r in quick["fig2"].runs} <= {r.key for r in t3.runs}


@pytest.mark.parametrize("paper", ["hist", "fedast", "fadamgc", "dynamic", "rafed"])
@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_each_scale_has_the_figures_its_yaml_gives_it_each_with_runs(paper, scale):
    """A figure is at a scale unless its ``scales`` leaves the scale out; every figure has
    runs, and ``--only`` picks exactly the figures named."""
    from wirelessfl.run.config import presets_dir

    doc = yaml.safe_load((presets_dir() / paper / "figures.yaml").read_text())
    want = {n for n, f in doc["figures"].items() if scale in f.get("scales", ["quick", "paper"])}
    figs = load_figures(paper, scale)
    assert [f.name for f in figs] == [n for n in doc["figures"] if n in want]
    assert all(f.runs and f.scale == scale for f in figs)
    first = sorted(want)[:2]
    assert [f.name for f in load_figures(paper, scale, only=first)] == [
        n for n in doc["figures"] if n in first]


def test_run_keys_are_stable_when_options_are_added(order_before):
    """A run's key is the hash of its resolved config; options added later (text datasets'
    tokenizer and max_length) stay out of it at their defaults, so earlier runs are found."""
    from wirelessfl.report import RunSpec

    raw = {"seed": 1, "rounds": 3, "data": {"dataset": "synthetic", "num_clients": 4},
           "algorithm": {"name": "fedavg"}}
    assert RunSpec("", "", None, 0, {**raw, "local": {"batch_order": "pcg64"}}).key == "f30d95eda09b"
    assert RunSpec("", "", None, 0, raw).key != "f30d95eda09b"  # the dated re-key (batch order)
    raw = {**raw, "local": {"batch_order": "pcg64"}}
    text = {**raw, "data": {**raw["data"], "max_length": 64}}
    assert RunSpec("", "", None, 0, text).key != "f30d95eda09b"
    placed = {**raw, "data": {**raw["data"], "placement": "auto"}}
    assert RunSpec("", "", None, 0, placed).key == "f30d95eda09b"
    # multi-task runs (FedAST): the options inside each task's data stay out too (the key is
    # the one the code gave before the text options were added)
    multi = {"tasks": ["synthetic_linear", "synthetic_linear"], "seed": 1,
             "pool": {"clients": 20}, "max_rounds": 3}
    assert RunSpec("", "", None, 0, order_before(multi)).key == "c900ed0f7bde"
    assert RunSpec("", "", None, 0, multi).key != "c900ed0f7bde"


def test_multitask_data_seeds_are_stable_when_options_are_added():
    """A task's partition seed hashes its data config; options added later (tokenizer,
    max_length, placement) stay out of it, so a task draws the same clients as before
    they existed (the value is the one the code gave before the text options were added)."""
    from wirelessfl.run.config import DataConfig
    from wirelessfl.run.tasks import _data_key

    data = DataConfig(dataset="fashion_mnist", partition="iid", num_clients=100)
    assert _data_key(data) == 3762195437
    assert _data_key(dataclasses.replace(data, placement="host")) == 3762195437
    assert _data_key(dataclasses.replace(data, max_length=64)) != 3762195437


def test_a_foreign_report_folder_is_refused_and_left_as_it_was(tmp_path, capsys):
    """figures/sweep write tables, plots and a README into their report folder: a folder
    holding files this tool did not write is refused before anything runs."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "README.md").write_text("my notes")
    argv = ["sweep", "quickstart", "--grid", "rounds=1", "--out", str(out), "--quiet"]
    assert main(argv) == 2
    assert "did not write" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["README.md"]
    assert (out / "README.md").read_text() == "my notes"


def test_missing_data_is_one_error_before_any_run(tmp_path, monkeypatch, capsys):
    from wirelessfl.cli import main

    root = tmp_path / "experiments"
    (root / "toy").mkdir(parents=True)
    doc = {**TOY, "base": {**TOY["base"], "data": {"dataset": "cifar10", "num_clients": 8}}}
    (root / "toy" / "figures.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(root))
    empty = tmp_path / "data"
    empty.mkdir()
    code = main(["figures", "toy", "--out", str(tmp_path / "rep"), "--data-dir", str(empty),
                 "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "need cifar10" in err, err
    assert not list((tmp_path / "rep").glob("runs/*"))


def test_curve_bands_are_explained_on_the_figure(toy, monkeypatch):
    from wirelessfl.report import renderers

    texts = {}
    real = renderers._finish

    def capture(fig, f, ax, out, table, **kw):
        paths = real(fig, f, ax, out, table, **kw)
        texts[fig.name] = [t.get_text() for t in f.texts]
        return paths

    monkeypatch.setattr(renderers, "_finish", capture)
    regenerate("toy", "quick", toy, only=["curves"], quiet=True, log=lambda _: None)
    assert "lines: mean over seeds; shaded: min to max over seeds" in texts["curves"]


def _accuracy_axes(monkeypatch):
    """Every drawn axis's (y label, how 0.8 is ticked), by figure name."""
    from wirelessfl.report import renderers

    axes = {}
    real = renderers._finish

    def capture(fig, f, ax, out, table, **kw):
        axes[fig.name] = [(a.get_ylabel(), a.yaxis.get_major_formatter()(0.8, 0))
                          for a in np.ravel(ax) if a.get_ylabel()]
        return real(fig, f, ax, out, table, **kw)

    monkeypatch.setattr(renderers, "_finish", capture)
    return axes


def test_report_figures_draw_accuracy_in_percent_as_the_tables_do(tmp_path, monkeypatch):
    """Curves, accuracy against time and final-value sweeps: an accuracy axis says [%] and
    ticks 0.8 (the rows' fraction) as 80; a loss axis is left in its own unit."""
    axes = _accuracy_axes(monkeypatch)
    for study, only in ((TOY, ["curves"]), (MULTI, ["per_task", "fin"])):
        write_study(tmp_path / only[0], monkeypatch, study)
        regenerate("toy", "quick", tmp_path / only[0] / "report", only=only, quiet=True,
                   log=lambda _: None)
    assert set(axes) == {"curves", "per_task", "fin"}
    drawn = [ax for name in axes for ax in axes[name]]
    accuracy = [(label, tick) for label, tick in drawn if "accuracy" in label]
    assert len(accuracy) >= 3 and all(label.endswith("[%]") and float(tick) == 80.0
                                      for label, tick in accuracy)
    loss = [label for label, _ in drawn if "loss" in label]
    assert loss and not any(label.endswith("[%]") for label in loss)


def test_titles_say_the_settings_their_scale_runs():
    """A title's settings are read from the resolved runs: quick fig6 ran 40 clients, H = 10."""
    quick = load_figures("hist", "quick", only=["fig6"])[0].title
    paper = load_figures("hist", "paper", only=["fig6"])[0].title
    assert "40 clients" in quick and "10 local steps" in quick and "30 rounds" in quick
    assert "quick scale, 3 seeds" in quick and "target 70%" in quick
    assert "60 clients" in paper and "40 local steps" in paper and "target 80%" in paper
    # a setting its runs do not share (the swept N of fig4) is left to the legend
    assert "cells" not in load_figures("hist", "quick", only=["fig4"])[0].settings


def test_captions_in_figures_yaml_carry_no_settings():
    """Settings in a caption would be the paper's, not what ran: they come from the runs."""
    import re

    pattern = re.compile(r"\b\w+\s?=\s?[-\d.]+|\b\d+\s?(clients|dB|antennas?|local steps)\b")
    for path in presets_dir().glob("*/figures.yaml"):
        for line in path.read_text().splitlines():
            if line.strip().startswith("title:"):
                assert not pattern.search(line), f"{path.parent.name}: {line.strip()}"


def test_a_defaulted_hyperparameter_added_to_an_algorithm_keeps_every_key(monkeypatch):
    """Adding a field with a default to an HParams class re-keys no run (no hand-kept list):
    the key view leaves it out at its default and keys only the runs that set it."""
    from wirelessfl import registry
    from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
    from wirelessfl.report import RunSpec

    raw = {"seed": 1, "rounds": 3, "data": {"dataset": "synthetic", "num_clients": 4},
           "algorithm": {"name": "fedavg", "server_lr": 0.5}}
    before = RunSpec("", "", None, 0, raw).key
    grown = dataclasses.make_dataclass("FedAvgHParams", [("my_new_knob", float, 0.25)],
                                       bases=(FedAvgHParams,), frozen=True)
    grown.__module__, grown.__qualname__ = FedAvgHParams.__module__, FedAvgHParams.__qualname__
    monkeypatch.setitem(registry._LOADED, "fedavg", (grown, FedAvg))
    assert RunSpec("", "", None, 0, raw).key == before
    set_it = {**raw, "algorithm": {**raw["algorithm"], "my_new_knob": 0.5}}
    assert RunSpec("", "", None, 0, set_it).key != before


def test_the_frozen_key_schema_matches_the_classes_it_names():
    """Every class of the frozen key schema still exists and each frozen field it still has
    keeps its recorded default: changing a default would silently change old runs' meaning."""
    import importlib

    from wirelessfl.run.configtypes import _plain
    from wirelessfl.run.key_schema import CHANGED_DEFAULTS, FROZEN, REQUIRED

    assert len(FROZEN) > 30
    for name, frozen in FROZEN.items():
        module, _, qual = name.rpartition(".")
        cls = getattr(importlib.import_module(module), qual)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key, default in frozen.items():
            if key not in fields or isinstance(default, dict) or (name, key) in CHANGED_DEFAULTS:
                continue  # moved (enters keys with the recorded default), a section, or a
                # default changed on purpose (recorded with the old runs' value, re-keying them)
            f = fields[key]
            now = (_plain(f.default) if f.default is not dataclasses.MISSING
                   else _plain(f.default_factory()) if f.default_factory is not dataclasses.MISSING
                   else REQUIRED)
            assert now == default or (now is REQUIRED and default is REQUIRED), (name, key)


def test_a_class_that_moved_module_keeps_its_frozen_record():
    """A moved class goes by its recorded name, so its fields still enter every run key."""
    import importlib

    from wirelessfl.run.configtypes import key_view, qualified_name
    from wirelessfl.run.key_schema import FROZEN, MOVED

    for new, old in MOVED.items():
        module, _, qual = new.rpartition(".")
        cls = getattr(importlib.import_module(module), qual)
        assert old in FROZEN and new not in FROZEN and qualified_name(cls) == old
    from wirelessfl.engine.hparams import LocalHParams
    assert set(FROZEN[qualified_name(LocalHParams)]) <= set(key_view(LocalHParams()))


def test_publish_copies_the_outputs_not_the_runs_and_never_a_foreign_folder(toy, tmp_path):
    from wirelessfl.report.figures import publish

    regenerate("toy", "quick", toy, only=["tab"], quiet=True, log=lambda _: None)
    dest = tmp_path / "docs" / "toy-quick"
    names = {p.name for p in publish(toy, dest)}
    assert {"README.md", "tab.md", "tab.csv"} <= names and not (dest / "runs").exists()
    assert (dest / "README.md").read_text() == (toy / "README.md").read_text()
    (dest / "NOTES.md").write_text("my notes")  # a user's own file beside the outputs
    (dest / "plot.png").write_bytes(b"mine")
    (toy / "tab.csv").unlink()
    publish(toy, dest)  # a second publish replaces the first: no stale outputs
    assert not (dest / "tab.csv").exists()
    assert (dest / "NOTES.md").read_text() == "my notes" and (dest / "plot.png").read_bytes() == b"mine"
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.md").write_text("mine")
    assert main(["figures", "toy", "--only", "tab", "--out", str(toy), "--publish",
                 str(foreign)]) == 2
    assert (foreign / "notes.md").read_text() == "mine"


def test_publish_adds_to_the_published_report_and_never_undraws_a_figure(toy, tmp_path):
    """Figures finished in different report folders (sessions) publish into one page."""
    from wirelessfl.report.figures import publish

    dest = tmp_path / "docs" / "toy-paper"
    regenerate("toy", "quick", toy, only=["tab"], quiet=True, log=lambda _: None)
    publish(toy, dest)
    tab = {n: (dest / n).read_bytes() for n in ("tab.md", "tab.csv")}
    later = tmp_path / "later"  # another session's report: only "bars"
    regenerate("toy", "quick", later, only=["bars"], quiet=True, log=lambda _: None)
    publish(later, dest)
    readme = (dest / "README.md").read_text()
    assert "## tab\n" in readme and "## bars\n" in readme
    assert {n: (dest / n).read_bytes() for n in tab} == tab and (dest / "bars.png").is_file()
    undrawn = tmp_path / "undrawn"  # a report whose "tab" did not finish, with a stale file
    undrawn.mkdir()
    (undrawn / "README.md").write_text("# Regenerated figures and tables\n\n## tab\n\n"
                                      "Runs missing: run `wirelessfl figures` again.\n")
    (undrawn / "tab.csv").write_text("stale")
    publish(undrawn, dest)
    assert (dest / "README.md").read_text() == readme
    assert {n: (dest / n).read_bytes() for n in tab} == tab and (dest / "bars.png").is_file()
    publish(later, dest)  # "bars" again: "tab" still kept, and removable by the next publish
    assert set(tab) <= set(json.loads((dest / ".wirelessfl-published").read_text())["files"])


def test_a_published_figure_without_per_seed_data_says_so_until_it_is_redrawn(toy, tmp_path):
    """An earlier publish's figure whose outputs lack ``<figure>-seeds.csv`` (drawn before
    reports wrote per-seed values) is marked in the README; drawn again, the mark goes."""
    from wirelessfl.report.figures import NO_PER_SEED, mark_per_seed, publish

    dest = tmp_path / "docs" / "toy-paper"
    regenerate("toy", "quick", toy, only=["tab"], quiet=True, log=lambda _: None)
    publish(toy, dest)
    assert NO_PER_SEED not in (dest / "README.md").read_text()
    old = (dest / "README.md").read_text().replace(", `tab-seeds.csv`", "")  # an older report
    (dest / "README.md").write_text(old)
    later = tmp_path / "later"
    regenerate("toy", "quick", later, only=["bars"], quiet=True, log=lambda _: None)
    publish(later, dest)
    readme = (dest / "README.md").read_text()
    tab, bars = readme.split("## tab\n")[1].split("## ")[0], readme.split("## bars\n")[1]
    assert NO_PER_SEED in tab and NO_PER_SEED not in bars
    assert mark_per_seed("tab", "## tab\n\n" + tab) == "## tab\n\n" + tab  # marked once
    publish(toy, dest)  # "tab" drawn with its per-seed CSV: the mark goes
    assert NO_PER_SEED not in (dest / "README.md").read_text()
    undrawn = "## tab\n\nRuns missing: run `wirelessfl figures` again.\n"
    assert mark_per_seed("tab", undrawn) == undrawn


def test_adding_seeds_adds_runs_and_leaves_the_existing_keys(toy):
    from wirelessfl.report.spec import parse_seeds

    before = {(r.panel, r.series, r.value, r.seed): r.key for f in load_figures("toy", "quick")
              for r in f.runs}
    more = load_figures("toy", "quick", seeds=parse_seeds("0-4"))
    after = {(r.panel, r.series, r.value, r.seed): r.key for f in more for r in f.runs}
    assert set(before.items()) <= set(after.items()) and len(after) == 5 * len(before) // 2
    assert parse_seeds("0-2,7") == [0, 1, 2, 7]
    for bad in ("0-", "a", "3,3", "0-99999", "-1"):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)
    assert main(["figures", "toy", "--seeds", "1,1", "--dry-run", "--out", str(toy)]) == 2


def test_estimate_is_within_an_order_of_magnitude_of_the_run_it_estimates(toy):
    import time

    from wirelessfl.report.estimate import estimate

    heavier = ["rounds=6", "local.steps=30", "data.samples_per_client=200"]
    regenerate("toy", "quick", toy.parent / "warm", only=["tab"], extra=heavier, quiet=True,
               log=lambda _: None)  # the process's first run pays its imports: not timed
    figs = load_figures("toy", "quick", only=["tab"], extra=heavier)
    (est,) = estimate(figs, toy, log=lambda _: None)
    assert est.runs == 2 and est.rounds == 12
    t0 = time.perf_counter()
    regenerate("toy", "quick", toy, only=["tab"], extra=heavier, quiet=True, log=lambda _: None)
    took = time.perf_counter() - t0
    assert took / 10 < est.seconds < took * 10, (est.seconds, took)
    assert estimate(figs, toy, log=lambda _: None)[0].runs == 0  # done runs cost nothing


@pytest.mark.parametrize("eval_every, long_round, sample_s, ran, rows", [
    (1, 1e9, 1e9, [3], 4), (1, 0.0, 1e9, [3], 2), (1, 1e9, 0.0, [3], 3), (2, 1e9, 1e9, [3, 1], 3)])
def test_estimate_samples_rounds_by_their_clock_and_stops_when_it_has_enough(
        toy, monkeypatch, eval_every, long_round, sample_s, ran, rows):
    """After a 1-round probe (short here), one run of 1 + 2 rounds, ended after a long first
    round or once the sample has taken SAMPLE_S; with rows not every round, a 1-round run
    beside it times the difference."""
    from wirelessfl.report import estimate
    from wirelessfl.run.records import RunRecord

    jobs, folders = [], []
    real = estimate.execute

    def execute(record, job, **kw):
        jobs.append(job.cfg.rounds)
        folders.append(record.folder)
        out = real(record, job, **kw)
        folders[-1] = len(RunRecord(record.folder).rows())  # read before the folder goes
        return out

    monkeypatch.setattr(estimate, "execute", execute)
    monkeypatch.setattr(estimate, "LONG_ROUND_S", long_round)
    monkeypatch.setattr(estimate, "SAMPLE_S", sample_s)
    monkeypatch.setattr(estimate, "PROBE_KEEP_S", 1e9)
    figs = load_figures("toy", "quick", only=["tab"], extra=[f"eval_every={eval_every}"])
    (est,) = estimate.estimate(figs, toy, log=lambda _: None)
    assert jobs == [1, *ran] and folders[1] == rows  # the timed run's rows: round 0 and its rounds
    assert est.runs == 2 and est.seconds > 0


def test_a_heavy_setting_keeps_its_probe_and_settings_of_one_cost_are_timed_once(toy, monkeypatch):
    """Settings that differ only in a learning rate are timed once; a setting whose probed
    round reaches PROBE_KEEP_S keeps the probe (clients trained within PROBE_CALL_S, the
    rest extrapolated; evaluation apart), counted in the table."""
    from wirelessfl.report import estimate
    from wirelessfl.report.estimate import estimate_table

    spec = {**TOY, "base": {**TOY["base"], "max_batch": 4},  # chunks of 4: the first of 1
            "figures": {"lr": {"kind": "curves", "x": ["round"],
                                      "series": {"a": {}, "b": {"local.lr": 0.01},
                                                 "c": {"local.steps": 3}}}}}
    (toy.parent / "experiments" / "toy" / "figures.yaml").write_text(yaml.safe_dump(spec))
    figs = load_figures("toy", "quick")
    assert estimate.cost_key(figs[0].runs[0]) == estimate.cost_key(
        next(r for r in figs[0].runs if r.series == "b"))
    logs: list[str] = []
    monkeypatch.setattr(estimate, "PROBE_KEEP_S", 1e9)
    (whole,) = estimate.estimate(figs, toy, log=logs.append)
    assert len(logs) == 2 and whole.sampled == 0  # a and b: one timing; c: its own
    monkeypatch.setattr(estimate, "PROBE_KEEP_S", 0.0)
    monkeypatch.setattr(estimate, "PROBE_CALL_S", 0.0)
    logs.clear()
    (probed,) = estimate.estimate(figs, toy, log=logs.append)
    assert len(logs) == 2 and all("on a sample of its clients" in m for m in logs)
    assert probed.sampled == 2 and probed.runs == whole.runs and probed.seconds > 0
    assert "2 settings from a sample of each round's clients" in estimate_table([probed], "CPU")


def test_a_stand_in_has_the_datasets_shapes_and_classes(monkeypatch):
    from wirelessfl.data import datasets, load_dataset
    from wirelessfl.report import estimate

    monkeypatch.setattr(datasets, "USER_DATASETS", dict(datasets.USER_DATASETS))
    monkeypatch.setitem(estimate.SHAPES, "cifar100", (300, 40, (3, 32, 32), 100))
    name = estimate.stand_in("cifar100")
    splits = load_dataset(name)
    assert splits.train.x.shape == (300, 3, 32, 32) and splits.test.x.shape == (40, 3, 32, 32)
    assert splits.train.num_classes == 100 and set(splits.train.y.tolist()) == set(range(100))
    monkeypatch.setitem(estimate.TEXT_SHAPES, "ag_news", (50, 12, 4))
    text = load_dataset(estimate.stand_in("ag_news", test=5, length=16))
    assert text.train.x.shape == (50, 16) and text.test.x.shape == (5, 16)
    assert text.train.x.min() >= 0 and text.train.x.max() < estimate.TEXT_VOCAB
    assert text.train.x.equal(text.train.x.round()) and text.train.num_classes == 4
    monkeypatch.setattr(estimate, "SHAKESPEARE", (90, 10, 80, 80))
    leaf = load_dataset(estimate.stand_in("shakespeare", clients=9))
    assert leaf.train.x.shape == (90, 80) and leaf.train.x.max() < 80
    assert [len(p) for p in leaf.natural_partition] == [10] * 9
    assert estimate.stand_in("nosuch") is None


def test_estimate_times_a_dynamic_population_s_sessions_inside_its_sample(toy, monkeypatch):
    """Sessions of 20 rounds in a 40-round run: the 3-round timed sample would be refused
    (no session would end); it gets sessions short enough to hold the initial model's pilot
    session and one after it, and the estimate ends with its table."""
    from wirelessfl.report import estimate
    from wirelessfl.report.estimate import estimate_table

    dyn = {"rounds": 40, "population": {"kind": "alternating", "groups": 2, "rounds_per_session": 20},
           "initial_model": {"rule": "proposed", "pilot_sessions": 1},
           "model": {"name": "linear"}, "algorithm": {"name": "fedavg"}}
    spec = {**TOY, "figures": {"dyn": {"kind": "curves", "x": ["round"], "series": {"FedAvg": {}}}}}
    spec = {**spec, "base": {**TOY["base"], **dyn}}
    (toy.parent / "experiments" / "toy" / "figures.yaml").write_text(yaml.safe_dump(spec))
    timed = []
    real = estimate._timed_job

    def timed_job(raw, folder, until):
        timed.append((raw["rounds"], raw["population"]["rounds_per_session"]))
        return real(raw, folder, until)

    monkeypatch.setattr(estimate, "_timed_job", timed_job)
    figs = load_figures("toy", "quick")
    rows = estimate.estimate(figs, toy, log=lambda _: None)
    assert rows[0].runs == 2 and rows[0].rounds == 80 and rows[0].seconds > 0 and not rows[0].note
    assert timed == [(3, 1)]  # 3 sessions of 1 round: the pilot session and two after it
    assert estimate_table(rows, "CPU").splitlines()[-1].startswith("total")


def test_a_planted_runs_link_in_a_report_folder_is_never_written_through(toy, tmp_path):
    regenerate("toy", "quick", toy, only=["tab"], quiet=True, log=lambda _: None)
    target = tmp_path / "elsewhere"
    target.mkdir()
    import shutil
    shutil.rmtree(toy / "runs")
    (toy / "runs").symlink_to(target, target_is_directory=True)
    assert main(["figures", "toy", "--only", "tab", "--out", str(toy), "--quiet"]) == 2
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("mode", [["--dry-run"], ["--estimate"], []])
def test_only_a_figure_outside_the_scale_is_one_line_not_an_empty_report(toy, capsys, mode):
    """A paper-only figure asked for at quick scale: before, --estimate gave a traceback,
    --dry-run printed nothing and a run wrote an empty report with exit 0."""
    spec = {**TOY, "figures": {**TOY["figures"], "big": {**TOY["figures"]["tab"],
                                                         "scales": ["paper"]}}}
    (toy.parent / "experiments" / "toy" / "figures.yaml").write_text(yaml.safe_dump(spec))
    assert main(["figures", "toy", "--only", "big", "--out", str(toy), "--quiet", *mode]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a figure of the quick scale" in err and "--scale paper" in err
    assert not toy.exists() or not (toy / "README.md").exists()


@pytest.mark.parametrize("mode", [["--dry-run"], ["--estimate"], []])
def test_an_unknown_dataset_is_refused_before_anything_runs(toy, capsys, mode):
    """Before, --dry-run and --estimate passed it and a run trained nothing with exit 0."""
    spec = {**TOY, "base": {**TOY["base"], "data": {**TOY["base"]["data"], "dataset": "nosuch"}}}
    (toy.parent / "experiments" / "toy" / "figures.yaml").write_text(yaml.safe_dump(spec))
    assert main(["figures", "toy", "--out", str(toy), "--quiet", *mode]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown dataset 'nosuch'" in err and "--plugin" in err


@pytest.mark.parametrize("flags, match", [(["--batch-runs", "10001"], "at most 10000"),
                                          (["--executor", "ray", "--batch-runs", "2"],
                                           "drop --batch-runs")])
def test_bad_grouping_flags_are_refused_before_a_report_folder_is_claimed(toy, capsys, flags,
                                                                          match):
    assert main(["figures", "toy", "--out", str(toy), "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err
    assert not toy.exists()


def test_estimate_skips_a_diverging_series_and_times_the_others(toy, monkeypatch):
    from wirelessfl.errors import TrainingDiverged
    from wirelessfl.report import estimate

    real = estimate._timed_job

    def timed_job(raw, folder, until):
        if raw["algorithm"].get("split") is False:  # the HFedAvg series diverges
            raise TrainingDiverged("round 1: the training loss is nan")
        return real(raw, folder, until)

    monkeypatch.setattr(estimate, "_timed_job", timed_job)
    (est,) = estimate.estimate(load_figures("toy", "quick", only=["curves"]), toy,
                               log=lambda _: None)
    assert est.seconds > 0 and "diverged" in est.note and "HFedAvg" in est.note


def test_every_figure_is_written_as_png_pdf_and_svg_in_either_style(toy):
    """PNG for the README, PDF and SVG (text kept as text) for a paper; ``paper`` style: panels
    3.5 in wide and no title in the image (the README's caption has it); ``report``: titled."""
    from wirelessfl.report.renderers import figure_style

    regenerate("toy", "quick", toy, only=["curves"], quiet=True, log=lambda _: None)
    assert (toy / "curves.pdf").read_bytes().startswith(b"%PDF")
    svg = (toy / "curves.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<text" in svg  # fonts as text, not paths
    titled = "HIST" in svg and "quick scale" in svg
    readme = (toy / "README.md").read_text()
    assert "`curves.pdf`, `curves.svg`" in readme and "quick scale" in readme
    regenerate("toy", "quick", toy, only=["curves"], quiet=True, log=lambda _: None,
               style="paper")
    paper = (toy / "curves.svg").read_text()
    assert titled and "quick scale" not in paper  # the caption is the README's alone
    width = float(paper.split('width="', 1)[1].split("pt", 1)[0]) / 72  # two panels
    assert width == pytest.approx(2 * 3.5, rel=0.02)
    with pytest.raises(ValueError, match="report, paper"):
        with figure_style("poster"):
            pass
    regenerate("toy", "quick", toy, only=["curves"], quiet=True, log=lambda _: None,
               title=False)  # the report's wide panels, its title in the caption alone
    bare = (toy / "curves.svg").read_text()
    assert "quick scale" not in bare and "quick scale" in (toy / "README.md").read_text()
    assert float(bare.split('width="', 1)[1].split("pt", 1)[0]) / 72 > 2 * 3.5 * 1.2


def test_panels_of_one_column_share_their_y_axis():
    """One quantity a column: its panels share the y-axis, columns keep their own."""
    import matplotlib.pyplot as plt

    from wirelessfl.report.renderers import _figure

    f, ax = _figure(2, 2)
    ax[0][0].plot([0, 1], [0, 1])
    ax[1][0].plot([0, 1], [0, 5])
    ax[0][1].plot([0, 1], [0, 100])
    assert ax[0][0].get_ylim() == ax[1][0].get_ylim() != ax[0][1].get_ylim()
    plt.close(f)


def test_final_tables_leave_out_what_a_link_does_not_measure_and_say_why():
    """A NaN ``also`` value (aircomp_mse of a TDMA run) is left out, not printed as nan; an
    accuracy no seed has is "—"; a setting without runs says so."""
    from wirelessfl.report.tables import final_markdown

    class Fig:
        title, spec = "t", {"also": ["aircomp_mse", "dropped_clients"]}

    nan = float("nan")
    rows = [{"panel": "air", "series": "FedAvg", "sweep": "", "final_accuracy_mean": 0.75,
             "final_accuracy_std": 0.01, "aircomp_mse": 0.5, "dropped_clients": nan},
            {"panel": "tdma", "series": "FedAvg", "sweep": "", "final_accuracy_mean": nan,
             "final_accuracy_std": nan, "aircomp_mse": nan, "dropped_clients": 3.0},
            {"panel": "tdma", "series": "FedProx", "sweep": "", "final_accuracy_mean": 0.7,
             "final_accuracy_std": 0.0, "aircomp_mse": nan, "dropped_clients": 0.0}]
    text = final_markdown(Fig(), rows, 2)
    assert "nan" not in text
    assert "| FedAvg | 75.00 ± 1.00; aircomp_mse 0.5 | —; dropped_clients 3 |" in text
    assert "| FedProx | no run here | 70.00 ± 0.00; dropped_clients 0 |" in text
    assert "where its runs measure it" in text


def test_a_user_experiments_folder_adds_to_the_shipped_ones_and_clashes_are_one_line(
        tmp_path, monkeypatch, capsys):
    """``WIRELESSFL_EXPERIMENTS`` (two folders here) adds presets and papers: the shipped ones
    stay (``fedavg_fmnist``, HIST's figures); a name defined twice is one line, exit 2."""
    from wirelessfl.cli import main

    mine, more = tmp_path / "mine", tmp_path / "more"
    (mine / "toy").mkdir(parents=True)
    (mine / "toy" / "figures.yaml").write_text(yaml.safe_dump(TOY, sort_keys=False))
    more.mkdir()
    (more / "my_run.yaml").write_text(yaml.safe_dump(TOY["base"]))
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", f"{mine}{os.pathsep}{more}")
    presets = list_presets()
    assert {"my_run", "fedavg_fmnist"} <= set(presets)
    assert load_figures("toy", "quick") and load_figures("hist", "quick", only=["fig3"])
    assert main(["list"]) == 0 and "my_run" in capsys.readouterr().out
    (more / "fedavg_fmnist.yaml").write_text(yaml.safe_dump(TOY["base"]))  # a shipped name
    assert main(["list"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "defined twice" in err and "fedavg_fmnist" in err
    (more / "fedavg_fmnist.yaml").unlink()
    (more / "hist").mkdir()
    (more / "hist" / "figures.yaml").write_text(yaml.safe_dump(TOY, sort_keys=False))
    assert main(["figures", "hist", "--dry-run", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "two folders" in err


def test_the_guide_s_worked_figure_loads_at_both_scales(tmp_path, monkeypatch):
    """The user's figures.yaml of the running guide is a valid study (kept true by this test)."""
    guide = (Path(__file__).resolve().parents[1] / "docs/guide/running.md").read_text()
    start = guide.index("# ~/studies/mystudy/figures.yaml")
    (tmp_path / "mystudy").mkdir()
    (tmp_path / "mystudy" / "figures.yaml").write_text(guide[start:guide.index("```", start)])
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(tmp_path))
    for scale, n in (("quick", 18), ("paper", 30)):
        (fig,) = load_figures("mystudy", scale)
        assert len(fig.runs) == n and fig.spec["claim"]["better"] == "over the air"


def test_a_figure_with_a_run_stopped_part_way_says_which_and_where(toy):
    """A run that stopped before its last round (diverged, or cut short) keeps its figure
    undrawn, and the README names the run and its last round instead of "run again"."""
    import shutil

    from wirelessfl.run.kinds import open_run
    from wirelessfl.run.shell import execute as run_execute

    figs = load_figures("toy", "quick", only=["tab"])
    regenerate("toy", "quick", toy, only=["tab"], quiet=True, log=lambda _: None)
    cut = figs[0].runs[0]
    folder = run_folder(toy, cut)
    shutil.rmtree(folder)
    run_execute(RunRecord(folder), open_run({**cut.raw, "name": "cut"}), quiet=True,
                until=lambda row: row["round"] >= 1)
    from wirelessfl.report.figures import render

    render(figs, toy)  # (the figures command renders so after training what it can)
    readme = (toy / "README.md").read_text()
    assert "Not drawn: 1 of its runs stopped before their last round" in readme
    assert f"{cut.label} (stopped after round 1)" in readme


def test_a_final_accuracy_figure_draws_diverged_runs_as_diverged(tmp_path, monkeypatch):
    """FedAvg at a learning rate of 1e6 diverges in both seeds: its runs are recorded as
    diverged (round and reason), not retrained by the next regeneration, left out of the
    means (the cell says "diverged: 2 of 2 seeds"), marked in the plot's legend, and the
    claim at that value has no seeds; the other sweep value is drawn and checked as usual."""
    spec = {"base": {**TOY["base"], "algorithm": {"name": "fedavg"}, "rounds": 3},
            "scales": {"quick": {"seeds": [0, 1], "overrides": {}}},
            "figures": {"lr": {
                "kind": "final_accuracy", "last": 1,
                "claim": {"finding": "more steps help", "better": "more", "than": "fewer",
                          "measure": "final_accuracy", "lower": False},
                "series": {"more": {"local.steps": 4}, "fewer": {}},
                "sweep": {"key": "local.lr", "label": "lr", "values": [0.05, 1.0e6]}}}}
    root = tmp_path / "experiments"
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "figures.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(root))
    out = tmp_path / "report"
    lines = []
    regenerate("toy", "quick", out, quiet=True, log=lines.append)
    (fig,) = load_figures("toy", "quick")
    gone = [r for r in fig.runs if RunRecord(run_folder(out, r)).diverged()]
    assert {r.seed for r in gone} == {0, 1} and {r.raw["local"]["lr"] for r in gone} == {1e6}
    record = RunRecord(run_folder(out, gone[0])).diverged()
    assert record["round"] >= 1 and "NaN" in record["reason"]
    assert missing_runs([fig], out) == []  # not retrained
    table = {(r["series"], r["lr"]): r for r in csv.DictReader(open(out / "lr.csv"))}
    assert table[("fewer", "1000000.0")]["diverged"] == "2"
    assert table[("fewer", "0.05")]["diverged"] == "0"
    assert float(table[("fewer", "0.05")]["final_accuracy_mean"]) > 0
    readme = (out / "README.md").read_text()
    assert "Not drawn" not in readme and "diverged: 2 of 2 seeds" in readme
    assert "lr=0.05: more" in readme and (out / "lr.png").is_file()
    assert "diverged in 2 of more's and 2 of fewer's seeds" in readme
    lines.clear()
    regenerate("toy", "quick", out, quiet=True, log=lines.append)  # nothing to train again
    assert any(": 0 of 8 runs to do" in line for line in lines), lines


def test_a_transition_table_draws_diverged_runs_as_diverged(tmp_path, monkeypatch):
    """A panel whose runs diverge (lr 10⁶) leaves its cells without a mean and says so; the
    other panel's cells are drawn from their runs as usual."""
    import copy

    spec = copy.deepcopy(SESSIONS_TOY)
    spec["figures"] = {"tab": {**spec["figures"]["tab"], "panels": [
        {"A": {}}, {"FedAvg": {"algorithm": {"name": "fedavg"}},
                    "Hot": {"algorithm": {"name": "fedavg"}, "local.lr": 1.0e6}}]}}
    root = tmp_path / "experiments"
    (root / "dyn").mkdir(parents=True)
    (root / "dyn" / "figures.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(root))
    out = tmp_path / "report"
    regenerate("dyn", "quick", out, quiet=True, log=lambda _: None)
    table = {r["setting"]: r for r in csv.DictReader(open(out / "tab.csv"))}
    assert table["A Hot"]["Proposed T1 diverged"] == "2/2"
    assert table["A FedAvg"]["Proposed T1 diverged"] == "0/2"
    assert math.isfinite(float(table["A FedAvg"]["Proposed T1"]))
    text = (out / "tab.md").read_text()
    assert "— (diverged: 2 of 2 seeds)" in text and "Not drawn" not in (out / "README.md").read_text()


def _killed_worker(run, sample_rounds):
    """An estimate's worker killed while it times a setting (as the out-of-memory killer does)."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow  # other processes started, killed or signalled: CI's second step
def test_an_isolated_estimate_survives_a_worker_killed_by_the_system(toy):
    """Settings timed in a worker process: the same figures, runs and rounds as in-process;
    a worker killed mid-setting makes that setting a note and the next gets a new worker."""
    from wirelessfl.report import estimate

    figs = load_figures("toy", "quick", only=["tab"])
    (inside,) = estimate.estimate(figs, toy, log=lambda _: None)
    logs: list[str] = []
    (isolated,) = estimate.estimate(figs, toy, log=logs.append, isolate=True)
    assert (isolated.runs, isolated.rounds) == (inside.runs, inside.rounds)
    assert isolated.seconds > 0 and any(m.startswith("  timed") for m in logs)
    run = figs[0].runs[0]
    with estimate.Isolated(2, work=_killed_worker) as timer:
        note = timer(run, logs.append)
        assert "died" in note and "out of memory" in note and timer.pool is None
        timer.work = estimate._time_in_worker  # the next setting: a new worker
        assert isinstance(timer(run, logs.append), estimate._Cost)
        assert timer.pool is not None
    assert timer.pool is None  # stopped at the block's end


def test_a_process_warms_up_once_before_it_times_its_first_setting(toy, monkeypatch):
    """The first setting a process times is probed once untimed first (its start-up is not a
    setting's cost); later settings, and a second estimate in the process, are not."""
    from wirelessfl.report import estimate as est

    monkeypatch.setattr(est, "_WARM", False)
    probes = []
    real = est.probe_setting
    monkeypatch.setattr(est, "probe_setting",
                        lambda run, folder: probes.append(folder.name) or real(run, folder))
    figs = load_figures("toy", "quick", only=["tab"])
    est.estimate(figs, toy, log=lambda _: None)
    first = list(probes)
    assert first[0] == "warm" and first.count("warm") == 1 and len(first) >= 2
    est.estimate(figs, toy, log=lambda _: None)
    assert probes[len(first):].count("warm") == 0


def test_the_estimate_counts_the_command_s_own_start_up_in_its_total():
    """The real command pays its start (imports, PyTorch) again: a line of its own, in the total."""
    from wirelessfl.report.estimate import Estimate, estimate_table

    rows = [Estimate("fig", 2, 40, 3600.0, "", 0, 0)]
    without, with_start = estimate_table(rows, "CPU"), estimate_table(rows, "CPU", startup=360.0)
    assert "start-up" not in without and float(without.splitlines()[-1].split()[3]) == 1.0
    line = next(x for x in with_start.splitlines() if x.startswith("start-up"))
    assert float(line.split()[1]) == 0.1 and "360.0 s" in line
    assert float(with_start.splitlines()[-1].split()[3]) == 1.1
