"""Client state store: memory off and on the compute device.

    python benchmarks/client_store.py --json [--clients 100] [--per-round 10] [--dtype float16]

A simulated population of ``--clients`` clients each holding two d-vectors (FAdamGC's
(y_i, v_i), SCAFFOLD's c_i and a spare) of the CIFAR ResNet-18 with BatchNorm (d = 11.2 M),
kept by :mod:`wirelessfl.engine.client_store` on the CPU. A round loads the states of
``--per-round`` clients onto the compute device. Printed: the store's bytes (CPU), the
bytes a round puts on the device (``torch.cuda.max_memory_allocated`` on a GPU; the loaded
tensors' bytes on a CPU-only machine, where the device is the CPU) and both for twice the
population, so growth with the population and with the round is visible.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from wirelessfl.engine import client_store
from wirelessfl.models import build_model


def measure(clients: int, per_round: int, dtype: str, device: torch.device) -> dict:
    model = build_model("resnet18_bn", (3, 32, 32), 10, seed=0)
    like = {k: v.to(device) for k, v in model.params().items()}
    d = sum(v.numel() for v in like.values())
    t = time.perf_counter()
    states = {i: {"y": client_store.store({k: torch.zeros_like(v) for k, v in like.items()}, dtype),
                  "v": client_store.store({k: torch.zeros_like(v) for k, v in like.items()}, dtype)}
              for i in range(clients)}
    build_s = time.perf_counter() - t
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    loaded = [{name: client_store.load(tree, like) for name, tree in states[i].items()}
              for i in range(per_round)]
    if device.type == "cuda":
        torch.cuda.synchronize()
        device_bytes = torch.cuda.max_memory_allocated() - base
    else:
        device_bytes = sum(v.numel() * v.element_size() for c in loaded for t in c.values()
                           for v in t.values())
    on_device = sum(v.device.type == device.type for s in states.values() for t in s.values()
                    for v in t.values())
    return {"clients": clients, "per_round": per_round, "d": d, "dtype": dtype,
            "store_bytes_cpu": sum(client_store.nbytes(s) for s in states.values()),
            "store_tensors_on_compute_device": on_device if device.type == "cuda" else None,
            "round_device_bytes": device_bytes, "build_seconds": build_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--per-round", type=int, default=10)
    p.add_argument("--dtype", default="float16", choices=sorted(client_store.STORE_DTYPES))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    device = torch.device(args.device)
    rows = [measure(n, args.per_round, args.dtype, device) for n in (args.clients // 2, args.clients)]
    rows.append(measure(args.clients, 2 * args.per_round, args.dtype, device))
    print(json.dumps({"device": str(device), "runs": rows}, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
