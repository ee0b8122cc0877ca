"""The one workload every framework in ``benchmarks/peers/`` runs, and its timing record.

FedAvg on Fashion-MNIST: the FCNN 784-300-10 (ReLU, dropout 0.5), IID shards of equal size
(``60,000 / clients`` samples each, one seeded permutation), plain local SGD (``lr``,
``batch``, ``steps``; ``steps × batch`` equals the shard, so each client does one epoch of
full batches), every client trained each round, the server's model evaluated on the 10,000
test images after each round. Images are scaled to [-1, 1] (mean 0.5, std 0.5), as in
wirelessfl.

This file needs only numpy and torch: it is imported by the peers' own environments, which
do not have wirelessfl installed.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


#: The workload's options: name, type, default (every framework script and the driver take them).
OPTIONS = (("clients", int, 60), ("steps", int, 20), ("batch", int, 50), ("lr", float, 0.05),
           ("rounds", int, 4), ("seed", int, 0), ("workers", int, 2), ("data_dir", str, DEFAULT_DATA))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the workload's options to ``p`` (``--workers``: Ray actors / pfl worker processes)."""
    for name, kind, default in OPTIONS:
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=default)


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit through ``p.error`` (status 2, one line) if the options make no workload."""
    if args.clients < 1 or 60_000 // args.clients < args.steps * args.batch:
        p.error(f"--clients {args.clients} leaves {60_000 // max(args.clients, 1)} samples per "
                f"client, fewer than --steps x --batch = {args.steps * args.batch}")
    if min(args.steps, args.batch, args.rounds, args.workers) < 1 or not 0 < args.lr < 10:
        p.error("--steps, --batch, --rounds and --workers must be >= 1 and --lr in (0, 10)")


def command_line(args: argparse.Namespace) -> list[str]:
    """The options of ``args`` as the command line a framework script parses back."""
    return [part for name, _, _ in OPTIONS
            for part in ("--" + name.replace("_", "-"), str(getattr(args, name)))]


def arguments(description: str) -> argparse.Namespace:
    """The command line every framework script takes (the driver passes all of it)."""
    p = argparse.ArgumentParser(description=description)
    add_arguments(p)
    args = p.parse_args()
    check(p, args)
    return args


def _idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def fashion_mnist(data_dir: str | os.PathLike) -> tuple[np.ndarray, ...]:
    """``(x_train, y_train, x_test, y_test)``: float32 images in [-1, 1] of shape (n, 784)."""
    d = Path(data_dir)
    out = []
    for split in ("train", "t10k"):
        x = _idx(d / f"{split}-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32)
        out += [(x / 255.0 - 0.5) / 0.5, _idx(d / f"{split}-labels-idx1-ubyte.gz").astype(np.int64)]
    return tuple(out)


@functools.lru_cache(maxsize=2)
def cached(data_dir: str, clients: int, seed: int) -> tuple:
    """Training tensors and shards, read once per process (a simulator's worker reuses them)."""
    xtr, ytr, _, _ = fashion_mnist(data_dir)
    return torch.from_numpy(xtr), torch.from_numpy(ytr), shards(clients, seed)


def shards(clients: int, seed: int) -> list[np.ndarray]:
    """IID shards: one seeded permutation of the 60,000 indices cut into equal parts."""
    per = 60_000 // clients
    perm = np.random.default_rng(seed).permutation(60_000)
    return [perm[k * per:(k + 1) * per] for k in range(clients)]


class FCNN(nn.Module):
    """784 → 300 (ReLU, dropout 0.5) → 10."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(784, 300), nn.Linear(300, 10)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def local_sgd(model: FCNN, x: torch.Tensor, y: torch.Tensor, steps: int, batch: int, lr: float,
              generator: torch.Generator) -> None:
    """``steps`` SGD steps over one shuffled pass of the client's shard (plain torch)."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    order = torch.randperm(len(x), generator=generator)
    for s in range(steps):
        i = order[s * batch:(s + 1) * batch]
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x[i]), y[i]).backward()
        opt.step()


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Test accuracy in [0, 1] (eval mode, batches of 2,000)."""
    model.eval()
    hits = sum(int((model(x[i:i + 2000]).argmax(1) == y[i:i + 2000]).sum())
               for i in range(0, len(x), 2000))
    return hits / len(x)


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (``/proc/stat``; NaN where absent).

    On a quiet machine the difference over a round is the CPU time of the framework's whole
    process tree (workers, Ray actors and raylets included) in that round.
    """
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()[1:]
    except OSError:
        return float("nan")
    ticks = [int(v) for v in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Clock:
    """Times rounds: ``tick(acc)`` after each round's evaluation (round 0: before training)."""

    def __init__(self) -> None:
        self.marks: list[float] = []
        self.busy: list[float] = []
        self.acc: list[float] = []

    def tick(self, acc: float) -> None:  # noqa: D102
        self.marks.append(time.perf_counter())
        self.busy.append(busy_seconds())
        self.acc.append(float(acc))

    def report(self, framework: str, args: argparse.Namespace, path: str | None = None,
               **extra) -> None:
        """Print one JSON line (and write it to ``path``): each round's wall seconds (training +
        evaluation), the machine's busy CPU seconds in it, and the accuracy after it."""
        line = json.dumps({"framework": framework, "clients": args.clients, "steps": args.steps,
                           "batch": args.batch, "round_seconds": np.diff(self.marks).tolist(),
                           "round_cpu_seconds": np.diff(self.busy).tolist(),
                           "accuracy": self.acc[1:], **extra})
        print(line)
        sys.stdout.flush()
        if path:
            with open(path, "w") as fh:
                fh.write(line + "\n")
