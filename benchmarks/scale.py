"""Many clients: a FedAvg round of 1,000 and 10,000 FCNN clients, memory and seconds (issue 34).

    python benchmarks/scale.py --json [--clients 1000 10000] [--rounds 2] [--device cpu]

Each setting runs in a fresh interpreter (so its peak memory is its own): Fashion-MNIST split
IID over the population, the FCNN 784-300-10, one local step of batch 6 per client (10,000
clients hold 6 samples each), every client trained each round on the batched engine with its
default chunking (as many stacked clients as fit its memory budget). Reported per setting:
seconds per round (median after one warm-up round), seconds per trained client, the
process's peak resident memory, and the stacked chunk size. Also a population of 10,000 of
which 1,000 train per round: its cost should be that of 1,000 clients, not of 10,000.

Linear scaling means the per-client cost at 10,000 is within 1.3x of that at 1,000. FedAvg
averages the pseudo-gradients as each chunk finishes (:class:`wirelessfl.engine.fold.DeltaFold`),
so the peak memory is set by the chunk, not by the population: on the 2-core machine 0.90 GB
for 1,000 and 1.40 GB for 10,000 clients (10.5 GB at 10,000 before the fold), 0.27 ms per
client at either size with chunks of 281 (256 MB of parameters; 2026-11-26).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

WORK = r"""
import json, resource, sys, time
import numpy as np
import torch
from wirelessfl.run.config import resolve
from wirelessfl.run.rounds import prepare
population, trained, rounds, device = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                       sys.argv[4])
max_batch = None if sys.argv[5] == "auto" else int(sys.argv[5])
exp = prepare(resolve({
    "seed": 0, "device": device, "engine": "batched", "max_batch": max_batch,
    "data": {"dataset": "fashion_mnist", "partition": "iid", "num_clients": population},
    "model": {"name": "fcnn"}, "local": {"lr": 0.05, "batch_size": 6, "steps": 1},
    "algorithm": {"name": "fedavg", "clients_per_round": trained}}))
state, _ = exp.algorithm.apply(exp.initial_state())   # warm-up
times = []
for _ in range(rounds):
    t = time.perf_counter()
    state, _ = exp.algorithm.apply(state)
    times.append(time.perf_counter() - t)
from wirelessfl.engine.client import ClientTask, LocalHParams
probe = ClientTask(0, exp.model.params(), np.arange(60_000 // population), 0)
chunk = exp.algorithm.env.executor.chunk_size(probe, LocalHParams(batch_size=6),
                                               exp.splits.train)
sec = float(np.median(times))
print(json.dumps({"population": population, "trained": trained, "seconds_per_round": sec,
                  "ms_per_trained_client": 1e3 * sec / trained,
                  "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "chunk": min(chunk, trained),
                  "finite": all(bool(torch.isfinite(v).all()) for v in state.params.values())}))
"""


def one(population: int, trained: int, rounds: int, device: str,
        max_batch: str = "auto") -> dict:
    out = subprocess.run([sys.executable, "-c", WORK, str(population), str(trained),
                          str(rounds), device, max_batch], capture_output=True, text=True)
    if out.returncode:
        return {"population": population, "trained": trained,
                "error": out.stderr.strip().splitlines()[-1][:300]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-batch", default="auto", help="stacked clients per chunk (auto: the "
                   "engine's memory budget)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = [one(n, n, args.rounds, args.device, args.max_batch) for n in args.clients]
    big, small = max(args.clients), min(args.clients)
    rows.append(one(big, small, args.rounds, args.device, args.max_batch))
    full = {r["population"]: r for r in rows if r["population"] == r["trained"] and "error" not in r}
    report = {"device": args.device, "rows": rows}
    if big in full and small in full and big != small:
        report["per_client_cost_ratio"] = (full[big]["ms_per_trained_client"]
                                           / full[small]["ms_per_trained_client"])
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
