"""Stateful algorithms at cross-device populations: round time, peak memory, the store's share.

    python benchmarks/population.py --json [--populations 1000 10000] [--algorithms scaffold]
        [--per-round 100] [--rounds 3]

Each (algorithm, population) trains ``rounds`` rounds of ``per_round`` clients of the FCNN on
Fashion-MNIST split into ``population`` clients (IID), in its own process. It reports the
seconds a round after the first (the mean of the rest, each with its evaluation), the
process's peak RSS, and the client store's bytes after the last round (the rows of every
client touched: the state a stateful algorithm keeps). FedAvg, which keeps none, is the
reference. The store lives in memory (issue 94's disk backend is not built yet): this is the
baseline it is measured against. Run it alone on the machine: the round times are wall
clocks (the peak memory is not).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

CHILD = """
import json, resource, sys
from pathlib import Path
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord
raw = json.loads(sys.argv[1])
job = open_run(raw)
run_job(job, Path(sys.argv[2]), quiet=True)
rows = [r for r in RunRecord(Path(sys.argv[2])).rows() if r.get("round")]
walls = [r["wall_s"] for r in rows]
per = (walls[-1] - walls[0]) / max(1, len(walls) - 1) if len(walls) > 1 else float("nan")
store = getattr(getattr(job, "state", None), "client_states", None)
print(json.dumps({"round_s": per, "store_bytes": int(getattr(store, "nbytes", 0) or 0),
                  "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def measure(algorithm: str, population: int, per_round: int, rounds: int) -> dict:
    """One (algorithm, population) in a child process: its round time, peak RSS, store bytes."""
    raw = {"seed": 0, "rounds": rounds, "eval_every": 1,
           "data": {"dataset": "fashion_mnist", "partition": "iid", "num_clients": population},
           "model": {"name": "fcnn"}, "local": {"lr": 0.05, "batch_size": 5, "steps": 2},
           "algorithm": {"name": algorithm, "clients_per_round": per_round}}
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(raw), f"{tmp}/r"],
                             capture_output=True, text=True)
    if out.returncode != 0:
        return {"algorithm": algorithm, "population": population,
                "error": (out.stderr.strip().splitlines() or ["?"])[-1][:200]}
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {"algorithm": algorithm, "population": population, "per_round": per_round,
            "round_s": got["round_s"], "store_mb": got["store_bytes"] / 2**20,
            "peak_rss_gb": got["peak_kb"] * 1024 / 2**30}


def main() -> None:  # noqa: D103
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--algorithms", nargs="+", default=["fedavg", "scaffold", "feddyn", "moon"])
    ap.add_argument("--populations", nargs="+", type=int, default=[1000, 10000])
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = [measure(a, n, args.per_round, args.rounds)
            for n in sorted(args.populations) for a in args.algorithms]
    report = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
              "store": "memory", "rows": rows}
    print(json.dumps(report, indent=None if args.json else 1))


if __name__ == "__main__":
    main()
