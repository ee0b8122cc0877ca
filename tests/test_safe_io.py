"""No write through a planted link, no foreign file overwritten, no non-standard JSON (issue 32)."""

import json
import os

import pytest
import yaml

from wirelessfl.cli import main
from wirelessfl.errors import RunFolderError
from wirelessfl.run import rounds as runner
from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob
from wirelessfl.run.safe_io import atomic_write, open_append, open_new

RAW = {"name": "tiny", "seed": 5, "rounds": 3, "checkpoint_every": 1,
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 40},
       "model": {"name": "fcnn", "options": {"hidden": 8}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 2}}


def _victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text("precious")
    return v


def test_atomic_write_refuses_a_link_and_skips_planted_temporaries(tmp_path):
    victim = _victim(tmp_path)
    target = tmp_path / "out.json"
    os.symlink(victim, target)
    with pytest.raises(RunFolderError, match="symbolic link"):
        atomic_write(target, lambda fh: fh.write(b"x"))
    os.unlink(target)
    for i in range(3):  # every temporary name this process would try first
        os.symlink(victim, tmp_path / f".out.json.{os.getpid()}.{i}.tmp")
    atomic_write(target, lambda fh: fh.write(b"new"))
    assert target.read_bytes() == b"new" and victim.read_text() == "precious"
    assert not target.is_symlink()


def test_open_new_and_append_never_follow_links(tmp_path):
    victim = _victim(tmp_path)
    os.symlink(victim, tmp_path / "a")
    with pytest.raises(RunFolderError, match="symbolic link"):
        open_new(tmp_path / "a")
    with pytest.raises(RunFolderError, match="symbolic link"):
        open_append(tmp_path / "a")
    (tmp_path / "b").write_text("mine")
    with pytest.raises(RunFolderError, match="never overwrites"):
        open_new(tmp_path / "b")
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("name", ["checkpoint.pt", "metrics.jsonl", "metrics.csv", "summary.json",
                                  ".lock", "checkpoint.pt.tmp", "metrics.csv.tmp"])
