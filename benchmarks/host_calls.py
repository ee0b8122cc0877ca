"""Host work of one round, fitted against clients and local steps: Python calls and aten calls.

    PYTHONPATH=. python benchmarks/host_calls.py --json [--out FILE] [--algorithms fedavg ...]
    PYTHONPATH=. python benchmarks/host_calls.py --quick --json    # C in {8, 24}, H in {1, 2}

For each algorithm (FedAvg, HFedAvg N = 4, HIST N = 4, SCAFFOLD, FAdamGC, FedAvg over the air,
RA-Fed, MOON) one round on the FCNN (the MLP for RA-Fed), batched engine, ``replay: on``, one
thread, ``low_rank: off`` (the path a GPU takes), batch 50, at every C clients x H local steps
of the grid (C in {16, 60, 240}, H in {2, 4}; E = 5 edge rounds for the hierarchical ones) is
counted twice after two warm-up rounds (a recorded step's first replay is checked against
the eager step, which a stateful rule's short rounds may reach only in their second):

- ``python``: cProfile's ``total_calls`` (every Python and C function call the interpreter
  makes), the host work that does not move to the device;
- ``aten``: ``torch.profiler``'s ``aten::`` events, the operators (on a GPU, each one or
  more kernel launches).

Both are fitted by least squares as ``a + b·C + c·H`` (``per_client`` = b, ``per_step`` =
c). Counts do not depend on the machine: they are deterministic for a given config (the
same numbers on a CPU as on a GPU, where each call costs real time), so a CPU measures what a
GPU round pays in host work. The test-set evaluation is off (``eval_every`` past the round):
it is not part of a round's training.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np
import torch

#: The algorithms counted, as config overrides of the common base.
ALGORITHMS: dict[str, dict] = {
    "FedAvg": {"algorithm": {"name": "fedavg"}},
    "HFedAvg N=4": {"algorithm": {"name": "hist", "cells": 4, "split": False, "edge_rounds": 5}},
    "HIST N=4": {"algorithm": {"name": "hist", "cells": 4, "split": True, "edge_rounds": 5}},
    "SCAFFOLD": {"algorithm": {"name": "scaffold"}},
    "FAdamGC": {"algorithm": {"name": "fadamgc"}},
    "FedAvg over the air": {"algorithm": {"name": "fedavg"},
                            "network": {"model": "aircomp", "aggregation": "over_the_air"}},
    "RA-Fed": {"algorithm": {"name": "rafed"}, "model": {"name": "mlp"}},
    "MOON": {"algorithm": {"name": "moon"}},
}
CLIENTS, STEPS = (16, 60, 240), (2, 4)
QUICK_CLIENTS, QUICK_STEPS = (8, 24), (1, 2)


def config(algo: str, clients: int, steps: int, dataset: str = "fashion_mnist",
           data_dir: str | None = None) -> dict:
    """The resolved-config input of one count: ``algo`` at C clients and H local steps."""
    over = ALGORITHMS[algo]
    data = {"dataset": dataset, "partition": "shards", "num_clients": clients,
            **({"data_dir": data_dir} if data_dir else {})}
    return {"seed": 0, "device": "cpu", "engine": "batched", "replay": "on", "low_rank": "off",
            "threads": 1,
            "rounds": 2, "eval_every": 1000,
            "data": data, "model": over.get("model", {"name": "fcnn"}),
            "local": {"lr": 0.01, "batch_size": 50, "steps": steps},
            "algorithm": dict(over["algorithm"]),
            **({"network": over["network"]} if "network" in over else {})}


def count(raw: dict) -> dict:
    """Python and aten calls of the third and fourth rounds of the run ``raw`` describes."""
    from torch.profiler import ProfilerActivity, profile

    from wirelessfl.run.kinds import open_run

    exp = open_run(raw).exp
    state = exp.initial_state()
    for _ in range(2):  # warm-up: records, their first (checked) replays, caches
        state, _ = exp.algorithm.apply(state)
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    state, _ = exp.algorithm.apply(state)  # the next round (a client store moves on)
    prof.disable()
    seconds = time.perf_counter() - t
    python = pstats.Stats(prof).total_calls  # type: ignore[attr-defined]
    with profile(activities=[ProfilerActivity.CPU]) as tp:
        exp.algorithm.apply(state)
    aten = sum(e.count for e in tp.key_averages() if e.key.startswith("aten::"))
    return {"python": int(python), "aten": int(aten), "seconds": seconds}


def fit(points: list[dict], key: str) -> dict:
    """Least-squares ``a + b·C + c·H`` of ``key`` over the points (C, H, counts)."""
    a = np.array([[1.0, p["clients"], p["steps"]] for p in points])
    y = np.array([p[key] for p in points], dtype=float)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    return {"base": round(float(coef[0]), 1), "per_client": round(float(coef[1]), 2),
            "per_step": round(float(coef[2]), 1)}


def measure(algo: str, clients=CLIENTS, steps=STEPS, **data) -> dict:
    """Every grid point of ``algo`` and the two fits."""
    points = []
    for c in clients:
        for h in steps:
            points.append({"clients": c, "steps": h, **count(config(algo, c, h, **data))})
            print(f"  {algo} C={c} H={h}: {points[-1]['python']} Python, {points[-1]['aten']} aten "
                  f"({points[-1]['seconds']:.2f} s)", file=sys.stderr, flush=True)
    return {"algorithm": algo, "points": points, "python": fit(points, "python"),
            "aten": fit(points, "aten")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=list(ALGORITHMS),
                   metavar="NAME")
    p.add_argument("--quick", action="store_true", help="a smaller grid (C 8, 24; H 1, 2)")
    p.add_argument("--data-dir", help="folder with the Fashion-MNIST IDX files")
    p.add_argument("--json", action="store_true", help="print the JSON report")
    p.add_argument("--out", help="also write the JSON report to this file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    grid = (QUICK_CLIENTS, QUICK_STEPS) if args.quick else (CLIENTS, STEPS)
    rows = [measure(a, *grid, data_dir=args.data_dir) for a in args.algorithms]
    report = {"grid": {"clients": list(grid[0]), "steps": list(grid[1])}, "rows": rows}
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    if args.json:
        print(text)
    for r in rows:
        print(f"{r['algorithm']:>22}: Python {r['python']['per_client']:8.2f}/client "
              f"{r['python']['per_step']:8.1f}/step; aten {r['aten']['per_client']:7.2f}/client "
              f"{r['aten']['per_step']:7.1f}/step", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
