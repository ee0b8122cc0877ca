import json
import shutil

import pytest
import torch

from wirelessfl.cli import main
from wirelessfl.errors import RunFolderError
from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord, cpu_model
from wirelessfl.run.rounds import RoundsJob

RAW = {"name": "tiny", "seed": 5, "rounds": 4, "target_accuracy": 0.3,
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 80},
       "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.5}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3},
       "algorithm": {"name": "hfedavg", "cells": 2, "edge_rounds": 2}}


def _metrics(folder):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(folder).rows()]


def test_same_seed_same_metrics(tmp_path):
    a = run_job(open_run(RAW), tmp_path / "a", quiet=True)
    run_job(open_run(RAW), tmp_path / "b", quiet=True)
    c = resolve({**RAW, "seed": 6})
    run_job(open_run(c), tmp_path / "c", quiet=True)
    assert _metrics(tmp_path / "a") == _metrics(tmp_path / "b")
    assert _metrics(tmp_path / "a") != _metrics(tmp_path / "c")
    assert [r["round"] for r in _metrics(tmp_path / "a")] == [0, 1, 2, 3, 4]
    assert a["rounds"] == 4


def test_resume_equals_uninterrupted(tmp_path, monkeypatch, interrupt_after):
    run_job(open_run(RAW), tmp_path / "full", quiet=True)
    exp = open_run(RAW).exp
    interrupt_after(exp, 2)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    assert [r["round"] for r in RunRecord(tmp_path / "cut").rows()] == [0, 1, 2]
    run_job(open_run(RAW), tmp_path / "cut", resume=True, quiet=True)
    assert _metrics(tmp_path / "cut") == _metrics(tmp_path / "full")
    full = json.loads((tmp_path / "full" / "summary.json").read_text())
    cut = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert cut["final_accuracy"] == full["final_accuracy"]


def test_a_run_made_before_an_option_existed_still_resumes(tmp_path, interrupt_after):
    """A folder whose config.yaml predates later options (text settings, placement) resumes
    with the numbers of an uninterrupted run; a real config change is still refused."""
    import yaml

    run_job(open_run(RAW), tmp_path / "full", quiet=True)
    exp = open_run(RAW).exp
    interrupt_after(exp, 2)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    path = tmp_path / "cut" / "config.yaml"
    stored = yaml.safe_load(path.read_text())
    for key in ("tokenizer", "max_length", "placement"):
        del stored["data"][key]
    path.write_text(yaml.safe_dump(stored))
    with pytest.raises(RunFolderError, match="different config"):
        run_job(open_run({**RAW, "seed": 6}), tmp_path / "cut", resume=True,
                   quiet=True)
    run_job(open_run(RAW), tmp_path / "cut", resume=True, quiet=True)
    assert _metrics(tmp_path / "cut") == _metrics(tmp_path / "full")


