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
