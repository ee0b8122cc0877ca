"""Thread settings under load: which OpenMP policy and thread count a busy machine wants (issue 34).

    python benchmarks/threads.py --json [--load 6] [--steps 200]

A fixed background load (``--load`` processes spinning on the CPU, started first and killed
at the end) runs beside a plain workload: ``--steps`` SGD steps of the FCNN 784-300-10 on a
batch of 50. The workload runs in a fresh interpreter under each setting (the OpenMP runtime
reads its environment once, when torch is imported):

- ``pytorch default``: nothing set (idle threads spin a while, then sleep);
- ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep at once);
- ``active``: ``OMP_WAIT_POLICY=ACTIVE`` (idle threads spin for ever);
- ``one thread``: ``torch.set_num_threads(1)`` (no thread waits at all);
- ``wirelessfl auto``: the count a run chooses with ``threads: auto`` (free cores, sampled
  when it starts: :mod:`wirelessfl.run.threads`), PyTorch's policy otherwise.

Prints JSON: milliseconds per step of each (median of ``--repeats`` interleaved runs), on a
quiet machine and under the load, and each setting's ratio to the default.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys

WORK = r"""
import os, sys, time
import torch
if sys.argv[1] == "one":
    torch.set_num_threads(1)
elif sys.argv[1] == "auto":  # what a run does with threads: auto
    from wirelessfl.run.threads import choose_threads
    torch.set_num_threads(choose_threads("auto"))
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(784, 300), torch.nn.ReLU(), torch.nn.Linear(300, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.05)
x, y = torch.randn(50, 784), torch.randint(0, 10, (50,))
steps = int(sys.argv[2])
for i in range(steps + 20):
    if i == 20:
        t = time.perf_counter()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
print((time.perf_counter() - t) / steps * 1e3, torch.get_num_threads())
"""


def _spin() -> None:  # pragma: no cover - a background process
    while True:
        pass


def run(setting: str, steps: int) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    if setting in ("active", "passive"):
        env["OMP_WAIT_POLICY"] = setting.upper()
    mode = {"one thread": "one", "wirelessfl auto": "auto"}.get(setting, "torch")
    out = subprocess.run([sys.executable, "-c", WORK, mode, str(steps)], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), int(out[1])  # ms per step, threads used


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--load", type=int, default=os.cpu_count() or 1,
                   help="background spinning processes (default: one per core)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    settings = ("pytorch default", "passive", "active", "one thread", "wirelessfl auto")
    report: dict = {"cores": os.cpu_count(), "load_processes": args.load, "steps": args.steps}
    for loaded in (False, True):
        procs = [mp.Process(target=_spin, daemon=True) for _ in range(args.load if loaded else 0)]
        for q in procs:
            q.start()
        try:
            times = {s: [] for s in settings}
            for _ in range(args.repeats):  # interleaved, so drift hits every setting alike
                for s in settings:
                    ms, _ = run(s, args.steps)
                    times[s].append(ms)
            med = {s: round(statistics.median(v), 3) for s, v in times.items()}
        finally:
            for q in procs:
                q.kill()
        key = "under_load" if loaded else "quiet"
        report[key] = {"ms_per_step": med, "over_default": {
            s: round(med[s] / med["pytorch default"], 2) for s in settings},
            "auto_over_best": round(med["wirelessfl auto"] / min(med.values()), 2)}
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
