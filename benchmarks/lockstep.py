"""Many runs as one computation (issue 55): a lockstep group's memory and speed, and one run alone.

    PYTHONPATH=. python benchmarks/lockstep.py --out FILE [--runs 100] [--clients 60]
        [--rounds 3] [--steps 20] [--max-batch auto 1500] [--device cuda] [--data-dir FMNIST]

``--runs`` FedAvg runs of the FCNN 784-300-10 (seeds 0, 1, ...; ``--clients`` clients each,
all of them trained every round, ``--steps`` local steps of batch 50: HIST's client
workload) train as one lockstep group for ``--rounds`` rounds, once per ``--max-batch``
setting (``auto``: the engine's memory budget; a number caps the stacked clients per chunk,
which is how a group fits a smaller GPU), and the first run trains alone. Per setting:

- seconds per group round (the median run's rounds after the first, from its rows' wall
  clock) and per run (that over the group's runs), against the solo run's seconds per round;
- the peak GPU memory allocated while the group trained (``torch.cuda.max_memory_allocated``).

Fashion-MNIST is read from ``--data-dir`` (or the system copy); without it the runs train on
random tensors of its shapes, and the JSON says so. Writes one JSON file.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_suite import _data  # noqa: E402 - the suite's Fashion-MNIST-or-random choice

from wirelessfl.report.local import execute_local, lockstep_groups, run_group  # noqa: E402
from wirelessfl.report.spec import RunSpec, run_folder  # noqa: E402
from wirelessfl.run.records import RunRecord  # noqa: E402


def _runs(n: int, clients: int, rounds: int, steps: int, data: dict, device: str,
          max_batch: int | None) -> list[RunSpec]:
    raw = {"rounds": rounds, "device": device, "max_batch": max_batch,
           "data": {"dataset": data["dataset"], "data_dir": data["data_dir"],
                    "partition": "shards", "num_clients": clients},
           "model": {"name": "fcnn"}, "local": {"lr": 0.05, "batch_size": 50, "steps": steps},
           "algorithm": {"name": "fedavg"}}
    return [RunSpec("", f"seed {s}", None, s, {**raw, "seed": s}) for s in range(n)]


def _per_round(root: Path, run: RunSpec) -> tuple[float, float]:
    """Seconds per round after the first (which pays warm-up) and the last test accuracy."""
    rows = RunRecord(run_folder(root, run)).rows()
    walls = [r["wall_s"] for r in rows]
    return (walls[-1] - walls[1]) / max(len(walls) - 2, 1), rows[-1]["test_accuracy"]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(runs: list[RunSpec], device: str, root: Path) -> dict:
    """One lockstep group of ``runs``: seconds, memory, calls."""
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    assert len(lockstep_groups(runs, len(runs))) == 1, "the runs must share one group"
    _sync(device)
    t = time.perf_counter()
    run_group(runs, root, quiet=True, log=lambda _: None)
    _sync(device)
    total = time.perf_counter() - t
    rounds = [_per_round(root, r) for r in runs]
    per = float(np.median([s for s, _ in rounds]))
    return {"runs": len(runs), "wall_s": round(total, 2), "seconds_per_group_round": per,
            "seconds_per_run_round": per / len(runs),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
            "final_accuracy_mean": float(np.mean([a for _, a in rounds]))}


def table(runs: int, clients: int, rounds: int, steps: int, max_batches: list[str],
          device: str, data: dict, on_row=None) -> dict:
    """One run alone, then a lockstep group of ``runs`` runs per ``max_batches`` setting."""
    out = {"device": device, "device_name": torch.cuda.get_device_name()
           if device.startswith("cuda") else "cpu", "torch": torch.__version__,
           "data": data, "clients": clients, "steps": steps, "rounds": rounds, "groups": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        solo = _runs(1, clients, rounds, steps, data, device, None)
        execute_local(solo, root / "solo", quiet=True, log=lambda _: None, batch_runs=1)
        out["solo_seconds_per_round"], out["solo_accuracy"] = _per_round(root / "solo", solo[0])
        for mb in max_batches:
            cap = None if mb == "auto" else int(mb)
            group = _runs(runs, clients, rounds, steps, data, device, cap)
            row = {"max_batch": mb, **measure(group, device, root / f"group-{mb}")}
            row["speedup_per_run"] = out["solo_seconds_per_round"] / row["seconds_per_run_round"]
            out["groups"].append(row)
            if on_row is not None:
                on_row(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--clients", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--max-batch", nargs="+", default=["auto"],
                   help="stacked clients per chunk, one group per value ('auto': memory budget)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--data-dir", help="folder with the Fashion-MNIST IDX files")
    args = p.parse_args(argv)
    if args.rounds < 3 or args.runs < 2:
        p.error("--rounds must be at least 3 and --runs at least 2 (round 1 is warm-up)")
    if any(mb != "auto" and not mb.isdigit() for mb in args.max_batch):
        p.error("--max-batch takes 'auto' or positive integers")

    def save(out: dict) -> None:
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))

    out = table(args.runs, args.clients, args.rounds, args.steps, args.max_batch, args.device,
                _data(args.data_dir), on_row=save)
    save(out)
    for row in out["groups"]:
        print(json.dumps(row))
    print(f"solo {out['solo_seconds_per_round']:.3f} s per round")
    return 0


if __name__ == "__main__":
    sys.exit(main())
