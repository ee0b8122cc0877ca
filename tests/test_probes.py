"""Hostile input found by the probe set (``benchmarks/probes.py``, issue 32): each case once."""

import json
import os
import shutil

import numpy as np
import pytest
import torch
import yaml

from wirelessfl.cli import main
from wirelessfl.errors import TrainingDiverged

RAW = {"name": "tiny", "seed": 5, "rounds": 2,
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 40},
       "model": {"name": "fcnn", "options": {"hidden": 8}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 2}}


def _tree():
    return {"w": torch.ones(3, 4), "b": torch.zeros(3)}


def _mlp():
    from wirelessfl.models import build_model

    m = build_model("mlp", (1, 28, 28), 10, seed=0)
    return m.unit_groups, m.params()


def _cases():
    from channels.aircomp import AirCompCell
    from channels.rates import tdma_rate
    from channels.rayleigh import simo_rayleigh
    from channels.validation import check_memory
    from solvers import beamforming, latency, scheduling, uplink
    from wirelessfl.algorithms.dynamic.initial_model import SessionStore, blend, distances, fingerprint
    from wirelessfl.algorithms.rafed import masks
    from wirelessfl.net.compression import compress, relative_error
    from wirelessfl.server.optimizers import ServerOptimizer
    from wirelessfl.server.population import AlternatingGroups, PopulationConfig, make_population
    from wirelessfl.server.submodel import Submodel, random_disjoint_selections

    a = _tree()
    ints = {"w": torch.ones(3, 4, dtype=torch.long), "b": torch.zeros(3)}
    groups, like = _mlp()
    sel = {"fc1": torch.arange(50), "fc2": torch.arange(100)}
    sub = Submodel(groups, sel, like)
    h = simo_rayleigh((2,), 4, 3, np.random.default_rng(1))
    beam = h[:, 0, :]
    rng = np.random.default_rng(0)
    store = SessionStore()
    store.add(a)

    def store_add(t):
        store.add(t)

    return [
        (lambda: store_add({"w": torch.ones(3, 4)}), "final"),
        (lambda: store_add(ints), "dtype"),
        (lambda: SessionStore().average(), "no model"),
        (lambda: blend([a, [1, 2]], torch.tensor([0.5, 0.5])), "models"),
        (lambda: fingerprint(a, a, "w"), "trainable"),
        (lambda: distances(a, []), "stored"),
        (lambda: Submodel(groups, sel, {k: v for k, v in like.items() if k != "fc2.weight"}),
         "like"),
        (lambda: sub.slice({**like, "fc1.bias": like["fc1.bias"][:7]}), "params"),
        (lambda: sub.scatter(like, {**sub.slice(like), "fc1.bias": like["fc1.bias"]}), "sub"),
        (lambda: sub.mask({**like, "fc1.bias": like["fc1.bias"] * float("nan")}), "like"),
        (lambda: random_disjoint_selections(groups, [5, 5], rng), "sizes"),
        (lambda: random_disjoint_selections(groups, [[100, 100], [100, 100]], None), "rng"),
        (lambda: compress(ints, "quantize", gen=None), "floating"),
        (lambda: compress(a, "zip", gen=None), "operator"),
        (lambda: relative_error(a, {"w": torch.ones(3, 4)}), "compressed"),
        (lambda: ServerOptimizer("sgdx"), "name"),
        (lambda: ServerOptimizer("sgd").step(a, ints, None), "dtype"),
        (lambda: ServerOptimizer("adam").step(a, a, {"m": 1}), "state"),
        (lambda: ServerOptimizer("sgd").step({**a, "b": a["b"] * float("nan")}, a, None), "params"),
        (lambda: masks.kept_units(groups[0], "0.5"), "ratio"),
        (lambda: masks.draw("random", groups, [0.5], 0, None), "rng"),
        (lambda: masks.draw("random", groups, [1.5], 0, rng), "ratios"),
        (lambda: masks.parameter_fraction(groups, {"fc1.weight": (200, 784)}, 0.5), "shapes"),
        (lambda: masks.ratio_for_fraction(groups, {k: v.shape for k, v in like.items()}, None),
         "fraction"),
        (lambda: make_population(PopulationConfig(), 0), "num_clients"),
        (lambda: uplink.deadline_outage(np.ones((1, 4)) + 1j, np.ones((1, 4)), 1.0), "real"),
        (lambda: uplink.deadline_outage(np.ones((1, 4)), np.ones(3), 1.0), "payload_bits"),
        (lambda: uplink.aircomp_mse(h, snr_db=20.0, selection=np.full((2, 4), 0.5)), "selection"),
        (lambda: uplink.aircomp_mse(h, snr_db=20.0, beam=np.zeros((2, 3))), "beam"),
        (lambda: scheduling.update_average(np.ones(4), np.ones(4), np.full(4, 0.5)), "mask"),
        (lambda: scheduling.update_age(np.ones(4), np.ones(3, bool)), "mask"),
        (lambda: scheduling.schedule(np.ones((1, 4)), 2, "proportional_fair",
                                     average_bps=np.ones(3)), "average_bps"),
        (lambda: simo_rayleigh((2,), 4, 3, rng, gain=np.ones(3)), "gain"),
        (lambda: AirCompCell(h, beam).receive(np.ones((2, 3, 5)), rng), "delta"),
        (lambda: AirCompCell(h, beam).estimate(np.ones((2, 4, 5)), None), "rng"),
        (lambda: beamforming.solve(h, tolerance=3), "unknown option"),
        (lambda: beamforming.working_bytes((-1, 4, 3)), "shape"),
        (lambda: beamforming.working_bytes((2, 4, 3), "magic"), "method"),
        (lambda: latency.full_model_latency_oma(np.ones((2, 3)), np.ones((3, 2)), local_steps=1,
                                                cycles_per_step=1.0, model_bits=1.0), "rate_bps"),
        (lambda: latency.full_model_latency_aircomp(np.ones((2, 3)), local_steps=1,
                                                    cycles_per_step=1.0, num_params=10,
                                                    subcarrier_hz=1e8), "subcarrier_hz"),
        (lambda: latency.edge_round_latency(np.ones(2), [5, 50], 10), "sizes"),
        # issue 57, item 9: API edges
        (lambda: uplink.aircomp_mse(h, snr_db=20.0, selection=np.zeros((2, 4), bool)),
         "selection"),
        (lambda: uplink.aircomp_mse(h, snr_db=20.0, weights=np.zeros((2, 4))), "weights"),
        (lambda: scheduling.schedule(np.ones((1, 4)), 2, "proportional_fair",
                                     average_bps=np.full((1, 4), 1e-320)), "average_bps"),
        (lambda: AirCompCell(h, beam).update_variance(-5, 0.1), "num_entries"),
        (lambda: AirCompCell(h, beam).update_variance(5, float("nan")), "lr"),
        (lambda: AlternatingGroups(groups=[[0], [1]], rounds_per_session=5, order=[0, 5]), "order"),
        (lambda: AlternatingGroups(groups=[[], [1]], rounds_per_session=5), "groups"),
        (lambda: tdma_rate(h, snr=np.ones(7)), "snr"),
        (lambda: check_memory(float("nan"), "a request", "smaller"), "estimate"),
        (lambda: latency.full_model_latency_oma(np.ones((0, 3)), np.ones((0, 3)), local_steps=1,
                                                cycles_per_step=1.0, model_bits=1.0), "cpu_hz"),
    ]


