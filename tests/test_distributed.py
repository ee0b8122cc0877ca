"""Ray executor: the same runs and tables as the local executor; failed runs retried and resumed."""

import json
import os
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from wirelessfl.report import load_figures, regenerate, run_folder  # noqa: E402
from wirelessfl.report.ray_executor import RayOptions, init_keeping_handlers  # noqa: E402
from wirelessfl.run.records import RunRecord  # noqa: E402

TOY = """
base:
  seed: 0
  rounds: {rounds}
  checkpoint_every: 1
  data: {{dataset: synthetic, num_clients: 6, samples_per_client: 40}}
  model: {{name: fcnn, options: {{hidden: 16, dropout: 0.0}}}}
  local: {{lr: 0.05, batch_size: 10, steps: 3}}
  algorithm: {{name: fedavg}}
scales:
  quick: {{seeds: [0, 1], overrides: {{}}}}
  paper: {{seeds: [0, 1], overrides: {{}}}}
figures:
  toy:
    title: toy
    kind: final_accuracy
    last: 2
    panels: {{a: {{}}}}
    series:
      FedAvg: {{}}
      FedProx (w/o decay): {{algorithm: {{name: fedprox, mu: 0.1}}}}
"""


@pytest.fixture
def toy(tmp_path, monkeypatch):
    def make(rounds):
        exp = tmp_path / "experiments"
        (exp / "toy").mkdir(parents=True, exist_ok=True)
        (exp / "toy" / "figures.yaml").write_text(TOY.format(rounds=rounds))
        monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(exp))
        return tmp_path
    return make


@pytest.fixture(scope="module")
def local_ray():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    init_keeping_handlers(ray, num_cpus=2, include_dashboard=False, log_to_driver=False)
    # Ray's own SIGTERM handler (sys.exit) must not replace the process's: a SIGTERM of a
    # Ray sweep ends with the one line and 143, and later tests' signals reach their handlers
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    yield
    ray.shutdown()


def _outputs(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix in (".csv", ".md")}


@pytest.mark.slow  # other processes started, killed or signalled: CI's second step
def test_ray_executor_equals_local_executor(toy, local_ray):
    root = toy(3)
    regenerate("toy", "quick", root / "local", quiet=True, log=lambda m: None)
    regenerate("toy", "quick", root / "ray", quiet=True, log=lambda m: None, ray=RayOptions())
    assert sorted(os.listdir(root / "local" / "runs")) == sorted(os.listdir(root / "ray" / "runs"))
    assert _outputs(root / "local") == _outputs(root / "ray")
    assert len(os.listdir(root / "ray" / "runs")) == 4


@pytest.mark.slow
def test_a_run_killed_on_a_ray_worker_is_resumed_not_restarted(toy, local_ray):
    """SIGKILL the worker mid-run: Ray retries the task, which resumes from the checkpoint."""
    root = toy(400)
    (fig,) = load_figures("toy", "quick", ["toy"])
    target = run_folder(root / "ray", fig.runs[0])
    logs = []
    worker = threading.Thread(target=regenerate, args=("toy", "quick", root / "ray"),
                              kwargs={"quiet": True, "log": logs.append, "ray": RayOptions()})
    worker.start()
    while not (target / "metrics.jsonl").is_file() or \
            len((target / "metrics.jsonl").read_text().splitlines()) < 20:
        time.sleep(0.05)
    pids = [p.pid for p in _ray_workers() if _holds(p, target)]
    assert pids
    os.kill(pids[0], signal.SIGKILL)
    before = (target / "metrics.jsonl").read_text().splitlines()
    worker.join()
    rows = RunRecord(target).rows()
    assert [r["round"] for r in rows] == list(range(401))   # every round once, none lost
    assert json.loads((target / "summary.json").read_text())["rounds"] == 400
    after = (target / "metrics.jsonl").read_text().splitlines()
    assert len(before) < 401
    # the rounds finished before the kill are kept as written (their wall-clock stamps
    # too): the retry resumed from the checkpoint instead of training them again
    assert after[:len(before) - 1] == before[:-1]
    regenerate("toy", "quick", root / "local", quiet=True, log=lambda m: None)
    assert _outputs(root / "local") == _outputs(root / "ray")


def _ray_workers():
    """Every other process (the Ray worker holding the run folder's lock is among them)."""
    import psutil

    return [p for p in psutil.process_iter() if p.pid != os.getpid()]