def test_a_link_planted_in_a_run_folder_is_never_written_through(tmp_path, capsys, name):
    out = tmp_path / "run"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**RAW, "rounds": 2}))
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    victim = _victim(tmp_path)
    (out / name).unlink(missing_ok=True)
    os.symlink(victim, out / name)
    cfg.write_text(yaml.safe_dump({**RAW, "rounds": 2}))
    code = main(["run", str(cfg), "--out", str(out), "--resume", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert victim.read_text() == "precious"
    if name.endswith(".tmp"):  # a name the tool does not use any more: harmless
        assert code == 0
    else:
        assert code == 2 and len(err.splitlines()) == 1, err


def test_a_run_folder_that_is_a_link_is_refused(tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(RAW))
    assert main(["run", str(cfg), "--out", str(tmp_path / "link"), "--quiet"]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert not any(real.iterdir())


def test_a_foreign_readme_beside_runs_survives_figures_and_sweep(tmp_path, capsys):
    proj = tmp_path / "proj"
    (proj / "runs" / "tiny-20261123-101010").mkdir(parents=True)   # what `wirelessfl run` makes
    (proj / "README.md").write_text("# my project\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(RAW))
    assert main(["sweep", str(cfg), "--grid", "local.lr=0.05", "--out", str(proj),
                 "--quiet"]) == 2
    assert "did not write" in capsys.readouterr().err
    assert (proj / "README.md").read_text() == "# my project\n"


def test_a_report_readme_that_is_a_link_is_not_written_through(tmp_path, capsys):
    rep = tmp_path / "rep"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**RAW, "rounds": 1}))
    assert main(["sweep", str(cfg), "--grid", "local.lr=0.05", "--out", str(rep), "--quiet"]) == 0
    victim = _victim(tmp_path)
    (rep / "README.md").unlink()
    os.symlink(victim, rep / "README.md")
    assert main(["sweep", str(cfg), "--grid", "local.lr=0.05", "--out", str(rep), "--quiet"]) == 2
    assert "symbolic link" in capsys.readouterr().err and victim.read_text() == "precious"


def test_rows_hold_standard_json_only(tmp_path):
    record = RunRecord(tmp_path / "r")
    with record.writing({"name": "x"}, 0, "cpu", resume=False):
        record.append({"round": 0, "test_accuracy": 0.5, "aircomp_mse": float("inf"),
                       "train_loss": float("nan"), "nested": [1.0, float("-inf")]})
        record.write_summary({"final_loss": float("nan")})
    text = (tmp_path / "r" / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"round": 0, "test_accuracy": 0.5, "aircomp_mse": None,
                                "train_loss": None, "nested": [1.0, None]}
    assert json.loads((tmp_path / "r" / "summary.json").read_text()) == {"final_loss": None}


def test_an_infinite_test_loss_stops_the_run(tmp_path, monkeypatch):
    from wirelessfl.errors import TrainingDiverged

    exp = open_run(RAW).exp
    real = runner.evaluate
    calls = []

    def overflowing(*a, **k):
        calls.append(1)
        acc, loss = real(*a, **k)
        return (acc, float("inf")) if len(calls) > 1 else (acc, loss)

    monkeypatch.setattr(runner, "evaluate", overflowing)
    with pytest.raises(TrainingDiverged, match="test loss"):
        run_job(RoundsJob(exp), tmp_path / "r", quiet=True)


def test_numba_kernels_compile_without_a_writable_cache(monkeypatch):
    """A read-only install with no writable home: Numba has nowhere to cache, and the
    kernel is then compiled in memory instead of failing at import."""
    numba = pytest.importorskip("numba")
    from solvers import mask_sizes

    real = numba.njit

    def no_locator(*args, cache=False, **kw):
        if cache:
            raise RuntimeError("cannot cache function 'f': no locator available for file 'x'")
        return real(*args, **kw)

    monkeypatch.setattr(mask_sizes._numba, "njit", no_locator)

    def double(x):
        return 2 * x

    assert mask_sizes._jit(double)(21) == 42


def test_the_cli_starts_with_an_unwritable_home_and_cache(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "HOME": str(tmp_path / "missing"), "NUMBA_CACHE_DIR": "/dev/null/x",
           "MPLCONFIGDIR": "/dev/null/x", "XDG_CACHE_HOME": "/dev/null/x"}
    out = subprocess.run([sys.executable, "-c", "import solvers.mask_sizes, wirelessfl.cli;"
                          "wirelessfl.cli.main(['--help'])"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert "Traceback" not in out.stderr, out.stderr[-500:]


DEEP_FLOW = "a: " + "[" * 3000 + "]" * 3000 + "\n"
DEEP_BLOCK = "".join(" " * i + f"k{i}:\n" for i in range(200)) + " " * 200 + "v: 1\n"


@pytest.mark.parametrize("text", [DEEP_FLOW, DEEP_BLOCK, "- " * 500 + "x\n"])
def test_deeply_nested_yaml_is_one_line_everywhere(tmp_path, capsys, text):
    cfg = tmp_path / "deep.yaml"
    cfg.write_text(text)
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "nested more than" in err and len(err.splitlines()) == 1
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(RAW))
    assert main(["run", str(ok), "--out", str(tmp_path / "o2"), "--quiet",
                 "--set", "local.lr=" + "[" * 3000 + "]" * 3000]) == 2
    assert "nested more than" in capsys.readouterr().err


def test_yaml_builds_plain_data_only_and_reads_as_pyyaml_safe_load(tmp_path, capsys):
    """Configs and --set values go through libyaml's safe loader where PyYAML has it: a tag
    that would build a Python object is refused (exit 2, nothing run or written), and plain
    values read as ``yaml.safe_load`` reads them."""
    from wirelessfl.errors import ConfigError, parse_yaml

    for text in ("1", "1e-3", "yes", "[1, {a: 2}]", "null", ".inf", "0x10", "'x'", "a: &r [1]\nb: *r"):
        assert parse_yaml(text, "t") == yaml.safe_load(text)
    evil = "!!python/object/apply:os.system ['touch " + str(tmp_path / "pwned") + "']"
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_yaml(evil, "t")
    cfg = tmp_path / "evil.yaml"
    cfg.write_text("seed: " + evil + "\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(RAW))
    assert main(["run", str(ok), "--out", str(tmp_path / "o2"), "--set", "seed=" + evil]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("not valid YAML" in line for line in err)
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "o").exists()
    assert not (tmp_path / "o2").exists()


def test_a_key_given_twice_is_refused_not_silently_dropped(tmp_path, capsys):
    """``rounds: 3`` then ``rounds: 50`` in one config (or one --set mapping) exits 2 naming
    the key and the line, instead of PyYAML's silent last-one-wins; a merge key (``<<``) may
    still be overridden."""
    from wirelessfl.errors import ConfigError, parse_yaml

    cfg = tmp_path / "twice.yaml"
    cfg.write_text(yaml.safe_dump(RAW) + "rounds: 50\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'rounds' is given twice" in err and "line" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(RAW))
    assert main(["run", str(ok), "--out", str(tmp_path / "o2"), "--quiet",
                 "--set", "local={lr: 0.1, lr: 0.2}"]) == 2
    assert "'lr' is given twice" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="keys 1 and 1.0 .* are one key once read"):
        parse_yaml("1: a\n1.0: b\n", "t")  # equal keys, as Python compares them: both named
    merged = "base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n"
    assert parse_yaml(merged, "t") == yaml.safe_load(merged) == {"base": {"x": 1, "y": 2},
                                                                "c": {"x": 3, "y": 2}}


def test_a_damaged_run_folder_with_deep_rows_or_config_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**RAW, "rounds": 2}))
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    rows = (out / "metrics.jsonl").read_text()
    (out / "metrics.jsonl").write_text(rows + "[" * 100_000 + "]" * 100_000 + "\n")
    assert main(["plot", str(out), "--out", str(tmp_path / "p.png")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    (out / "metrics.jsonl").write_text(rows)
    (out / "config.yaml").write_text(DEEP_FLOW)
    assert main(["run", str(cfg), "--out", str(out), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "nested" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("patch, match", [
    ({"algorithm": {"name": "rafed", "fraction": 0.5, "ratios": [1.0, 0.5]}}, "replaces ratios"),
    ({"algorithm": {"name": "rafed", "gamma_min": 3}}, "coverage_aware"),
    ({"algorithm": {"name": "rafed", "deadline_s": 2.0}}, "resources: deadline"),
    ({"algorithm": {"name": "rafed", "bits": 4}}, "compression: quantize"),
    ({"algorithm": {"name": "rafed", "keep": 0.3, "compression": "quantize"}}, "compression: topk"),
    ({"population": {"kind": "alternating", "rounds_per_session": 3}}, "no session would"),
    ({"population": {"kind": "events", "events": [{"round": 0, "join": [0, 1]},
                                                  {"round": 9, "join": [2]}]}}, "never happen"),
    ({"rounds": 4, "population": {"kind": "alternating", "rounds_per_session": 2},
      "initial_model": {"rule": "previous", "pilot_sessions": 2}}, "would never act"),
])
def test_settings_that_cannot_take_effect_are_refused(patch, match):
    with pytest.raises(ValueError, match=match) as err:
        resolve({**RAW, **patch})
    assert "\n" not in str(err.value)


def test_runs_nobody_can_take_part_in_are_refused_before_training():
    with pytest.raises(ValueError, match="more than the 6 clients"):
        open_run({**RAW, "algorithm": {"name": "fedavg", "clients_per_round": 7}})
    with pytest.raises(ValueError, match="no client meets it"):
        open_run({**RAW, "algorithm": {"name": "rafed", "ratios": [1.0, 0.5],
                                                     "resources": "deadline",
                                                     "deadline_s": 1e-9}})


def test_an_unreachable_ray_address_is_refused_at_once():
    import time

    from wirelessfl.report.ray_executor import _reachable

    start = time.perf_counter()
    with pytest.raises(ValueError, match="no Ray cluster answers"):
        _reachable("127.0.0.1:1")
    assert time.perf_counter() - start < 10


def test_sizes_that_drive_work_are_checked_first(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**RAW, "rounds": 2}))
    assert main(["sweep", str(cfg), "--grid", "rounds=1,1.0", "--out", str(tmp_path / "s")]) == 2
    assert "give the same run" in capsys.readouterr().err
    with pytest.raises(ValueError, match="more than the 60000 training samples"):
        open_run({**RAW, "data": {"dataset": "fashion_mnist", "partition": "iid",
                                                "num_clients": 100_000}})
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    rows = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    rows[1]["round_costs"] = rows[1]["round_costs"] * 200_000
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["retime", str(out), "--set", "network.model=tdma"]) == 2
    err = capsys.readouterr().err.strip()
    assert "round costs" in err and len(err.splitlines()) == 1


def _api_cases():
    import numpy as np
    import torch

    from channels.aircomp import AirCompCell
    from channels.rayleigh import simo_rayleigh
    from solvers.beamforming import solve
    from wirelessfl.algorithms.dynamic.initial_model import blend, distances, fingerprint, pilot_model
    from wirelessfl.models.base import UnitGroup, UnitSlice
    from wirelessfl.net.compression import compress
    from wirelessfl.server.optimizers import ServerOptimizer
    from wirelessfl.server.population import AlternatingGroups, Static
    from wirelessfl.server.submodel import Submodel

    h = simo_rayleigh((), 3, 2, np.random.default_rng(0))
    w = {"w": torch.zeros(3, 1)}
    nan = {"w": torch.full((3, 1), float("nan"))}
    group = [UnitGroup("g", 4, (UnitSlice("w", 0, 1),))]
    like = {"w": torch.zeros(4, 2)}
    return [
        (lambda: ServerOptimizer("adam").step(w, {"w": torch.zeros(1, 3)}, None), "shape"),
        (lambda: ServerOptimizer("sgd").step(w, nan, None), "became NaN/Inf"),
        (lambda: ServerOptimizer("sgd").step(w, {"v": torch.zeros(3, 1)}, None), "keys"),
        (lambda: ServerOptimizer("sgd").step(w, {"w": [1, 2, 3]}, None), "tensor"),
        (lambda: Submodel(group, {"g": [0, 0, 1]}, like), "repeat"),
        (lambda: Submodel(group, {"g": [0.5, 1.0]}, like), "integers"),
        (lambda: Submodel(group, {"g": [0, 9]}, like), r"\[0, 4\)"),
        (lambda: Static(clients=[0, 1]).active(-1), "`t`"),
        (lambda: AlternatingGroups(groups=[[0], [1]], rounds_per_session=2).session(-3), "`t`"),
        (lambda: compress({"w": "x"}, "quantize", gen=None), "tensor"),
        (lambda: compress(w, "quantize", gen=3), "gen"),
        (lambda: pilot_model([w, {"w": torch.zeros(2)}]), "shape"),
        (lambda: fingerprint(w, nan, ["w"]), "NaN"),
        (lambda: fingerprint(w, w, ["v"]), "trainable"),
        (lambda: distances(w, [{"v": torch.zeros(3, 1)}]), "keys"),
        (lambda: blend([w, w], torch.tensor([0.5, float("nan")])), "NaN"),
        (lambda: blend([w, w], [0.5, 0.5]), "1-d tensor"),
        (lambda: AirCompCell(np.vstack([h[:2], np.zeros((1, 2))]), np.ones(2), power=10.0).mse,
         "no power scaling"),
        (lambda: AirCompCell(h, np.ones(2), power=10.0).estimate(np.full((3, 4), np.nan),
                                                                  np.random.default_rng(0)), "delta"),
        (lambda: simo_rayleigh((), 3, 2, None), "rng"),
        (lambda: solve(h, seed="x"), "seed"),
        (lambda: solve(h * 1e-170), "too small"),
    ]


@pytest.mark.parametrize("case", range(22))
def test_public_functions_name_the_bad_argument(case):
    call, match = _api_cases()[case]
    from wirelessfl.errors import TrainingDiverged

    with pytest.raises((ValueError, TypeError, TrainingDiverged), match=match) as err:
        call()
    assert "\n" not in str(err.value)


def test_quantising_huge_finite_values_stays_finite():
    import torch

    from wirelessfl.net.compression import compress

    got = compress({"w": torch.tensor([3e38, -3e38, 1.0])}, "quantize", bits=4, gen=None)["w"]
    assert bool(torch.isfinite(got).all()) and got[0] == 3e38 and got[1] == -3e38


def test_a_run_that_ends_cleanly_leaves_no_lock_file_and_a_later_resume_locks_again(tmp_path):
    """The empty .lock used to stay in every finished run folder; it is removed at a clean
    end, and a second writer still finds the folder locked while a run holds it."""
    from wirelessfl.errors import RunFolderError
    from wirelessfl.run.records import RunRecord

    rec = RunRecord(tmp_path / "r")
    with rec.writing({"name": "x"}, 0, "cpu", resume=False):
        assert (tmp_path / "r" / ".lock").exists()
        with pytest.raises(RunFolderError, match="another run"):
            RunRecord(tmp_path / "r")._lock(resume=True)
        rec.save_checkpoint({"round": 0})
    assert not (tmp_path / "r" / ".lock").exists()
    with RunRecord(tmp_path / "r").writing({"name": "x"}, 0, "cpu", resume=True):
        assert (tmp_path / "r" / ".lock").exists()
    assert not (tmp_path / "r" / ".lock").exists()
