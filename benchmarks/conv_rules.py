"""The two stacked-convolution rules side by side: one LeNet-5 step of n stacked clients.

    PYTHONPATH=. python benchmarks/conv_rules.py --device cuda --json
    PYTHONPATH=. python benchmarks/conv_rules.py --device cpu --clients 4 60 --json

For each rule of :data:`wirelessfl.models.layers.STACKED_CONV` (``grouped``: the clients as
the groups of one grouped convolution; ``gemm``: patches and one batched GEMM) and each
client count, one forward and backward pass of LeNet-5 (batch 50, Fashion-MNIST-shaped random
images) under ``vmap``, as the batched engine takes a local step: seconds (median of
``--repeats``, after a warm-up) and, from ``torch.profiler``, the aten operators and, on a
GPU, the kernels launched. The gradients of the two rules are compared (largest absolute
difference). A rule's kernel count that grows with the clients is what the ``gemm`` rule
exists to avoid on CUDA (issue 68); on the CPU the grouped rule is one oneDNN operator.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
from torch.func import functional_call, vmap


def _step(net, params: dict, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    def loss(p, xb, yb):
        return torch.nn.functional.cross_entropy(functional_call(net, p, (xb,)), yb)
    total = vmap(loss)(params, x, y).sum()
    return list(torch.autograd.grad(total, list(params.values())))


def measure(device: str = "cpu", clients=(4, 60), repeats: int = 5, batch: int = 50) -> dict:
    """Seconds, aten operators and kernels of a LeNet-5 step per rule and client count."""
    from torch.profiler import ProfilerActivity, profile

    from wirelessfl.models import build_model, layers

    dev = torch.device(device)
    model = build_model("lenet5", (1, 28, 28), 10, seed=0)
    net = (model.net if hasattr(model, "net") else model).to(dev).eval()  # no dropout draws
    base = {k: v.detach() for k, v in net.named_parameters()}
    kind, saved = dev.type, dict(layers.STACKED_CONV)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if kind == "cuda" else [])
    rows = []
    try:
        for n in clients:
            gen = torch.Generator().manual_seed(n)
            x = torch.randn(n, batch, 1, 28, 28, generator=gen).to(dev)
            y = torch.randint(0, 10, (n, batch), generator=gen).to(dev)
            params = {k: (v + 0.01 * torch.randn(n, *v.shape, generator=gen).to(dev))
                      .requires_grad_() for k, v in base.items()}
            grads = {}
            for rule in ("grouped", "gemm"):
                layers.STACKED_CONV[kind] = rule
                grads[rule] = _step(net, params, x, y)  # warm-up (cuDNN's choice, caches)
                times = []
                for _ in range(repeats):
                    if kind == "cuda":
                        torch.cuda.synchronize()
                    t = time.perf_counter()
                    _step(net, params, x, y)
                    if kind == "cuda":
                        torch.cuda.synchronize()
                    times.append(time.perf_counter() - t)
                with profile(activities=activities) as prof:
                    _step(net, params, x, y)
                    if kind == "cuda":
                        torch.cuda.synchronize()
                events = prof.key_averages()
                rows.append({"clients": n, "rule": rule, "seconds": float(np.median(times)),
                             "aten": int(sum(e.count for e in events if e.key.startswith("aten::"))),
                             "kernels": int(sum(e.count for e in events
                                                if getattr(e, "device_type", None) is not None
                                                and str(e.device_type).endswith("CUDA")))})
            rows[-1]["max_grad_gap"] = max(float((a - b).abs().max()) for a, b in
                                           zip(grads["grouped"], grads["gemm"]))
    finally:
        layers.STACKED_CONV.clear()
        layers.STACKED_CONV.update(saved)
    return {"device": device, "batch": batch, "repeats": repeats, "default": saved.get(kind),
            "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--clients", type=int, nargs="+", default=[4, 60])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print the JSON report")
    args = p.parse_args(argv)
    if min(args.clients) < 1 or args.repeats < 1:
        p.error("--clients and --repeats must be positive")
    out = measure(args.device, args.clients, args.repeats)
    if args.json:
        print(json.dumps(out, indent=1))
    for r in out["rows"]:
        print(f"{r['clients']:4d} clients {r['rule']:>7}: {1e3 * r['seconds']:8.1f} ms, "
              f"{r['aten']} aten, {r['kernels']} kernels", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