def _holds(proc, folder):
    try:
        return any(str(folder) in f.path for f in proc.open_files())
    except Exception:
        return False


def test_sweep_over_a_grid_reuses_finished_runs(tmp_path, capsys):
    from wirelessfl.cli import main

    argv = ["sweep", "fedavg_fmnist", "--grid", "local.lr=0.01,0.1", "--grid",
            "algorithm.name=fedavg,fedprox", "--seeds", "0,1", "--set", "rounds=1",
            "--set", "data.num_clients=4", "--out", str(tmp_path / "sw"), "--quiet"]
    assert main(argv) == 0
    table = (tmp_path / "sw" / "sweep.md").read_text()
    assert "local.lr=0.1, algorithm.name=fedprox" in table and table.count("| local.lr=") == 4
    assert len(os.listdir(tmp_path / "sw" / "runs")) == 8
    assert main(argv) == 0
    assert "0 of 8 runs to do" in capsys.readouterr().out
    assert main([*argv[:-3], "--grid", "lr", "--out", str(tmp_path / "x")]) == 2
    # a repeated seed, value or key would count one run twice in the mean ± std
    for bad, says in ((["--grid", "rounds=1", "--seeds", "0,0"], "0 is given twice"),
                      (["--grid", "rounds=1,1"], "1 is given twice"),
                      (["--grid", "rounds=1", "--grid", "rounds=2"], "two --grid")):
        assert main(["sweep", "fedavg_fmnist", *bad, "--out", str(tmp_path / "y")]) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "y").exists()


def test_ray_addresses_are_checked_before_anything_runs():
    """--address: auto or HOST:PORT (names, IPv4, [IPv6], optional ray://); anything else
    is refused up front, even when every run is already finished."""
    for good in ("auto", "127.0.0.1:6379", "ray://head-node:10001", "[::1]:6379"):
        RayOptions(address=good)
    for bad in ("bad::addr", "host", "host:0", "host:70000", " auto", "-x:1", "a b:1"):
        with pytest.raises(ValueError, match="--address"):
            RayOptions(address=bad)


@pytest.mark.slow
def test_ctrl_c_cancels_the_ray_tasks_of_a_cluster_it_did_not_start(toy, local_ray):
    """Ray already running (as a cluster would be): Ctrl-C in the driver cancels its tasks,
    so the runs stop (no row written after, none finished) instead of going on without it;
    the same command then resumes them to the end."""
    root = toy(400)
    (fig,) = load_figures("toy", "quick", ["toy"])
    folders = [run_folder(root / "ray", r) for r in fig.runs]
    timer = threading.Thread(target=lambda: (
        _wait_rows(folders[0], 10), os.kill(os.getpid(), signal.SIGINT)))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        regenerate("toy", "quick", root / "ray", quiet=True, log=lambda m: None,
                   ray=RayOptions())
    timer.join()
    time.sleep(3)
    sizes = [f.joinpath("metrics.jsonl").stat().st_size if f.exists() else 0 for f in folders]
    time.sleep(3)
    assert sizes == [f.joinpath("metrics.jsonl").stat().st_size if f.exists() else 0
                     for f in folders]
    assert not any((f / "summary.json").exists() for f in folders)
    regenerate("toy", "quick", root / "ray", quiet=True, log=lambda m: None, ray=RayOptions())
    assert all(json.loads((f / "summary.json").read_text())["rounds"] == 400 for f in folders)


def _wait_rows(folder, n):
    while not (folder / "metrics.jsonl").is_file() or \
            len((folder / "metrics.jsonl").read_text().splitlines()) < n:
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_of_a_ray_sweep_it_started_ends_with_one_line_and_143(toy):
    """``ray.init`` in the driver installs Ray's SIGTERM handler (``sys.exit(15)``); the
    command keeps its own, so SIGTERM cancels the tasks and ends as every other run does."""
    import subprocess
    import sys

    root = toy(400)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wirelessfl", "figures", "toy", "--scale", "quick", "--quiet",
         "--executor", "ray", "--out", str(root / "ray")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        (fig,) = load_figures("toy", "quick", ["toy"])
        deadline = time.monotonic() + 120
        while not any((run_folder(root / "ray", r) / "metrics.jsonl").is_file()
                      for r in fig.runs):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("terminated (SIGTERM); finished runs are kept")
