import os
import signal

import numpy as np
import pytest
import torch

# A shell without job control starts a background command (`pytest ... &`, nohup, a CI
# runner's detached step) with SIGINT ignored; Python then installs no Ctrl-C handler, and
# every command the tests start inherits the ignore, so the tests that send SIGINT (Ctrl-C)
# saw a command that could not be stopped. The tests' children start with SIGINT's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# runs choose their thread count from the machine's load (threads: auto) unless this is set:
# the suite's numbers must not depend on what else the machine is doing. Under pytest-xdist
# (``-n 2``) each worker process computes on one thread, so two workers share two cores.
THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))


@pytest.fixture(autouse=True)
def _deterministic_threads():
    torch.set_num_threads(THREADS)
    yield


@pytest.fixture(scope="session")
def fmnist():
    """Real Fashion-MNIST (apt-get install dataset-fashion-mnist; .ci/run installs it)."""
    from wirelessfl.data import load_dataset

    return load_dataset("fashion_mnist")


@pytest.fixture(params=["AVX512", "AVX2"], ids=["columns", "rows"])
def stack_layout(request, monkeypatch):
    """The batched engine stacks wide linear weights as on a CPU of this kernel capability.

    Column-major on Intel's AVX-512, row-major on AVX2 (``wirelessfl.models.layers.column_major``),
    whatever the machine running the test: a test that asks for it runs both layouts.
    """
    import functools

    from wirelessfl.engine import batched
    from wirelessfl.models.layers import column_major

    monkeypatch.setattr(batched, "column_major",
                        functools.partial(column_major, capability=request.param,
                                          vendor="GenuineIntel"))
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def interrupt_after(monkeypatch):
    """``arm(exp, n)``: the experiment's algorithm raises KeyboardInterrupt after n rounds."""

    def arm(exp, rounds):
        real, calls = exp.algorithm.apply, []

        def apply(state):
            if len(calls) == rounds:
                raise KeyboardInterrupt
            calls.append(1)
            return real(state)

        monkeypatch.setattr(exp.algorithm, "apply", apply)
        return exp

    return arm


@pytest.fixture
def order_before():
    """A raw config as the runs made before 2026-11-26 ran it: ``batch_order: pcg64`` in its
    ``local`` (each task's, for a multi-task run), the one dated re-key of every run since."""
    from wirelessfl.run.tasks import TASKS

    def before(section):
        return {**(section or {}), "batch_order": "pcg64"}

    def task(t):
        t = {"task": t} if isinstance(t, str) else dict(t)
        known = TASKS.get(t.get("task"), t)
        extra = {"sync_local": before(t.get("sync_local"))} if (
            isinstance(t.get("sync_local"), dict) or isinstance(known.get("sync_local"), dict)) else {}
        return {**t, "local": before(t.get("local")), **extra}

    def order_before(raw):
        if isinstance(raw.get("tasks"), list):
            return {**raw, "tasks": [task(t) for t in raw["tasks"]]}
        return {**raw, "local": before(raw.get("local"))}

    return order_before


def _rows_without_wall(folder):
    from wirelessfl.run.records import RunRecord

    return [{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(folder).rows()]


@pytest.fixture
def cut_and_resume(tmp_path, interrupt_after):
    """``run(raw, after=2)``: the rows (less wall time) of ``raw`` run whole, and cut after
    ``after`` rounds by a KeyboardInterrupt then resumed: ``(full, resumed)``."""
    from wirelessfl.run.kinds import open_run, run_job
    from wirelessfl.run.rounds import RoundsJob

    def run(raw, after=2):
        raw = {**raw, "checkpoint_every": 1}
        run_job(open_run(raw), tmp_path / "full", quiet=True)
        with pytest.raises(KeyboardInterrupt):
            run_job(RoundsJob(interrupt_after(open_run(raw).exp, after)), tmp_path / "cut",
                    quiet=True)
        run_job(open_run(raw), tmp_path / "cut", resume=True, quiet=True)
        return _rows_without_wall(tmp_path / "full"), _rows_without_wall(tmp_path / "cut")

    return run


@pytest.fixture
def cli_error(tmp_path, capsys):
    """``error(raw, *args)``: run ``wirelessfl run`` on ``raw`` (a YAML file) with ``args``;
    asserts exit 2 and one line on stderr, returns it; nothing is written at ``--out``."""
    import yaml

    from wirelessfl.cli import main

    def error(raw, *args):
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(raw))
        out = tmp_path / "o"
        assert main(["run", str(path), *args, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert not out.exists()
        return err

    return error


@pytest.fixture
def kill_9_and_resume(tmp_path):
    """``cut(raw, rows)``: ``wirelessfl run`` of ``raw`` in a real process, SIGKILLed once its
    metrics hold ``rows`` rows, then ``--resume``d to the end; returns the run folder."""
    import signal
    import subprocess
    import sys
    import time

    import yaml

    def cut(raw, rows):
        cfg = tmp_path / "cut.yaml"
        cfg.write_text(yaml.safe_dump(raw))
        out = tmp_path / "cut"
        cmd = [sys.executable, "-m", "wirelessfl", "run", str(cfg), "--out", str(out), "--quiet"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        metrics = out / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= rows:
                break
            time.sleep(0.01)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL  # killed mid-run, not finished
        assert subprocess.run([*cmd, "--resume"], capture_output=True, timeout=300).returncode == 0
        return out

    return cut
