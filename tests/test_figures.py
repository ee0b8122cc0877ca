"""Figure regeneration: runs shared and reused, outputs consistent with the run records."""

import csv
import math

import pytest
import yaml

from wirelessfl.cli import main
from wirelessfl.config import ConfigError, list_presets
from wirelessfl.figures import (
    all_done_time,
    load_figures,
    mean_accuracy_steps,
    mean_accuracy_time,
    missing_runs,
    regenerate,
    run_folder,
    to_target,
)
from wirelessfl.records import RunRecord

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


@pytest.fixture
def toy(tmp_path, monkeypatch):
    root = tmp_path / "experiments"
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "figures.yaml").write_text(yaml.safe_dump(TOY, sort_keys=False))
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(root))
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
        assert {"fig3", "fig4", "fig5", "fig6", "fig6c", "fig7a", "fig7b", "fig7c", "table1",
                "table2"} == {f.name for f in figs}
    fedast = {f.name: f for f in load_figures("fedast", "quick")}
    assert {"e1", "e4", "e4_curves", "e7_pair", "e10"} == set(fedast)
    assert {r.key for r in fedast["e4"].runs} == {r.key for r in fedast["e4_curves"].runs}


def test_multitask_times_to_target_on_hand_made_rows():
    rows = [{"task": "a", "sim_time": 1.0, "test_accuracy": 0.8},
            {"task": "b", "sim_time": 2.0, "test_accuracy": 0.5},
            {"task": "a", "sim_time": 3.0, "test_accuracy": 0.9},
            {"task": "b", "sim_time": 4.0, "test_accuracy": 0.75}]
    times, means = mean_accuracy_steps(rows)
    assert times.tolist() == [1, 2, 3, 4] and means.tolist() == pytest.approx([0.4, 0.65, 0.7, 0.825])
    assert mean_accuracy_time(rows, 0.7) == 3.0 and math.isnan(mean_accuracy_time(rows, 0.9))
    assert all_done_time(rows, {"a": 0.85, "b": 0.7}) == 4.0
    assert math.isnan(all_done_time(rows, {"a": 0.95, "b": 0.7}))
