"""Kill -9 at random points, resume, and compare with the uninterrupted run (issue 32).

For each run kind (a dynamic-clients session run, a RAM-Fed run, a FedAST multi-task run) the
uninterrupted run is made once; then ``--trials`` times a fresh run is started in a
subprocess, killed with SIGKILL after a random delay, resumed (``--resume``) until it
finishes, and its metric rows (wall-clock fields left out) are compared with the
uninterrupted ones. Prints JSON: per kind, the trials, how many resumed to identical rows,
and the kill times.

    python benchmarks/kill_resume.py --trials 10 --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

KINDS = {
    "sessions": {"seed": 3, "rounds": 90, "checkpoint_every": 1,
                 "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 30},
                 "model": {"name": "fcnn", "options": {"hidden": 8}},
                 "local": {"lr": 0.05, "batch_size": 10, "steps": 2},
                 "population": {"kind": "alternating", "rounds_per_session": 3},
                 "initial_model": {"rule": "proposed", "pilot_sessions": 1}},
    "ramfed": {"seed": 4, "rounds": 90, "checkpoint_every": 1,
               "data": {"dataset": "synthetic", "num_clients": 10, "samples_per_client": 30},
               "model": {"name": "fcnn", "options": {"hidden": 16}},
               "local": {"lr": 0.05, "batch_size": 10, "steps": 2},
               "algorithm": {"name": "ramfed", "ratios": [1.0, 0.5, 0.25]}},
    "fedast": {"tasks": ["synthetic_linear", "synthetic_linear"], "seed": 1, "device": "cpu",
               "pool": {"clients": 20, "available": 10},
               "method": {"name": "fedast", "requests": 8, "ratio": 4}, "max_rounds": 90},
}
WALL = ("wall_s", "wall_time_s", "wall")


def _rows(folder: Path) -> list[dict]:
    rows = [json.loads(s) for s in (folder / "metrics.jsonl").read_text().splitlines() if s]
    return [{k: v for k, v in r.items() if k not in WALL} for r in rows]


def _cmd(cfg: Path, out: Path, resume: bool) -> list[str]:
    return [sys.executable, "-m", "wirelessfl.cli", "run", str(cfg), "--out", str(out), "--quiet",
            "--checkpoint-every", "0", *(["--resume"] if resume else [])]


def trial(cfg: Path, out: Path, delay: float) -> tuple[Path, str]:
    """Start, SIGKILL after ``delay`` s, resume to the end; the run folder and where it died.

    Where: ``before`` (no run folder yet: killed at start-up), ``first round`` (a folder
    without a checkpoint), ``mid-run`` (rows and a checkpoint, not finished) or ``finished``.
    """
    proc = subprocess.Popen(_cmd(cfg, out, False), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(delay)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    where = ("before" if not out.exists() else "finished" if (out / "summary.json").exists()
             else "mid-run" if any(out.glob("checkpoint*")) else "first round")
    if not out.exists():  # killed before the folder was made: start again
        subprocess.run(_cmd(cfg, out, False), check=True, capture_output=True)
    elif not (out / "summary.json").exists():
        done = subprocess.run(_cmd(cfg, out, True), capture_output=True, text=True)
        if done.returncode and "holds no run" in done.stderr + done.stdout:
            subprocess.run(_cmd(cfg, out, False), check=True, capture_output=True)
        elif done.returncode:
            raise RuntimeError(done.stderr[-400:])
    return out, where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for kind, raw in KINDS.items():
            cfg = root / f"{kind}.yaml"
            cfg.write_text(yaml.safe_dump({**raw, "name": kind}))
            full = root / f"{kind}-full"
            start = time.perf_counter()
            proc = subprocess.Popen(_cmd(cfg, full, False), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
            first = None  # when the first checkpoint appears: training has started
            while proc.poll() is None:
                if first is None and (full / "checkpoint.pt").exists():
                    first = time.perf_counter() - start
                time.sleep(0.01)
            if proc.returncode:
                raise RuntimeError(proc.stderr.read().decode()[-400:])
            span = time.perf_counter() - start
            first = span / 2 if first is None else first
            want = _rows(full)
            same, delays, where = 0, [], {}
            for i in range(args.trials):
                # mostly while training (after the first checkpoint), some at start-up
                delay = (rng.uniform(0.3, first) if i < args.trials // 5
                         else rng.uniform(first, first + 0.75 * (span - first)))
                out, w = trial(cfg, root / f"{kind}-{i}", delay)
                same += _rows(out) == want
                delays.append(round(delay, 2))
                where[w] = where.get(w, 0) + 1
            report[kind] = {"trials": args.trials, "identical": same, "run_s": round(span, 2),
                            "first_checkpoint_s": round(first, 2),
                            "killed": where, "kill_after_s": delays}
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
