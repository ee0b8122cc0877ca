"""Hostile input: no code runs from files, every bad input is one clean error, run folders
are never corrupted, overwritten or left half-written (issue 16)."""

import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from channels import aircomp, units
from solvers import beamforming
from wirelessfl.algorithms.fedast.snapshot import SnapshotError, decode
from wirelessfl.cli import main
from wirelessfl.data import load_dataset
from wirelessfl.data.partition import _LabelPools, _largest_remainder
from wirelessfl.errors import ConfigError, RunFolderError, TrainingDiverged
from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.multitask import resolve_multitask
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob

RAW = {"name": "tiny", "seed": 5, "rounds": 3,
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 40},
       "model": {"name": "fcnn", "options": {"hidden": 8}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 2}}
MULTI = {"tasks": ["synthetic_linear", "synthetic_linear"], "seed": 1, "device": "cpu",
         "pool": {"clients": 20, "available": 10},
         "method": {"name": "fedast", "requests": 8, "ratio": 4}, "max_rounds": 6}


class Payload:
    """A pickle that writes a file when loaded (stands in for arbitrary code)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _cli(args, capsys):
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    return code, err


def _one_line(code, err, match=""):
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("wirelessfl: error:"), err
    assert "Traceback" not in err and match in err, err


def _run(tmp_path, name="r", raw=RAW):
    out = tmp_path / name
    run_job(open_run(raw), out, quiet=True)
    return out


# --------------------------------------------------------------------------- no code from files


def test_checkpoint_with_code_is_refused_not_executed(tmp_path, capsys):
    out = _run(tmp_path)
    marker = tmp_path / "pwned"
    torch.save({"params": Payload(marker), "round": 1}, out / "checkpoint.pt")
    code, err = _cli(["run", "--resume", "--out", str(out), "--quiet"], capsys)
    _one_line(code, err, "cannot be read safely")
    assert not marker.exists()


def test_checkpoint_saved_on_a_gpu_loads_on_the_cpu(tmp_path, monkeypatch):
    """A checkpoint whose tensors are tagged as CUDA storage resumes on a CPU-only machine."""
    import torch.serialization as ser

    out = _run(tmp_path)
    ckpt = RunRecord(out).load_checkpoint()
    monkeypatch.setattr(ser, "location_tag", lambda storage: "cuda:0")  # as if saved on a GPU
    torch.save(ckpt, out / "checkpoint.pt")
    monkeypatch.undo()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(out / "checkpoint.pt", weights_only=True)  # what a naive load does
    loaded = RunRecord(out).load_checkpoint()
    assert all(v.device.type == "cpu" for v in loaded["params"].values())
    (out / "summary.json").unlink()
    summary = run_job(open_run(RAW), out, resume=True, quiet=True)
    assert summary["rounds"] == RAW["rounds"]  # the runner resumed from it



def test_fedast_snapshot_is_plain_data_and_refuses_code(tmp_path, capsys):
    out = tmp_path / "m"
    run_job(open_run(resolve_multitask(MULTI), checkpoint_every_s=0), out, quiet=True)
    snap = torch.load(out / "checkpoint.pt", weights_only=True)  # loads without any allow-list
    held = snap["sim"]["results"]["__items__"]  # trained, not yet consumed: kept (max_batch)
    assert 0 < len(held) <= 64 and all(isinstance(v["fc.weight"], torch.Tensor) for _, v in held)
    with pytest.raises(SnapshotError, match="unknown type"):
        decode({"__obj__": "os.system", "state": {}})
    marker = tmp_path / "pwned"
    torch.save({"sim": Payload(marker), "rows": 0, "wall_s": 0.0}, out / "checkpoint.pt")
    code, err = _cli(["run", "--resume", "--out", str(out), "--quiet"], capsys)
    _one_line(code, err, "cannot be read safely")
    assert not marker.exists()


def test_cifar_reader_runs_no_code_and_names_bad_files(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    marker = tmp_path / "pwned"
    for f in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        (folder / f).write_bytes(pickle.dumps(Payload(marker), protocol=2))
    with pytest.raises(ValueError, match="data_batch_1 is not a CIFAR python batch"):
        load_dataset("cifar10", data_dir=tmp_path)
    assert not marker.exists()
    good = {b"data": np.zeros((4, 3072), np.uint8), b"labels": [0, 1, 2, 3]}
    for f in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        (folder / f).write_bytes(pickle.dumps(good, protocol=2))
    from wirelessfl.data.datasets import _load_cifar_raw

    _load_cifar_raw.cache_clear()
    splits = load_dataset("cifar10", data_dir=tmp_path)
    assert len(splits.train) == 20 and len(splits.test) == 4
    (folder / "test_batch").write_bytes(b"\x80\x02garbage")
    _load_cifar_raw.cache_clear()
    with pytest.raises(ValueError, match="test_batch is not a CIFAR python batch"):
        load_dataset("cifar10", data_dir=tmp_path)


def test_damaged_gzip_idx_is_one_line(tmp_path, capsys):
    for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (tmp_path / f"{stem}.gz").write_bytes(b"\x1f\x8b\x08\x00truncated")
    code, err = _cli(["run", "quickstart", "--set", "data.dataset=mnist", "--set",
                      "data.partition=iid", "--set", f"data.data_dir={tmp_path}", "--out",
                      str(tmp_path / "never")], capsys)
    _one_line(code, err, "damaged or truncated")
    assert not (tmp_path / "never").exists()


# --------------------------------------------------------------------------- every bad input one line

BAD_SETS = [
    (["name=../../x"], "name must be"), (["name=/tmp/abs"], "name must be"),
    (["local.lr=nan"], "local.lr"), (["local.lr=.inf"], "local.lr"), (["local.lr=-1"], "local.lr"),
    (["local.momentum=1.5"], "local.momentum"), (["local.weight_decay=-1"], "weight_decay"),
    (["local.steps=1e9"], "local.steps"), (["rounds=0"], "rounds"), (["rounds=-3"], "rounds"),
    (["data.alpha=-1"], "data.alpha"), (["data.samples_per_client=0"], "samples_per_client"),
    (["data.num_clients=1000000", "data.samples_per_client=10000"], "GiB"),
    (["data.placement=gpu"], "data.placement"), (["data.tokenizer=/etc"], "data.tokenizer"),
    (["model.options.hidden=0"], "hidden"), (["model.options.hidden=100000000"], "hidden"),
    (["model.options.dropout=1.5"], "dropout"), (["seed=-1"], "seed"),
    (["local.betas=[0.9]"], "2 entries"), (["algorithm=[1,2]"], "algorithm"),
    ([".=3"], "names joined by dots"),
]


@pytest.mark.parametrize("sets,match", BAD_SETS)
def test_bad_values_are_one_line_before_any_write(tmp_path, capsys, sets, match):
    out = tmp_path / "never"
    args = ["run", "quickstart", "--out", str(out), "--quiet"]
    for s in sets:
        args += ["--set", s]
    code, err = _cli(args, capsys)
    _one_line(code, err, match)
    assert not out.exists()


BAD_MULTI = [
    ("pool.speed_shares=[0.5,0.5,0.5]", "sum to 1"), ("pool.clients=10000000", "pool.clients"),
    ("copies=1000", "copies"), ("method.requests=1000000", "requests"),
    ("max_time=.nan", "max_time"), ("max_rounds=0", "max_rounds"), ("pool.kappa=-1", "kappa"),
]


@pytest.mark.parametrize("item,match", BAD_MULTI)
def test_bad_multitask_values_are_one_line(tmp_path, capsys, item, match):
    out = tmp_path / "never"
    code, err = _cli(["run", "e4_fmnist_quick", "--set", item, "--out", str(out)], capsys)
    _one_line(code, err, match)
    assert not out.exists()


def test_exponent_numbers_parse():
    from wirelessfl.run.config import apply_overrides

    cfg = resolve(apply_overrides(RAW, ["local.lr=1e-3", "rounds=1e1"]))
    assert cfg.local.lr == 1e-3 and cfg.rounds == 10


def test_alias_bomb_is_refused_quickly(tmp_path, capsys):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi"))
    path = tmp_path / "bomb.yaml"
    path.write_text("model:\n  name: fcnn\n  options:\n    " + bomb.replace("\n", "\n    ")
                    .replace("    b:", "    b:").rstrip() + "\n")
    code, err = _cli(["run", str(path), "--out", str(tmp_path / "never")], capsys)
    _one_line(code, err, "expands to more than")
    assert len(err) < 400


def test_oserrors_are_one_line(tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("x")
    cases = [(["run", "quickstart", "--out", str(afile), "--quiet"], "is a file"),
             (["run", "--resume", "--out", str(tmp_path / "missing")], "holds no run"),
             (["run", ""], "name a preset"),
             (["figures", "hist", "--data-dir", str(tmp_path / "nonexistent")], "not a folder"),
             (["run", str(tmp_path)], "unknown preset")]
    for args, match in cases:
        code, err = _cli(args, capsys)
        _one_line(code, err, match)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_out_is_one_line(tmp_path, capsys):  # pragma: no cover - CI runs as root
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    code, err = _cli(["run", "quickstart", "--out", str(ro / "r"), "--quiet"], capsys)
    _one_line(code, err, "PermissionError")


def test_broken_preset_does_not_break_list(tmp_path, monkeypatch, capsys):
    (tmp_path / "good.yaml").write_text("description: fine\n")
    (tmp_path / "bad.yaml").write_text("a: [unclosed\n")
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(tmp_path))
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fine" in out and "unreadable" in out
    (tmp_path / "hist").mkdir()
    (tmp_path / "hist" / "h.yaml").write_text("description: a HIST preset\n")
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "general:" and "hist:" in lines       # grouped by paper
    assert lines[lines.index("hist:") + 1].split() == ["h", "a", "HIST", "preset"]


def test_multitask_never_evaluated_prints_a_summary(tmp_path, capsys):
    code = main(["run", "e4_fmnist_quick", "--set", "max_time=3", "--out", str(tmp_path / "m"),
                 "--quiet"])
    assert code == 0
    assert "never evaluated" in capsys.readouterr().out


def test_memory_hungry_requests_are_refused(tmp_path, capsys, monkeypatch):
    code, err = _cli(["beamform", "--cells", "10000000"], capsys)
    _one_line(code, err, "GiB")
    code, err = _cli(["masks", "--cells", "100000000"], capsys)
    _one_line(code, err, "GiB")
    monkeypatch.setenv("WIRELESSFL_MAX_BYTES", "1e6")
    code, err = _cli(["run", "quickstart", "--set", "model.options.hidden=100000", "--out",
                      str(tmp_path / "never")], capsys)
    _one_line(code, err, "GiB")


@pytest.mark.parametrize("args,match", [
    (["masks", "--edge-rounds", "-3"], "positive integer"), (["masks", "--params", "0"], "positive"),
    (["masks", "--local-steps", "-3"], "positive"), (["masks", "--eps-th", "nan"], "finite"),
    (["beamform", "--snr-db", "inf"], "finite"), (["beamform", "--seed", "-1"], "integer >= 0"),
])
def test_solver_cli_options_are_checked(capsys, args, match):
    code, err = _cli(args, capsys)
    _one_line(code, err, match)


def test_solver_api_validates_its_arguments():
    from channels.aircomp import AirCompCell
    from channels.rayleigh import path_gain
    from solvers import beamforming, mask_sizes
    from solvers.latency import edge_round_latency, size_cap, uniform_sizes

    h = np.ones((2, 3, 4)) + 0j
    bad = [lambda: mask_sizes.solve([1.0, 2.0], 10**18), lambda: mask_sizes.solve([1.0], np.inf),
           lambda: mask_sizes.solve([1e308, 1.0], 5), lambda: size_cap(10, 0),
           lambda: uniform_sizes(10, 0), lambda: edge_round_latency([1.0], [-1], 4),
           lambda: path_gain(np.nan), lambda: AirCompCell(h * np.nan, np.ones(4)),
           lambda: beamforming.solve(h * 1e160), lambda: beamforming.solve(h, "fast", keep=-1),
           lambda: beamforming.solve(h, "sca", solver="NOPE")]
    for call in bad:
        with pytest.raises(ValueError):
            call()
    r = mask_sizes.solve([1.0, 2.0, 3.0], 2**50)  # memory does not grow with total
    assert r.sizes.sum() == 2**50


@pytest.mark.parametrize("call,match", [
    (lambda: aircomp.beam_gains([np.nan, 1], np.ones((2, 2))),
     "finite"),
    (lambda: aircomp.beam_gains(np.ones(3), np.ones((2, 2))),
     "share M"),
    (lambda: aircomp.beam_gains(np.ones((3, 2)), np.ones((4, 5, 2))),
     "broadcast"),
    (lambda: aircomp.complex_normal((2, -1), np.random.default_rng()),
     "shape"),
    (lambda: aircomp.complex_normal((2,), np.random.default_rng(), -1),
     "variance"),
    (lambda: aircomp.complex_normal((10**7, 10**7), np.random.default_rng()), "GiB"),
    (lambda: units.lin_to_db(-1.0), "`x` must be > 0"),
    (lambda: units.db_to_lin(np.inf), "finite"),
    (lambda: units.db_to_lin("abc"), "numbers"),
    (lambda: beamforming.eigen_beam(np.ones(3) + 0j), "shape"),
    (lambda: beamforming.eigen_beam(np.full((2, 2), np.nan) + 0j),
     "NaN"),
    (lambda: beamforming.sdr_bound(np.zeros((2, 3)) + 0j),
     "all zero"),
    (lambda: beamforming.sdr_bound(np.ones((2, 2, 3)) + 0j),
     "one instance"),
])
def test_channel_helpers_validate_their_arguments(call, match):
    """Public channel and beamforming helpers refuse NaN, wrong shapes and impossible sizes
    with a ValueError that names the argument, instead of returning NaN or a numpy error."""
    with pytest.raises(ValueError, match=match):
        call()


def test_channel_draws_check_their_generator():
    """A draw given something other than a numpy Generator says so (TypeError naming the
    argument) instead of failing inside numpy with an AttributeError."""
    from channels.rayleigh import path_gain

    for call in (lambda: aircomp.complex_normal((2,), np.zeros(3)),
                 lambda: aircomp.complex_normal((2,), 0),
                 lambda: path_gain([2.0, 3.0], shadowing_db=4.0, rng=0)):
        with pytest.raises(TypeError, match="`rng` must be a numpy.random.Generator"):
            call()
    g = path_gain([2.0, 3.0], shadowing_db=4.0, rng=np.random.default_rng(0))
    assert g.shape == (2,) and np.isfinite(g).all()


def test_fl_helpers_validate_their_arguments():
    """Aggregation, compression, masks and the HIST bound refuse what they cannot use."""
    from wirelessfl.algorithms.hist import theory
    from wirelessfl.algorithms.rafed import masks
    from wirelessfl.models.base import UnitGroup
    from wirelessfl.net import compression
    from wirelessfl.server import aggregation

    p = {"w": torch.ones(2, 3), "b": torch.zeros(3)}
    g = torch.Generator().manual_seed(0)
    bad = {
        "other keys": lambda: aggregation.weighted_mean([p, {"w": p["w"]}], [1, 1]),
        "shape": lambda: aggregation.weighted_mean([p, {**p, "b": torch.zeros(4)}], [1, 1]),
        "`lr`": lambda: aggregation.apply_update(p, p, float("nan")),
        "`bits`": lambda: compression.compress(p, "quantize", bits=1.5, gen=g),
        "`keep`": lambda: compression.compress(p, "topk", keep=float("nan"), gen=g),
        "NaN or Inf": lambda: compression.compress({"w": torch.tensor([float("nan")])},
                                                   "quantize", gen=g),
        "`bits` must": lambda: compression.quantize_bound(p, 0),
        "`round_`": lambda: masks.draw("rolling", (UnitGroup("w", 3, ()),), [0.5], -1,
                                       np.random.default_rng(0)),
        "`L`": lambda: theory.step_limits(-1.0, 2, 1.0, 1, 1),
        "`gamma`": lambda: theory.hist_bound(1.0, 1, 1, 1, 1, 2, [2, 2], 1, 1, 1, float("nan"),
                                             10, [1.0], [1.0]),
        "`dmax_seq`": lambda: theory.hist_bound(1.0, 1, 1, 1, 1, 2, [2, 2], 1, 1, 1, 0.1, 10,
                                                [np.inf], [1.0]),
    }
    for match, call in bad.items():
        with pytest.raises(ValueError, match=match):
            call()
    wrong_type = {  # not trees at all: a TypeError naming the argument, not an AttributeError
        "`trees` must be a sequence": lambda: aggregation.weighted_mean(p, [1]),
        r"`trees\[1\]` must be a mapping": lambda: aggregation.weighted_mean([p, 3], [1, 1]),
        "`params` must be a mapping": lambda: aggregation.apply_update(None, p),
        r"`update`\['w'\] must be a tensor": lambda: aggregation.apply_update(p, {**p, "w": [1]}),
    }
    for match, call in wrong_type.items():
        with pytest.raises(TypeError, match=match):
            call()


def test_population_helpers_validate_their_arguments():
    """The speed classes, per-cell values and label dealing refuse counts, shares, label
    arrays and generators they cannot use, naming the argument."""
    from wirelessfl.data.partition import deal_labels
    from wirelessfl.net.delays import speed_classes
    from wirelessfl.net.resources import by_half

    r = np.random.default_rng(0)
    bad = {"`num_clients`": lambda: speed_classes(-1, r),
           "`shares`": lambda: speed_classes(10, r, (0.5, 0.7, 0.1)),
           "`multipliers`": lambda: speed_classes(10, r, (0.5, 0.5), (1.0, np.nan)),
           "`num_cells`": lambda: by_half(0, 1.0, 2.0),
           "`labels`": lambda: deal_labels(np.arange(5.0), [np.array([1])], r),
           "`sets`": lambda: deal_labels(np.arange(5), [], r)}
    for match, call in bad.items():
        with pytest.raises(ValueError, match=match):
            call()
    with pytest.raises(TypeError, match="`rng`"):
        speed_classes(10, 3)
    assert sorted(speed_classes(8, r).tolist()) == [0.7, 0.7, 1.0, 1.0, 1.0, 1.0, 1.3, 1.3]
    assert [p.tolist() for p in deal_labels(np.arange(6) % 3, [np.array([0, 1]), [1, 2]], r,
                                            share=True)] == [[0, 1, 3, 4], [1, 2, 4, 5]]


def test_models_and_latency_models_validate_their_arguments():
    """build_model refuses a bad seed, class count or sample shape, and an image too small
    for the layers (before round 1); the shifted-exponential latency refuses NaN speeds."""
    from wirelessfl.models import build_model
    from wirelessfl.net.delays import ShiftedExponential

    bad = {"do not fit": lambda: build_model("lenet5", (3, 5, 5), 10, seed=0),
           "`num_classes`": lambda: build_model("fcnn", (1, 28, 28), 0, seed=0),
           "`seed`": lambda: build_model("fcnn", (1, 28, 28), 10, seed=-1),
           "`sample_shape`": lambda: build_model("fcnn", (1, 0, 28), 10, seed=0),
           "`speed`": lambda: ShiftedExponential(task_constants=[1.0], speed=[float("nan")],
                                                 steps=[1])}
    for match, call in bad.items():
        with pytest.raises(ValueError, match=match):
            call()


# --------------------------------------------------------------------------- run folders


def test_new_run_never_overwrites_foreign_files(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "metrics.jsonl").write_text("precious\n")
    code, err = _cli(["run", "quickstart", "--out", str(out), "--quiet"], capsys)
    _one_line(code, err, "not empty")
    assert (out / "metrics.jsonl").read_text() == "precious\n"
    code, err = _cli(["run", "quickstart", "--resume", "--out", str(out)], capsys)
    _one_line(code, err, "holds no run")
    assert (out / "metrics.jsonl").read_text() == "precious\n"


def test_failure_in_round_one_leaves_nothing(tmp_path, monkeypatch):
    exp = open_run(RAW).exp

    def broken(state):
        raise ValueError("boom in round 1")

    monkeypatch.setattr(exp.algorithm, "apply", broken)
    with pytest.raises(ValueError, match="boom"):
        run_job(RoundsJob(exp), tmp_path / "r", quiet=True)
    assert not (tmp_path / "r").exists()


def test_diverging_run_stops_with_a_message(tmp_path, capsys):
    code, err = _cli(["run", "quickstart", "--set", "local.lr=1e5", "--set", "rounds=5",
                      "--out", str(tmp_path / "r"), "--quiet"], capsys)
    _one_line(code, err, "NaN/Inf")


def _damage(out, how):
    rows = (out / "metrics.jsonl").read_text().splitlines()
    if how == "deleted":
        (out / "metrics.jsonl").unlink()
    elif how == "gap":
        (out / "metrics.jsonl").write_text("\n".join(rows[:1] + rows[2:]) + "\n")
    elif how == "duplicate":
        (out / "metrics.jsonl").write_text("\n".join(rows[:2] + rows[1:]) + "\n")
    elif how == "truncated":
        (out / "metrics.jsonl").write_text("\n".join(rows)[:-20])
    elif how == "binary":  # not UTF-8 at all
        (out / "metrics.jsonl").write_bytes(b"\xff\xfe" + (out / "metrics.jsonl").read_bytes())
    elif how == "shape":
        ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
        ckpt["params"] = {k: torch.zeros(*[s + 1 for s in v.shape]) for k, v in ckpt["params"].items()}
        torch.save(ckpt, out / "checkpoint.pt")
    elif how == "later_round":
        ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
        ckpt["round"] = 99
        torch.save(ckpt, out / "checkpoint.pt")


@pytest.mark.parametrize("how", ["deleted", "gap", "duplicate", "truncated", "binary", "shape",
                                 "later_round"])
def test_resume_refuses_damaged_folders(tmp_path, how):
    out = _run(tmp_path)
    (out / "summary.json").unlink()
    _damage(out, how)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(RunFolderError):
        run_job(open_run(RAW), out, resume=True, quiet=True)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert before == after  # refused without touching anything


def test_resume_of_damaged_multitask_rows_is_refused(tmp_path):
    out = tmp_path / "m"
    cfg = resolve_multitask(MULTI)
    run_job(open_run(cfg, checkpoint_every_s=0), out, quiet=True)
    rows = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join(rows[:1] + rows[:1] + rows[1:]) + "\n")
    with pytest.raises(RunFolderError):
        run_job(open_run(cfg), out, quiet=True, resume=True)


def test_a_run_folder_is_locked_while_written(tmp_path):
    out = _run(tmp_path)
    (out / "summary.json").unlink()
    holder = RunRecord(out)
    holder.open(yaml.safe_load((out / "config.yaml").read_text()), 5, "cpu", resume=True)
    try:
        with pytest.raises(RunFolderError, match="being written by another run"):
            run_job(open_run(RAW), out, resume=True, quiet=True)
    finally:
        holder.close()
    run_job(open_run(RAW), out, resume=True, quiet=True)  # free again


def test_interrupted_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch):
    out = _run(tmp_path)
    record = RunRecord(out)
    before = (out / "checkpoint.pt").read_bytes()

    def dies_halfway(obj, fh):
        fh.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        record.save_checkpoint({"round": 99})
    assert (out / "checkpoint.pt").read_bytes() == before
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("method", [
    MULTI["method"],
    # Sync-ST evaluated every 0.5 s of simulated time: several rows of one round (the check
    # of the rows read them as one per round and refused every such resume)
    {"name": "sync_st", "first_k": 4, "clients": 8}])
def test_multitask_snapshot_interval_and_resume(tmp_path, monkeypatch, method):
    from wirelessfl.algorithms.fedast.tasks import TaskEnv

    cfg = resolve_multitask({**MULTI, "method": method,
                             **({"eval_interval": 0.5} if method["name"] == "sync_st" else {})})
    full = tmp_path / "full"
    run_job(open_run(cfg, checkpoint_every_s=0), full, quiet=True)
    real, calls = TaskEnv.evaluate, []
    stop = 7 if method["name"] == "fedast" else int(0.6 * len(RunRecord(full).rows()))

    def interrupting(self, params):
        calls.append(1)
        if len(calls) == stop:
            raise KeyboardInterrupt
        return real(self, params)

    monkeypatch.setattr(TaskEnv, "evaluate", interrupting)
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_job(open_run(cfg, checkpoint_every_s=0), cut, quiet=True)
    monkeypatch.setattr(TaskEnv, "evaluate", real)
    assert (cut / "checkpoint.pt").is_file() and len(RunRecord(cut).rows()) == stop - 1
    run_job(open_run(cfg, checkpoint_every_s=0), cut, quiet=True, resume=True)

    def rows(p):
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(p).rows()]

    assert rows(cut) == rows(full)
    never = tmp_path / "never"
    monkeypatch.setattr(TaskEnv, "evaluate", interrupting)
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        run_job(open_run(cfg, checkpoint_every_s=1e9), never, quiet=True)
    assert not (never / "checkpoint.pt").exists()  # the interval is honoured


# --------------------------------------------------------------------------- partitions and chunks


def test_reuse_refills_a_label_as_soon_as_it_runs_short():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 25)  # 25 samples per label
    pools = _LabelPools(labels, np.arange(4), rng)
    for _ in range(30):
        p = rng.dirichlet(np.full(4, 0.2))
        got = pools.draw(p, 40, reuse=True)
        counts = np.bincount(labels[got], minlength=4)
        assert (counts == _largest_remainder(p, 40)).all()  # exactly the drawn shares
        assert len(np.unique(got)) == len(got) or counts.max() > 25


def test_lazy_chunks_give_the_same_numbers():
    sys.path.insert(0, os.path.dirname(__file__))
    from test_fedast import Fixed, N, _tasks

    from wirelessfl.algorithms.fedast.fedast import FedAST, FedASTHParams
    from wirelessfl.algorithms.fedast.simtime import ClientPool
    from wirelessfl.engine.loop import LoopExecutor
    from wirelessfl.rng import Seeds

    finals, held = [], []
    for max_batch in (1, 3, 64):
        tasks = _tasks(2)
        sim = FedAST(tasks, ClientPool(Fixed(np.random.default_rng(0).uniform(1, 4, N)), N, cap=10),
                     LoopExecutor("cpu"), Seeds(0), FedASTHParams(requests=24, ratio=4,
                                                                  max_batch=max_batch))

        def watch(task, state, now, sim=sim, max_batch=max_batch):
            held.append(len(sim.results) <= max_batch)
            return False

        sim.run(watch, max_rounds=10)
        finals.append(torch.cat([v.flatten() for s in sim.states for v in s.params.values()]))
    assert all(held)
    assert torch.equal(finals[0], finals[1]) and torch.equal(finals[0], finals[2])


def test_config_errors_are_short():
    with pytest.raises(ValueError) as exc:
        open_run({**RAW, "model": {"name": "fcnn", "options": {"hidden": "x" * 10_000}}})
    assert len(str(exc.value)) < 300
    with pytest.raises(ConfigError) as exc:
        resolve({**RAW, "rounds": "y" * 10_000})
    assert len(str(exc.value)) < 300


def test_a_diverging_run_stops_with_one_line_and_keeps_its_rows(tmp_path, capsys):
    """A learning rate of 1e6 makes the model NaN within a few rounds: TrainingDiverged, which
    the CLI prints as one line with exit code 2; the rows before the diverged round stay, the
    diverged round writes none, and there is no summary."""
    import re

    from wirelessfl.cli import main

    exp = open_run({**RAW, "rounds": 8, "local": {**RAW["local"], "lr": 1e6}}).exp
    with pytest.raises(TrainingDiverged, match="became NaN/Inf") as exc:
        run_job(RoundsJob(exp), tmp_path / "r", quiet=True)
    bad = int(re.search(r"round (\d+)", str(exc.value)).group(1))
    assert [r["round"] for r in RunRecord(tmp_path / "r").rows()] == list(range(bad))
    assert RunRecord(tmp_path / "r").summary() is None
    code = main(["run", "quickstart", "--set", "rounds=2", "--set", "local.lr=1e6", "--quiet",
                 "--out", str(tmp_path / "cli")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "diverged" in err[0]


@pytest.mark.parametrize("sets, match", [
    (["network.model=tdma", "network.deadline_s=1", "network.max_bits=8"], "max_bits"),
    (["network.model=tdma", "network.deadline_s=1", "network.compression=topk",
      "network.max_bits=8"], "max_bits"),
    (["network.model=fdma", "network.rate_mbps=50"], "rate_mbps"),
    (["workers=3"], "engine distributed"),
    (["algorithm.name=fadamgc", "algorithm.tracked=50"], "tracked"),
])
def test_inert_settings_are_refused_in_one_line(tmp_path, capsys, sets, match):
    """Issue 57, item 6: a setting that would change nothing is refused, not silently kept."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**RAW, "rounds": 1}))
    argv = ["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1 and not (tmp_path / "r").exists()


def test_an_empty_scenario_path_is_refused(capsys):
    assert main(["masks", "--scenario", ""]) == 2
    assert "--scenario needs the path" in capsys.readouterr().err


def test_ctrl_c_while_the_command_starts_is_one_line(monkeypatch, capsys):
    """SIGINT during the imports (before ``main`` runs) exits 130 with one line."""
    import builtins
    import sys

    from wirelessfl.__main__ import console

    real = builtins.__import__

    def interrupted(name, *args, **kwargs):
        if name == "wirelessfl.cli":
            raise KeyboardInterrupt
        return real(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "wirelessfl.cli", raising=False)
    monkeypatch.setattr(builtins, "__import__", interrupted)
    assert console() == 130
    err = capsys.readouterr().err.strip()
    assert err == "wirelessfl: interrupted"


def test_relative_paths_in_a_config_stay_inside_the_data_folder(tmp_path):
    """``pretrained: ../../etc/passwd`` (or a link out of --data-dir) is refused; a path
    inside the folder and an absolute path (the user's own) are taken as they are."""
    from wirelessfl.data.arrays import inside
    from wirelessfl.run.config import resolve
    from wirelessfl.run.rounds import model_options

    data = tmp_path / "data"
    (data / "weights").mkdir(parents=True)
    (data / "out").symlink_to(tmp_path, target_is_directory=True)
    raw = {**RAW, "data": {**RAW["data"], "data_dir": str(data)}}
    for bad in ("../../../../etc/passwd", "out/secret.safetensors"):
        with pytest.raises(ConfigError, match="leaves the data folder"):
            model_options(resolve({**raw, "model": {"name": "fcnn",
                                                    "options": {"pretrained": bad}}}))
    with pytest.raises(ValueError, match="data.tokenizer '../etc' leaves the data folder"):
        inside(data, "../etc", "data.tokenizer")
    assert inside(data, "weights/w.safetensors", "x") == data.resolve() / "weights/w.safetensors"
    assert inside(data, "/abs/w", "x") == Path("/abs/w")


def test_beamform_times_a_pilot_and_refuses_work_beyond_its_limit(capsys):
    """A per-cell solver on many cells is estimated from a few cells timed here, and refused
    in one line past --max-minutes (sca on 100,000 cells ran past 60 s at 2.35 GB)."""
    from wirelessfl.cli import main

    assert main(["beamform", "--cells", "2000", "--method", "sca", "--max-minutes",
                 "0.001"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "would take about" in err and "ms a cell" in err
    assert main(["beamform", "--cells", "40", "--method", "fast", "--max-minutes",
                 "0.001"]) == 0   # vectorised methods are bounded by memory, not timed


def test_sigterm_keeps_the_run_resumable_and_says_how_to_continue(tmp_path):
    """SIGTERM (a scheduler's stop) is handled as Ctrl-C: exit 143 with the resume hint."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "st"
    proc = subprocess.Popen([sys.executable, "-m", "wirelessfl", "run", "quickstart", "--set",
                             "rounds=5000", "--out", str(out), "--quiet"],
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    deadline = time.time() + 120
    while time.time() < deadline and not (out / "checkpoint.pt").exists():
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert "terminated (SIGTERM)" in err and f"wirelessfl run --resume --out {out}" in err
    assert (out / "checkpoint.pt").exists()


def test_publish_into_the_report_folder_itself_is_refused_before_training(tmp_path, capsys):
    from wirelessfl.cli import main

    out = tmp_path / "rep"
    code = main(["figures", "hist", "--scale", "quick", "--only", "fig3", "--out", str(out),
                 "--publish", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "--publish" in err[-1] and "itself" in err[-1], err
    assert not out.exists()


@pytest.mark.parametrize("name", ["metrics.jsonl", "config.yaml"])
def test_a_run_file_that_is_a_link_is_called_a_link_not_damaged(tmp_path, name):
    from wirelessfl.errors import RunFolderError
    from wirelessfl.run.records import RunRecord

    folder = tmp_path / "r"
    folder.mkdir()
    (tmp_path / "elsewhere").write_text("{}\n" if name == "metrics.jsonl" else "rounds: 1\n")
    (folder / name).symlink_to(tmp_path / "elsewhere")
    record = RunRecord(folder)
    with pytest.raises(RunFolderError, match="is a link"):
        record.rows() if name == "metrics.jsonl" else record.config()


def test_a_folder_planted_where_a_run_writes_a_file_is_one_line(tmp_path):
    from wirelessfl.errors import RunFolderError
    from wirelessfl.run.records import RunRecord

    folder = tmp_path / "r"
    (folder / "diverged.json").mkdir(parents=True)
    with pytest.raises(RunFolderError, match="is a folder where the run writes its diverged"):
        RunRecord(folder)._lock()
    with pytest.raises(RunFolderError, match="is a folder where the run writes its diverged"):
        RunRecord(folder).mark_diverged("nan")