def test_an_empty_tensor_is_compressed_to_itself():
    from wirelessfl.net.compression import compress, quantize_bound

    got = compress({"w": torch.ones(0), "b": torch.ones(3)}, "quantize", gen=torch.Generator())
    assert got["w"].numel() == 0 and got["b"].shape == (3,)
    assert quantize_bound({"w": torch.ones(0)}, 4) == 0.0


@pytest.mark.parametrize("case", range(51))
def test_each_bad_argument_is_one_named_error(case):
    call, match = _cases()[case]
    with pytest.raises((ValueError, TypeError, TrainingDiverged), match=match) as err:
        call()
    assert "\n" not in str(err.value)


def test_valid_edge_inputs_still_work():
    from solvers import latency, mask_sizes
    from wirelessfl.algorithms.rafed import masks
    from wirelessfl.server.submodel import Submodel

    groups, like = _mlp()
    assert Submodel(groups, {"fc1": torch.arange(5)}, like).slice(like)["fc2.bias"].numel() == 200
    assert masks.draw("random", groups, [], 0, np.random.default_rng(0)) == []
    assert not mask_sizes.solve(np.ones((2, 3)), 0).sizes.any()
    assert latency.uniform_sizes(0, 4).tolist() == [0, 0, 0, 0]


def _cli(args, capsys):
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


@pytest.fixture
def finished(tmp_path, capsys):
    cfg = tmp_path / "t.yaml"
    cfg.write_text(yaml.safe_dump(RAW))
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    return cfg, out


