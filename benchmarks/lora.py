"""GPT-2 + LoRA local training: loop against batched engine, seconds per round.

    python benchmarks/lora.py [--size tiny|medium|small] [--clients 10] [--samples 64]
                              [--length 128] [--batch 32] [--device cpu|cuda]

One round of ``--clients`` clients, each one local epoch over ``--samples`` token sequences
of ``--length`` (batch ``--batch``; SST-2 at n = 100 is about 670 samples per client), on a
GPT-2 built from a config (``small`` is GPT-2 small's architecture, 124M; weights random:
speed does not depend on them) with LoRA r = 16 on the four projections (``docs/papers/fadamgc.md``
§4.2). The same tasks run on the loop engine and on the batched engine (clients stacked
under ``vmap``); printed: seconds per round for each, their ratio, the trainable share and
on a GPU the peak memory.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from wirelessfl.data.arrays import ArrayDataset
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientTask, LocalHParams, LocalSGD
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.models import build_model

SIZES = {"tiny": {"n_embd": 64, "n_layer": 2, "n_head": 2},
         "medium": {"n_embd": 256, "n_layer": 4, "n_head": 4},
         "small": {"n_embd": 768, "n_layer": 12, "n_head": 12}}


def lora_round(size: str = "medium", clients: int = 10, samples: int = 64, length: int = 128,
               batch: int = 32, device: str = "cpu") -> dict:
    """One LoRA round on each engine: seconds, speed-up, trainable share, GPU peak memory."""
    dev = torch.device(device)
    config = {"vocab_size": 50257, "n_positions": 1024, "eos_token_id": 50256, **SIZES[size]}
    model = build_model("gpt2_lora", (length,), 2, seed=0, config=config).to(dev)
    rng = np.random.default_rng(0)
    n = clients * samples
    x = torch.as_tensor(rng.integers(0, 50257, (n, length)), dtype=torch.float32)
    data = ArrayDataset(x, torch.as_tensor(rng.integers(0, 2, n)), 2)
    hp = LocalHParams(lr=1e-3, batch_size=batch, epochs=1, optimizer="adam")
    update = LocalSGD(model, hp)
    params = model.params()
    tasks = [ClientTask(client=c, params=params, seed=c,
                        indices=np.arange(c * samples, (c + 1) * samples)) for c in range(clients)]
    out = {"size": size, "clients": clients, "samples_per_client": samples, "length": length,
           "batch": batch, "device": str(dev), "trainable": sum(v.numel() for v in params.values()),
           "total": sum(v.numel() for v in model.parameters())}
    for name, executor in (("loop", LoopExecutor(dev)), ("batched", BatchedExecutor(dev))):
        if dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        executor.run(update, data, tasks, hp)
        if dev.type == "cuda":
            torch.cuda.synchronize()
            out[f"{name}_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out[f"{name}_s_per_round"] = round(time.perf_counter() - t, 3)
    out["batched_speedup"] = round(out["loop_s_per_round"] / out["batched_s_per_round"], 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="medium", choices=sorted(SIZES))
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = p.parse_args()
    out = lora_round(args.size, args.clients, args.samples, args.length, args.batch, args.device)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