def test_quickstart_learns_and_plots(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["run", "quickstart", "--out", str(out), "--quiet"]) == 0
    rows = RunRecord(out).rows()
    assert rows[0]["test_accuracy"] < 0.5 and rows[-1]["test_accuracy"] > 0.75  # chance ~0.1-0.3
    for f in ("config.yaml", "meta.json", "metrics.csv", "summary.json", "checkpoint.pt"):
        assert (out / f).is_file()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["seed"] == 0 and meta["version"]
    # the machine that rounded it: a chaotic run differs between CPUs' kernels
    assert meta["cpu"] == cpu_model() and meta["cpu"] and meta["torch"] == torch.__version__
    assert "test accuracy" in capsys.readouterr().out
    png = tmp_path / "p.png"
    assert main(["plot", str(out), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # an existing file is never overwritten; the run's own plot is redrawn
    foreign = tmp_path / "mine.png"
    foreign.write_bytes(b"not yours")
    assert main(["plot", str(out), "--out", str(foreign)]) == 2
    assert foreign.read_bytes() == b"not yours" and "exists" in capsys.readouterr().err
    assert main(["plot", str(out)]) == 0
    assert (out / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize("args,match", [
    (["run", "no_such_preset"], "unknown preset 'no_such_preset'"),
    (["run", "quickstart", "--set", "data.dataset=imagenet"], "unknown dataset 'imagenet'"),
    (["run", "quickstart", "--set", "local.lrr=1"], "unknown config key 'local.lrr'"),
    (["run", "quickstart", "--set", "rounds=many"], "rounds must be an integer"),
    (["run", "quickstart", "--set", "model.name=resnet50"], "unknown model 'resnet50'"),
    (["run", "quickstart", "--set", "data.partition=iid", "--set", "data.samples_per_client=100000"],
     "needs"),
    (["run", "quickstart", "--set", "data.dataset=cifar10", "--set", "data.partition=iid",
      "--set", "data.data_dir=/nonexistent"], "is not a folder"),
    (["run", "quickstart", "--set", "algorithm.cells=100"], "cannot fill 100 cells"),
    (["plot", "/nonexistent"], "not a run folder"),
    (["beamform", "--antennas", "0"], "positive integer"),
    (["beamform", "--instances", "/nonexistent.npz"], "need an .npz"),
    (["run", "quickstart", "--bogus"], "unrecognized arguments"),
    (["run", "e4_fmnist_quick", "--set", "tasks=[mnist_cnn]"], "unknown task 'mnist_cnn'"),
    (["run", "e4_fmnist_quick", "--set", "method.option=X"], "option"),
    (["run", "e4_fmnist_quick", "--set", "pool.available=0"], "pool.available must be an integer >= 1"),
])
def test_cli_bad_input_one_line_exit_2(tmp_path, capsys, args, match):
    out = tmp_path / "never"
    try:
        code = main(args + (["--out", str(out)] if args[0] == "run" else []))
    except SystemExit as exc:  # argparse-level errors exit from the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("wirelessfl: error:") and match in err
    assert not out.exists()


def test_cli_refuses_to_overwrite_a_run(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "quickstart", "--out", str(out), "--quiet", "--set", "rounds=1"]) == 0
    assert main(["run", "quickstart", "--out", str(out), "--quiet", "--set", "rounds=1"]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_deterministic_runs_are_repeatable_and_restore_the_flags(tmp_path):
    import torch

    from wirelessfl.cli import main
    from wirelessfl.run.records import RunRecord

    rows = []
    for k in range(2):
        assert main(["run", "quickstart", "--set", "rounds=2", "--deterministic", "--quiet",
                     "--out", str(tmp_path / f"d{k}")]) == 0
        rows.append([(r["round"], r["test_accuracy"], r["test_loss"])
                     for r in RunRecord(tmp_path / f"d{k}").rows()])
        assert RunRecord(tmp_path / f"d{k}").config()["deterministic"] is True
    assert rows[0] == rows[1]
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("engine", ["loop", "batched"])
@pytest.mark.parametrize("algorithm", [RAW["algorithm"], {"name": "fedprox", "mu": 0.5},
                                       {"name": "moon"}, {"name": "fadamgc"}],
                         ids=["hfedavg", "fedprox", "moon", "fadamgc"])
def test_cuda_run_matches_cpu(tmp_path, engine, algorithm):
    """--device cuda: the same run as on the CPU, to float tolerance (skipped without a GPU):
    plain SGD's fused step, FedProx's drift, MOON's anchors, FAdamGC's in-place moments.

    FAdamGC to a relative distance of 1e-3 per tensor, not elementwise: Adam's normalised
    step m/(√v + ε) turns rounding-level gradient differences into visible steps. On the
    CPU a one-ulp perturbation of the start moves FAdamGC's final weights by up to 1.9e-5
    (HFedAvg's by 3e-8); the GPU's matrix products round differently from the CPU's by a
    few ulps, and on an H200 2.9% of the first layer's elements moved by up to 4.5e-4 (loop
    and batched alike). A lost moment or correction moves every element by O(lr)."""
    import torch

    states = []
    for device in ("cpu", "cuda"):
        exp = open_run({**RAW, "device": device, "engine": engine,
                                      "algorithm": algorithm,
                                      "model": {"name": "fcnn", "options": {"hidden": 160,
                                                                            "dropout": 0.5}}}).exp
        state = exp.initial_state()
        for _ in range(2):
            state, _ = exp.algorithm.apply(state)
        states.append({k: v.cpu() for k, v in state.params.items()})
    for k in states[0]:
        if algorithm["name"] == "fadamgc":
            gap = float((states[0][k] - states[1][k]).norm() / states[0][k].norm())
            assert gap < 1e-3, (k, gap)
        else:
            torch.testing.assert_close(states[0][k], states[1][k], rtol=1e-4, atol=1e-5)


def test_data_placement_on_the_cpu_and_batches_of_any_index_shape():
    """data.placement is checked; on the CPU every placement leaves the data where it is;
    ``batch`` gives x[index], y[index] for slices and for (clients, batch) index tensors."""
    import torch

    from wirelessfl.data import ArrayDataset
    from wirelessfl.run.config import ConfigError, DataConfig

    ds = ArrayDataset(torch.arange(60.0).reshape(10, 2, 3), torch.arange(10) % 3, 3)
    for placement in ("auto", "device", "host"):
        assert ds.placed("cpu", placement) is ds
    with pytest.raises(ValueError, match="placement must be one of"):
        ds.placed("cpu", "gpu")
    with pytest.raises(ValueError, match="device must be"):
        ds.placed("tpu9", "auto")
    with pytest.raises(ConfigError, match="data.placement"):
        DataConfig(placement="disk")
    index = torch.tensor([[0, 3, 3], [9, 1, 2]])
    x, y = ds.batch(index, "cpu")
    assert x.shape == (2, 3, 2, 3) and torch.equal(x, ds.x[index]) and torch.equal(y, ds.y[index])
    x, y = ds.batch(slice(4, 7), "cpu")
    assert torch.equal(x, ds.x[4:7]) and torch.equal(y, ds.y[4:7])
    assert ds.nbytes == 60 * 4 + 10 * 8


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_cuda_data_pinned_on_the_host_gives_the_numbers_of_data_on_the_device(engine):
    """data.placement host (pinned memory, asynchronous batch copies) = placement device."""
    import torch

    states = []
    for placement in ("device", "host"):
        raw = {**RAW, "device": "cuda", "engine": engine,
               "data": {**RAW["data"], "placement": placement}}
        exp = open_run(raw).exp
        assert exp.algorithm.env.train.x.is_pinned() == (placement == "host")
        assert exp.splits.test.x.is_cuda == (placement == "device")
        state = exp.initial_state()
        for _ in range(2):
            state, _ = exp.algorithm.apply(state)
        states.append({k: v.cpu() for k, v in state.params.items()})
    for k in states[0]:
        assert torch.equal(states[0][k], states[1][k]), k


def test_typed_client_states_resume_exactly_and_checkpoint_as_plain_mappings(
        tmp_path, interrupt_after):
    """FAdamGC's client states are typed (AdamClientState: v_i, y_i) and kept as a stacked
    store; the checkpoint holds it as plain data (ids, per field which clients hold it and
    one tensor a key), and a resumed run is exact. A checkpoint of the per-client format
    (id → {"v", "y"} mappings, what run folders held before the store) resumes exactly too."""
    from wirelessfl.engine.client_store import ClientStore

    raw = {**RAW, "algorithm": {"name": "fadamgc", "clients_per_round": 4}}
    run_job(open_run(raw), tmp_path / "full", quiet=True)
    exp = open_run(raw).exp
    interrupt_after(exp, 2)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    record = RunRecord(tmp_path / "cut")
    ckpt = record.load_checkpoint()
    stored = ckpt["client_states"]
    assert ClientStore.is_plain(stored) and set(stored["fields"]) == {"v", "y"}
    assert all(isinstance(v, torch.Tensor) for f in stored["fields"].values()
               for v in (f["present"], *f["rows"].values()))
    store = exp.algorithm.load_client_states(stored)
    old_format = {u: {f: getattr(s, f) for f in ("v", "y") if getattr(s, f) is not None}
                  for u, s in store.items()}  # the per-client mappings of older run folders
    shutil.copytree(tmp_path / "cut", tmp_path / "old")
    RunRecord(tmp_path / "old").save_checkpoint({**ckpt, "client_states": old_format})
    for folder in ("cut", "old"):
        run_job(open_run(raw), tmp_path / folder, resume=True, quiet=True)
        assert _metrics(tmp_path / folder) == _metrics(tmp_path / "full")


def test_a_quiet_run_says_its_time_left_once_after_its_second_round(tmp_path, monkeypatch, capsys):
    """--quiet used to print nothing for minutes: a long run says its estimate in one line,
    timed over its second round (the first holds the start-up: issue 71)."""
    from wirelessfl.run.shell import Output

    monkeypatch.setattr(Output, "ESTIMATE_FROM_S", 0.0)  # every run counts as long here
    run_job(open_run(RAW), tmp_path / "q", quiet=True)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "left" in ln]
    assert len(lines) == 1 and "s a round, 2 of 4" in lines[0]
    monkeypatch.setattr(Output, "ESTIMATE_FROM_S", 1e9)  # a short run stays silent
    run_job(open_run(RAW), tmp_path / "s", quiet=True)
    assert "left" not in capsys.readouterr().err


def test_the_model_check_feeds_the_model_on_its_own_device():
    """Data pinned on the host (``data.placement: host``) feeds a model on the GPU: the first
    forward pass before training goes to the run's device, not the data's (an H200 run of
    the CUDA tests failed here). A model on the meta device stands in for the GPU."""
    import torch

    from wirelessfl.data import ArrayDataset
    from wirelessfl.models import build_model
    from wirelessfl.run.rounds import _check_model

    data = ArrayDataset(torch.rand(4, 1, 28, 28), torch.arange(4) % 10, 10)
    model = build_model("fcnn", (1, 28, 28), 10, seed=0, hidden=8).to("meta")
    _check_model(model, "fcnn", data, "meta")


@pytest.mark.parametrize("flags, match", [(["--checkpoint-every", "5"], "for multi-task runs"),
                                          (["--workers", "2"], "--engine distributed")])
def test_a_run_flag_that_would_do_nothing_is_refused(tmp_path, capsys, flags, match):
    """--checkpoint-every (seconds) only acts on multi-task runs, --workers only with the
    distributed engine: given to a round-based batched run, they are refused, not ignored."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("rounds: 1\ndata: {dataset: synthetic, num_clients: 4, samples_per_client: 20}\n"
                   "model: {name: linear}\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err and not (tmp_path / "r").exists()


def test_a_run_cut_short_by_until_writes_no_summary_and_resumes_to_the_end(tmp_path):
    """The estimate's timed samples end early through ``until``: such a folder must not look
    finished (no summary.json); resuming it trains the rest."""
    from wirelessfl.run.shell import execute

    raw = {"rounds": 4, "data": {"dataset": "synthetic", "num_clients": 4, "samples_per_client": 20},
           "model": {"name": "linear"}}
    record = RunRecord(tmp_path / "r")
    execute(record, open_run(raw), quiet=True, until=lambda row: row["round"] >= 2)
    assert record.summary() is None and [r["round"] for r in record.rows()] == [0, 1, 2]
    run_job(open_run(raw), tmp_path / "r", resume=True, quiet=True)
    assert record.summary() is not None and record.rows()[-1]["round"] == 4


def test_plot_draws_percent_markers_a_log_time_axis_and_names_a_hidden_twin(tmp_path):
    """``wirelessfl plot``: accuracy in % (as the reports' tables), a marker per run, simulated
    time on a log axis when the runs' times differ by decades, and a run drawn exactly over
    another says so in the legend."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from wirelessfl.report import plotting

    def folder(name, scale):
        f = tmp_path / name
        f.mkdir()
        rows = [{"round": t, "uplink_mb_per_client": t, "sim_time_s": scale * t,
                 "test_accuracy": 0.1 + 0.05 * t} for t in range(6)]
        (f / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return f

    runs = [folder("aircomp", 0.001), folder("nr", 60.0), folder("nr_copy", 60.0)]
    made = []
    real = plt.subplots
    plotting.plt.subplots = lambda *a, **k: made.append(real(*a, **k)) or made[-1]
    try:
        plotting.plot_runs(runs, tmp_path / "p.png")
    finally:
        plotting.plt.subplots = real
    fig, ax = made[0]
    time_axis = [a for a in ax[0] if "simulated" in a.get_xlabel()][0]
    assert time_axis.get_xscale() == "log" and ax[0][0].get_ylabel() == "test accuracy [%]"
    assert max(ax[0][0].lines[0].get_ydata()) == pytest.approx(35.0)
    labels = [line.get_label() for line in time_axis.lines]  # (on rounds all three coincide)
    assert labels == ["aircomp", "nr", "nr_copy (= nr, drawn under it)"]
    assert len({line.get_marker() for line in ax[0][0].lines}) == 3
