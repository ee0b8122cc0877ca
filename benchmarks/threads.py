"""Thread settings under load: which OpenMP policy and thread count a busy machine wants (issue 34).

    python benchmarks/threads.py --json [--load 6] [--steps 200]
    python benchmarks/threads.py --round --json [--load 4] [--rounds 2]

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

``--round`` times a whole round instead: the peers' workload, FedAvg on the batched engine,
60 Fashion-MNIST clients (synthetic data of its shape without the dataset) × 20 steps of
batch 50, the FCNN with dropout, seconds per round after one warm-up round. Its settings:
``pytorch default`` (torch imported first, nothing set), ``passive N`` (N threads),
``active 2``, and ``wirelessfl default``, what a run does with nothing set: ``import
wirelessfl`` first (it picks OpenMP's wait policy by the machine's load) and ``threads:
auto``. ``default_over_best`` is the last one against the best setting.
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


ROUND = r"""
import os, sys, time
mode, rounds, clients = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if mode == "wirelessfl":
    import wirelessfl  # noqa: F401 - chooses the wait policy before torch starts OpenMP
import torch
from wirelessfl.data import DataNotFoundError
from wirelessfl.run.config import resolve
from wirelessfl.run.rounds import prepare
from wirelessfl.run.threads import choose_threads
raw = {"seed": 0, "engine": "batched", "threads": "auto" if mode == "wirelessfl" else 2,
       "data": {"dataset": "fashion_mnist", "partition": "iid", "num_clients": clients},
       "model": {"name": "fcnn"}, "local": {"lr": 0.05, "batch_size": 50, "steps": 20}}
try:
    exp = prepare(resolve(raw))
except DataNotFoundError:
    exp = prepare(resolve({**raw, "data": {"dataset": "synthetic", "num_clients": clients,
                                           "samples_per_client": 1000}}))
if mode == "wirelessfl":
    torch.set_num_threads(choose_threads("auto", engine="batched"))
elif mode != "torch":
    torch.set_num_threads(int(mode))
state, _ = exp.algorithm.apply(exp.initial_state())
t = time.perf_counter()
for _ in range(rounds):
    state, _ = exp.algorithm.apply(state)
print((time.perf_counter() - t) / rounds, torch.get_num_threads(),
      os.environ.get("OMP_WAIT_POLICY", "unset"))
"""

#: ``--round`` settings: (environment's OMP_WAIT_POLICY, mode of :data:`ROUND`).
ROUND_SETTINGS = {"pytorch default": (None, "torch"), "passive 1": ("PASSIVE", "1"),
                  "passive 2": ("PASSIVE", "2"), "passive 4": ("PASSIVE", "4"),
                  "active 2": ("ACTIVE", "2"), "wirelessfl default": (None, "wirelessfl")}


def _fresh(code: str, policy: str | None, *argv: str) -> list[str]:
    """Run ``code`` in a fresh interpreter with OpenMP's ``policy`` (None: unset); its output words."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    return subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True,
                          text=True, check=True).stdout.split()


def run_round(setting: str, rounds: int, clients: int = 60) -> tuple[float, int, str]:
    """Seconds per round of one ``--round`` setting in a fresh interpreter (and its threads).

    ``clients`` (60: the peers' workload) smaller only to check the runner quickly.
    """
    policy, mode = ROUND_SETTINGS[setting]
    out = _fresh(ROUND, policy, mode, str(rounds), str(clients))
    return float(out[0]), int(out[1]), out[2]


def run(setting: str, steps: int) -> tuple[float, int]:
    """Milliseconds per step of one step setting in a fresh interpreter (and its threads)."""
    policy = setting.upper() if setting in ("active", "passive") else None
    mode = {"one thread": "one", "wirelessfl auto": "auto"}.get(setting, "torch")
    out = _fresh(WORK, policy, mode, str(steps))
    return float(out[0]), int(out[1])


def _spin() -> None:  # pragma: no cover - a background process
    while True:
        pass


def measure(settings, time_one, repeats: int, load: int) -> tuple[dict, dict]:
    """Each setting's median first value of ``time_one(setting)`` and its last whole output.

    ``repeats`` interleaved passes over the settings (so drift hits every setting alike),
    beside ``load`` spinning processes started first and killed at the end.
    """
    procs = [mp.Process(target=_spin, daemon=True) for _ in range(load)]
    for q in procs:
        q.start()
    try:
        times: dict = {s: [] for s in settings}
        last: dict = {}
        for _ in range(repeats):
            for s in settings:
                last[s] = time_one(s)
                times[s].append(last[s][0])
        return {s: round(statistics.median(v), 3) for s, v in times.items()}, last
    finally:
        for q in procs:
            q.kill()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--load", type=int, default=os.cpu_count() or 1,
                   help="background spinning processes (default: one per core)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--round", action="store_true", help="time a 60-client FedAvg round instead")
    p.add_argument("--rounds", type=int, default=2, help="--round: timed rounds per run")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.round:
        return rounds_report(args)
    settings = ("pytorch default", "passive", "active", "one thread", "wirelessfl auto")
    report: dict = {"cores": os.cpu_count(), "load_processes": args.load, "steps": args.steps}
    for loaded in (False, True):
        med, _ = measure(settings, lambda s: run(s, args.steps), args.repeats,
                         args.load if loaded else 0)
        report["under_load" if loaded else "quiet"] = {"ms_per_step": med, "over_default": {
            s: round(med[s] / med["pytorch default"], 2) for s in settings},
            "auto_over_best": round(med["wirelessfl auto"] / min(med.values()), 2)}
    print(json.dumps(report, indent=None if args.json else 2))


def rounds_report(args: argparse.Namespace) -> None:
    """``--round``: seconds per round of each setting, quiet and under the load."""
    report: dict = {"cores": os.cpu_count(), "load_processes": args.load, "rounds": args.rounds}
    for loaded in (False, True):
        med, last = measure(ROUND_SETTINGS, lambda s: run_round(s, args.rounds), args.repeats,
                            args.load if loaded else 0)
        _, threads, policy = last["wirelessfl default"]
        report["under_load" if loaded else "quiet"] = {
            "seconds_per_round": med,
            "wirelessfl_chose": {"threads": threads, "wait_policy": policy},
            "default_over_best": round(med["wirelessfl default"] / min(med.values()), 2),
            "best": min(med, key=med.get)}
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
