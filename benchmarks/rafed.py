"""RA-Fed / RAM-Fed: round cost against full-model FedAvg, and RAM-Fed's server memory.

    python benchmarks/rafed.py [--model mlp|lenet5|cifar_cnn] [--rounds 3] [--device cpu|cuda]

Target (issue: RA-Fed): a round of N = 100 clients at five ratio levels {1, 1/2, 1/4, 1/8,
1/16} costs no more than the full-model FedAvg round; RAM-Fed's memory is N × d floats off
the compute device, float16 halving it.

Real Fashion-MNIST, Dir(0.5), T = 10 steps of batch 64 on the batched engine (clients of a
level share shapes and train as one stacked group). Printed per method: median seconds per
round over ``--rounds`` rounds after one warm-up round, its ratio to FedAvg's, the mean
realised parameter fraction; for RAM-Fed the store's bytes against N·d·4 and where its
tensors live. Fashion-MNIST must be installed (``dataset-fashion-mnist``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from wirelessfl.engine import client_store
from wirelessfl.run.rounds import prepare

LEVELS = [1.0, 0.5, 0.25, 0.125, 0.0625]


def config(model: str, algorithm: dict, device: str) -> dict:
    shape = {"mlp": {"name": "mlp"}, "lenet5": {"name": "lenet5", "options": {"dropout": 0.0}},
             "cifar_cnn": {"name": "cifar_cnn", "options": {"dropout": 0.0}}}[model]
    return {"name": "bench", "seed": 0, "rounds": 1, "device": device, "engine": "batched",
            "data": {"dataset": "fashion_mnist", "partition": "dirichlet_over_clients",
                     "num_clients": 100, "alpha": 0.5, "min_size": 10},
            "model": shape, "local": {"lr": 0.05, "batch_size": 64, "steps": 10},
            "algorithm": algorithm}


def time_rounds(cfg: dict, rounds: int) -> tuple[float, object, dict]:
    exp = prepare(cfg)
    state, report = exp.algorithm.apply(exp.initial_state())  # warm-up
    times = []
    for _ in range(rounds):
        if exp.device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        state, report = exp.algorithm.apply(state)
        if exp.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times), state, report.logged()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp", choices=["mlp", "lenet5", "cifar_cnn"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = p.parse_args()
    methods = {"fedavg": {"name": "fedavg", "weighting": "uniform"},
               **{m: {"name": m, "ratios": LEVELS}
                  for m in ("rafed", "ramfed", "heterofl", "fedrolex", "fjord")},
               "ramfed_float16": {"name": "ramfed", "ratios": LEVELS, "memory_dtype": "float16"}}
    rows, base = [], None
    for name, algo in methods.items():
        sec, state, extra = time_rounds(config(args.model, algo, args.device), args.rounds)
        base = sec if base is None else base
        row = {"method": name, "seconds_per_round": round(sec, 4),
               "vs_fedavg": round(sec / base, 3),
               "param_fraction": round(extra.get("param_fraction", 1.0), 4)}
        if algo.get("name") == "ramfed":
            d = sum(v.numel() for v in state.params.values())
            nbytes = client_store.nbytes(state.client_states)
            row.update({"memory_bytes": nbytes, "n_times_d_times_4": 100 * d * 4,
                        "memory_devices": sorted({v.device.type for t in state.client_states.values()
                                                  for v in t.values()})})
        rows.append(row)
    print(json.dumps({"model": args.model, "device": args.device, "clients": 100,
                      "levels": LEVELS, "rows": rows}))


if __name__ == "__main__":
    main()
