"""The GPU suite's CPU check: every part runs (or says why not) and the JSON has its schema."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # a benchmark harness end to end (~10-25 s): python -m pytest -m slow
def test_the_suite_runs_quick_on_the_cpu_without_solver_or_ray_imports(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py"), "--out",
                           str(tmp_path), "--device", "cpu", "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_suite.json").read_text())
    assert (tmp_path / "gpu_suite.json").stat().st_size < 2**20
    assert list(report["parts"])[:4] == ["presets", "cuda_tests", "engine", "profile"]
    assert set(report["parts"]) >= {"presets", "cuda_tests", "engine", "profile", "lockstep",
                                   "figure", "placement", "rules", "resnet", "lora", "precision",
                                   "compile", "lowrank", "conv"}  # a part added later may join
    assert all(p["ok"] for p in report["parts"].values())
    assert report["forbidden_imports"] == []     # no cvxpy, Gurobi or Ray in its process
    eng = report["parts"]["engine"]["result"]["workloads"][0]
    assert {"loop", "batched", "batched_speedup"} <= set(eng)
    assert eng["batched"]["seconds_per_round"] > 0
    compiled = report["parts"]["compile"]["result"]["rounds"]  # the engine's compile, traced
    assert [r["compile"] for r in compiled] == ["off", "default"]
    assert compiled[1]["gap_to_eager"] < 1e-5
    assert "| engine | yes |" in (tmp_path / "gpu_suite.md").read_text()
    table = report["parts"]["presets"]["result"]["presets"]    # the presets table, quick
    assert {e["preset"] for e in table} == {"quickstart", "heterofl_fmnist"}
    assert all(e["runs"] and e["learns"] for e in table), table
    group = report["parts"]["lockstep"]["result"]["groups"]   # a group of 3 runs, 2 chunkings
    assert [g["runs"] for g in group] == [3, 3] and all(g["speedup_per_run"] > 0 for g in group)
    assert group[0]["final_accuracy_mean"] == pytest.approx(group[1]["final_accuracy_mean"],
                                                            abs=1e-6)  # chunking: same numbers
    low = report["parts"]["lowrank"]["result"]  # off stacks, on keeps fc1 low-rank: same model
    assert low["modes"]["off"]["low_ranked"] == 0 and low["modes"]["on"]["low_ranked"] >= 1
    assert low["relative_gap"] < 1e-5 and low["speedup"] > 0
    prof = report["parts"]["profile"]["result"]["rounds"][0]
    assert prof["aten_calls"] > 0 and prof["kernel_launches"] == 0   # no GPU: no launches


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("rule", [{"name": "fedprox", "mu": 0.1}, {"name": "scaffold"},
                                  {"name": "moon"}, {"name": "fadamgc"}])
def test_classic_rules_batched_on_cuda_match_the_cpu(rule):
    from wirelessfl.run.kinds import open_run

    raw = {"seed": 1, "rounds": 1, "engine": "batched", "algorithm": rule,
           "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 30},
           "model": {"name": "fcnn", "options": {"hidden": 8}},
           "local": {"lr": 0.05, "batch_size": 10, "steps": 2}}
    finals = []
    for device in ("cpu", "cuda"):
        exp = open_run({**raw, "device": device}).exp
        state, _ = exp.algorithm.apply(exp.initial_state())
        finals.append({k: v.cpu() for k, v in state.params.items()})
    for k in finals[0]:
        torch.testing.assert_close(finals[0][k], finals[1][k], rtol=1e-4, atol=1e-5)
