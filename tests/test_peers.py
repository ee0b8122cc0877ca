"""The peers benchmark's own parts (``benchmarks/peers/``): its workload, driver and summary.

The peers themselves (Flower, pfl-research) live in their own environments and are not
installed here; the driver runs end to end with wirelessfl alone.
"""

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

import run as peers  # noqa: E402
import workload  # noqa: E402

FMNIST = Path(workload.DEFAULT_DATA)


def test_shards_are_an_equal_disjoint_cover_fixed_by_the_seed():
    parts = workload.shards(1000, seed=3)
    assert [len(p) for p in parts] == [60] * 1000
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(60_000))
    assert all(np.array_equal(a, b) for a, b in zip(parts, workload.shards(1000, seed=3)))
    assert not np.array_equal(parts[0], workload.shards(1000, seed=4)[0])


def test_idx_reader_gives_scaled_images_and_labels(tmp_path):
    images = (np.arange(2 * 784) % 256).astype(np.uint8).reshape(2, 28, 28)
    for split in ("train", "t10k"):
        head = bytes([0, 0, 8, 3]) + b"".join(n.to_bytes(4, "big") for n in (2, 28, 28))
        (tmp_path / f"{split}-images-idx3-ubyte.gz").write_bytes(gzip.compress(head + images.tobytes()))
        head = bytes([0, 0, 8, 1]) + (2).to_bytes(4, "big")
        (tmp_path / f"{split}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(head + bytes([7, 1])))
    x, y, xt, yt = workload.fashion_mnist(tmp_path)
    assert x.shape == (2, 784) and x.dtype == np.float32 and y.tolist() == [7, 1]
    np.testing.assert_allclose(x, (images.reshape(2, 784) / 255.0 - 0.5) / 0.5, atol=1e-6)
    assert np.array_equal(xt, x) and yt.tolist() == [7, 1]


def test_summary_speedups_and_accuracy_gaps():
    runs = [{"framework": "wirelessfl", "round_seconds": [9.0, 1.0, 1.2, 0.8], "accuracy": [0.7, 0.8]},
            {"framework": "wirelessfl", "round_seconds": [9.0, 2.0, 2.0], "accuracy": [0.7, 0.82]},
            {"framework": "flower", "round_seconds": [9.0, 3.0, 3.0], "accuracy": [0.7, 0.80]},
            {"framework": "pfl", "error": "exit 1: boom"}]
    s = peers.summarize(runs)
    assert s["wirelessfl"]["seconds_per_round"] == pytest.approx(1.5)  # median of 1.0 and 2.0
    assert s["flower"]["wirelessfl_speedup"] == pytest.approx(3.0 / 1.5)
    assert s["flower"]["accuracy_gap_points"] == pytest.approx(1.0)
    assert s["pfl"] == {"errors": ["exit 1: boom"]}
    assert s["flower"]["cpu_seconds_per_round"] is None  # not measured: no CPU ratio
    assert "wirelessfl_cpu_speedup" not in s["flower"] and "same_learning" not in s["flower"]


def test_summary_cpu_speedups_and_learning_over_seeds():
    def run(fw, wall, cpu, acc):
        return {"framework": fw, "round_seconds": [5.0, wall], "round_cpu_seconds": [9.0, cpu],
                "accuracy": [0.5, acc]}

    runs = ([run("wirelessfl", 1.0, 2.0, a) for a in (0.70, 0.72, 0.74)]
            + [run("pfl", 2.5, 5.0, a) for a in (0.71, 0.73, 0.75)]
            + [run("flower-run", 3.0, 6.0, a) for a in (0.80, 0.81, 0.82)])
    s = peers.summarize(runs)
    assert s["pfl"]["wirelessfl_speedup"] == pytest.approx(2.5)
    assert s["pfl"]["wirelessfl_cpu_speedup"] == pytest.approx(2.5)
    assert s["pfl"]["same_learning"]                       # 1 point, inside the seed spread
    assert not s["flower-run"]["same_learning"]            # 9 points: not
    assert s["flower-run"]["accuracy_gap_two_se_points"] == pytest.approx(
        200 * ((0.02 ** 2 + 0.01 ** 2) / 3) ** 0.5)


def _call_keywords(path: Path, name: str) -> dict:
    """The literal keyword arguments of the (last) call of ``name`` in the script ``path``."""
    import ast

    tree = ast.parse(path.read_text())
    out: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == name:
            out = {k.arg: (ast.literal_eval(k.value) if isinstance(k.value, ast.Constant)
                           else ast.unparse(k.value)) for k in node.keywords}
    return out


def test_each_peer_is_configured_for_the_workload_and_nothing_more():
    """The peers' scripts do the work the workload names and no other (their libraries are not
    installed here, so the calls are read from the source): pfl evaluates no users' training
    data after the first iteration and no validation cohort, the test set every round; Flower
    trains every node and runs no federated evaluation, through both entry points; the docs
    state the same."""
    here = ROOT / "benchmarks" / "peers"
    sys.path.insert(0, str(here))
    algo = _call_keywords(here / "pfl_sim.py", "NNAlgorithmParams")
    assert algo["evaluation_frequency"] == "EVALUATION_FREQUENCY"
    assert algo["val_cohort_size"] == 0 and algo["train_cohort_size"] == "args.clients"
    import ast
    consts = {t.id: ast.literal_eval(n.value) for n in ast.parse((here / "pfl_sim.py").read_text()).body
              if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
              and isinstance(n.value, ast.Constant)}
    assert consts["EVALUATION_FREQUENCY"] > 10_000        # no per-user evaluation after round 1
    assert _call_keywords(here / "pfl_sim.py", "CentralEvaluationCallback")["frequency"] == 1
    fedavg = _call_keywords(here / "flower_app.py", "FedAvg")
    assert fedavg["fraction_train"] == 1.0 and fedavg["fraction_evaluate"] == 0.0
    assert "flower_app import" in (here / "flower_sim.py").read_text()   # one app, two entries
    assert "flower_app.py" in (here / "flower_run.py").read_text()
    assert set(peers.FRAMEWORKS) == {"wirelessfl", "flower-run", "flower", "pfl"}
    guide = (ROOT / "docs" / "guide" / "development.md").read_text()
    assert "evaluation_frequency" in guide and "flwr run" in guide


@pytest.mark.slow  # a benchmark harness end to end (~10-25 s): python -m pytest -m slow
@pytest.mark.skipif(not FMNIST.is_dir(), reason="needs Fashion-MNIST (dataset-fashion-mnist)")
def test_driver_runs_wirelessfl_on_the_workload_and_reports_json():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peers" / "run.py"), "bench",
                           "--frameworks", "wirelessfl", "--clients", "600", "--steps", "2",
                           "--rounds", "2", "--repeats", "1", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    (rec,) = out["runs"]
    assert rec["engine"] == "BatchedExecutor" and len(rec["round_seconds"]) == 2
    assert 0.3 < rec["accuracy"][-1] <= 1.0  # two rounds of 600 clients x 2 steps learn
    assert out["summary"]["wirelessfl"]["seconds_per_round"] > 0


def test_driver_rejects_bad_arguments_with_one_line():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peers" / "run.py"), "bench",
                           "--load", "-1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--load must be in [0, 64]" in proc.stderr
    assert "Traceback" not in proc.stderr


def _session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``, from ``/proc``."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_load_is_one_background_job_in_its_own_session_and_stops_whole():
    with peers.Load(3) as load:
        (leader,) = load.procs
        sid = leader.pid
        assert os.getsid(leader.pid) == sid != os.getsid(0)  # not this driver's session
        deadline = time.monotonic() + 10
        while len(_session_members(sid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_session_members(sid)) == 3
    deadline = time.monotonic() + 10
    while _session_members(sid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _session_members(sid) == []


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_flwr_run_stops_every_process_of_its_own_flower_home_and_no_other(tmp_path):
    """``flwr run`` starts a detached SuperLink that would outlive the run: the harness stops
    every process started under its run's FLWR_HOME, and only those."""
    import flower_run

    code = "import time\ntime.sleep(60)"
    mine = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                            env={**os.environ, "FLWR_HOME": str(tmp_path / "mine")})
    other = subprocess.Popen([sys.executable, "-c", code],
                             env={**os.environ, "FLWR_HOME": str(tmp_path / "other")})
    try:
        time.sleep(0.2)
        flower_run._stop_everything_under(str(tmp_path / "mine"))
        assert mine.wait(timeout=10) != 0
        assert other.poll() is None
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()
