"""Session-start cost of Algorithm 1 (dynamic-clients issue target: fingerprints ≤ 5%).

    python benchmarks/sessions.py --json [--sessions 4] [--rounds-per-session 50]

Workload: the quick dynamic-clients setting on real Fashion-MNIST: the linear model, two
groups of 20 clients with disjoint labels (A: 0-4, B: 5-9), full participation, T rounds per
session, FedAvg with 10 local steps of batch 64, rule ``proposed`` (P = 1, V = 1, 5 steps of
batch 128). It reports the wall seconds spent in the session-start hook (storing, resetting,
fingerprint rounds, similarity and blend) against the whole run, per session, and the bytes
of the session store against sessions × model size.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from wirelessfl.algorithms.dynamic.sessions import session_store_bytes
from wirelessfl.run.config import resolve
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob, prepare
from wirelessfl.run.shell import execute


def measure(sessions: int, rounds_per_session: int, rule: str = "proposed") -> dict:
    """Seconds in the session-start hook vs the whole run, and the store's bytes."""
    cfg = resolve({
        "name": "bench", "seed": 0, "rounds": sessions * rounds_per_session,
        "data": {"dataset": "fashion_mnist", "partition": "two_group", "num_clients": 40},
        "model": {"name": "linear"}, "local": {"lr": 0.01, "batch_size": 64, "steps": 10},
        "algorithm": {"name": "fedavg"}, "engine": "batched", "device": "cpu",
        "population": {"kind": "alternating", "rounds_per_session": rounds_per_session},
        "initial_model": {"rule": rule}})
    job = RoundsJob(prepare(cfg))
    hook, spent = job.starts, []

    class Timed:  # the run's hook, timed (its attributes read through)
        def __call__(self, state, t, session):
            t0 = time.perf_counter()
            out = hook(state, t, session)
            spent.append(time.perf_counter() - t0)
            return out

        def __getattr__(self, name):
            return getattr(hook, name)

        def __setattr__(self, name, value):
            setattr(hook, name, value)

    job.starts = Timed()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        execute(RunRecord(Path(tmp) / "run"), job, resume=False, quiet=True)
        total = time.perf_counter() - t0
    w = sum(v.numel() * v.element_size() for v in job.state.params.values())
    return {"rule": rule, "sessions": sessions, "rounds_per_session": rounds_per_session,
            "run_seconds": total, "hook_seconds": sum(spent),
            "hook_share_of_run": sum(spent) / total,
            "hook_seconds_per_session": sum(spent) / max(1, len(spent)),
            "session_seconds": (total - sum(spent)) / sessions,
            "hook_vs_session": (sum(spent) / max(1, len(spent))) / ((total - sum(spent)) / sessions),
            "store_bytes": session_store_bytes(hook), "model_bytes": w}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--rounds-per-session", type=int, default=50)
    args = p.parse_args()
    out = measure(args.sessions, args.rounds_per_session)
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