def test_resume_into_a_folder_without_a_run_writes_nothing(tmp_path, capsys, finished):
    cfg, _ = finished
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("x")
    code, err = _cli(["run", str(cfg), "--resume", "--out", str(folder)], capsys)
    assert code == 2 and "holds no run" in err
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]  # no .lock left


@pytest.mark.parametrize("how", ["link", "damaged"])
def test_a_linked_or_damaged_meta_json_is_refused_on_resume(tmp_path, capsys, finished, how):
    cfg, out = finished
    victim = tmp_path / "victim.json"
    victim.write_text(json.dumps({"seed": 5}))
    (out / "meta.json").unlink()
    if how == "link":
        os.symlink(victim, out / "meta.json")
    else:
        (out / "meta.json").write_text("{")
    code, err = _cli(["run", str(cfg), "--resume", "--out", str(out), "--quiet"], capsys)
    assert code == 2 and err.count("\n") == 1 and "meta.json" in err, err


def test_derived_files_are_rewritten_by_a_resume(capsys, finished):
    cfg, out = finished
    want = (out / "metrics.csv").read_text()
    (out / "metrics.csv").write_text("garbage")
    (out / "summary.json").write_text("[")
    assert main(["run", str(cfg), "--resume", "--out", str(out), "--quiet"]) == 0
    assert (out / "metrics.csv").read_text().splitlines()[0] == want.splitlines()[0]
    assert json.loads((out / "summary.json").read_text())["rounds"] == 2


def test_plot_of_rows_without_test_accuracy_is_one_line(tmp_path, capsys, finished):
    _, out = finished
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    rows = [json.loads(s) for s in (copy / "metrics.jsonl").read_text().splitlines()]
    (copy / "metrics.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if k != "test_accuracy"}) + "\n" for r in rows))
    code, err = _cli(["plot", str(copy), "--out", str(tmp_path / "p.png")], capsys)
    assert code == 2 and "test_accuracy" in err and err.count("\n") == 1


def test_an_empty_config_and_zero_local_steps_are_refused(tmp_path, capsys, finished):
    cfg, _ = finished
    (tmp_path / "empty.yaml").write_text("")
    code, err = _cli(["run", str(tmp_path / "empty.yaml"), "--out", str(tmp_path / "e")], capsys)
    assert code == 2 and "empty" in err and not (tmp_path / "e").exists()
    assert not (tmp_path / "runs").exists()
    code, err = _cli(["run", str(cfg), "--set", "local.steps=0", "--out", str(tmp_path / "z")],
                     capsys)
    assert code == 2 and "steps" in err


@pytest.mark.parametrize("body, match", [
    ('{"sentence": "a", "label": 7}\n', "outside the 2 classes"),
    ("", "no rows"),
    ("sentence\tlabel\n", "no rows"),
])
def test_text_rows_out_of_range_or_missing_are_refused(tmp_path, body, match):
    from wirelessfl.data.datasets import DataFileError
    from wirelessfl.data.text import read_split

    t = tmp_path / "SST-2"
    t.mkdir()
    (t / ("train.jsonl" if body.startswith("{") else "train.tsv")).write_text(body)
    with pytest.raises(DataFileError, match=match):
        read_split("sst2", tmp_path, ("train",))


@pytest.mark.parametrize("garbage", [True, False])
def test_gpt2_weights_that_are_garbage_or_foreign_are_one_error(tmp_path, garbage):
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from safetensors.torch import save_file

    from wirelessfl.models import build_model

    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8, "vocab_size": 50,
        "n_positions": 16, "bos_token_id": 0, "eos_token_id": 0}))
    if garbage:
        (tmp_path / "model.safetensors").write_bytes(os.urandom(300))
    else:
        save_file({"wte.weight": torch.zeros(7, 3)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="model.safetensors cannot be loaded") as err:
        build_model("gpt2_lora", (16,), 2, seed=0, model_dir=str(tmp_path))
    assert "\n" not in str(err.value)


def test_the_probe_set_runs_and_every_probe_is_clean(tmp_path):
    """Issue 71: the project's own probe set (benchmarks/probes.py, 785 hostile inputs) runs
    to its end in the default suite (about 20-35 s) and fails loudly: every probe is clean
    or a correct edge answer, and no probe executed code."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "probes.py"), "--json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["cases"] >= 780 and report["code_execution"] == 0
    assert report["not_clean"] == [], report["not_clean"][:10]
    assert set(report["verdicts"]) <= {"clean", "ok"}
