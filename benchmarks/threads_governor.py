"""``threads: auto`` against fixed thread counts over whole runs, quiet and beside a changing load.

    python benchmarks/threads_governor.py --json                  # 2 quiet cores: all scenarios
    python benchmarks/threads_governor.py --scenario on-off --load 4 --period 6

Each run is a whole ``wirelessfl`` run of the peers' workload (FedAvg, Fashion-MNIST split
IID over 60 clients, the FCNN 784-300-10 with dropout, 20 local steps of batch 50 on the
batched engine, the test set evaluated and a checkpoint written every round), in a fresh
interpreter that imports wirelessfl first (as ``wirelessfl run`` does: it picks OpenMP's
wait policy by the machine's load), under each ``threads`` setting: ``1``, ``2`` (or every
usable CPU) and ``auto``, which is decided when the run starts and again between rounds
(:class:`wirelessfl.run.threads.ThreadGovernor`).

Scenarios (``--load`` busy processes, a pure-Python loop each, started as one background job
in a session of its own, as a job a user starts from another terminal):

- ``quiet``: nothing else runs;
- ``spike``: the load runs for the first ``--period`` seconds only (a job that was busy when
  the run started: the case that held whole runs to one thread before);
- ``on-off``: the load is on for ``--period`` seconds, off for as long, and so on;
- ``steady``: the load runs the whole time.

The settings run interleaved (``--repeats`` passes, the order rotated each pass), each
scenario's load restarted at each run's start so every setting sees the same pattern.
Reported per scenario: each setting's wall seconds for the run (median over the passes),
``auto_over_best_fixed`` (the target: at most 1.15) and the thread changes ``auto`` made
(from its last checkpoint). Needs Fashion-MNIST (``dataset-fashion-mnist``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
from run import Load  # noqa: E402  (the peers' driver: numpy and torch only)

RUN = r"""
import json, sys, time
import wirelessfl  # noqa: F401  (first: OpenMP's wait policy before torch loads)
from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import run_job
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob, prepare
threads, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = {"dataset": "fashion_mnist", "partition": "iid", "num_clients": 60}
cfg = resolve({"name": "governor", "seed": 0, "rounds": rounds, "engine": "batched",
               "threads": threads if threads == "auto" else int(threads), "data": data,
               "model": {"name": "fcnn"}, "local": {"lr": 0.05, "batch_size": 50, "steps": 20},
               "algorithm": {"name": "fedavg"}, "checkpoint_every": 1})
job = RoundsJob(prepare(cfg))
t = time.perf_counter()
run_job(job, out, quiet=True)
wall = time.perf_counter() - t
ck = RunRecord(out).load_checkpoint()
print(json.dumps({"wall_s": wall, "threads": ck.get("threads"),
                  "changes": ck.get("thread_changes", [])}))
"""


class PatternLoad:
    """``n`` busy processes switched on and off by a pattern.

    Each time on, it is the peers' driver's :class:`Load`: one background job in a session
    of its own, stopped whole.
    """

    def __init__(self, n: int, scenario: str, period: float) -> None:
        self.n, self.scenario, self.period = n, scenario, period
        self._load: Load | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drive, daemon=True)

    def _on(self) -> None:
        if self._load is None:
            self._load = Load(self.n).__enter__()

    def _off(self) -> None:
        if self._load is not None:
            self._load.__exit__(None, None, None)
            self._load = None

    def _drive(self) -> None:
        if self.scenario == "quiet" or self.n == 0:
            return
        on = True
        while not self._stop.is_set():
            self._on() if on else self._off()
            if self.scenario == "steady":
                self._stop.wait()
                break
            self._stop.wait(self.period)
            on = not on if self.scenario == "on-off" else False

    def __enter__(self) -> PatternLoad:
        self._thread.start()
        time.sleep(0.3 if self.scenario != "quiet" else 0.0)  # the load is running at the start
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._off()


def one_run(setting: str, rounds: int, scenario: str, load: int, period: float) -> dict:
    """One whole run in a fresh interpreter under the scenario's load; its JSON line."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    with tempfile.TemporaryDirectory() as tmp, PatternLoad(load, scenario, period):
        out = subprocess.run([sys.executable, "-c", RUN, setting, str(rounds),
                              os.path.join(tmp, "run")], env=env, capture_output=True,
                             text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:  # noqa: D103
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", choices=("quiet", "spike", "on-off", "steady", "all"),
                   default="all")
    p.add_argument("--load", type=int, default=4, help="busy processes of the load")
    p.add_argument("--period", type=float, default=6.0, help="seconds on (and off)")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.load < 0 or args.rounds < 1 or args.repeats < 1 or not args.period > 0:
        p.error("--load must be >= 0, --rounds and --repeats >= 1, --period > 0")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    settings = ["1", str(max(2, cpus or 1)), "auto"]
    scenarios = ("quiet", "spike", "on-off", "steady") if args.scenario == "all" \
        else (args.scenario,)
    report: dict = {"cpus": cpus, "load_processes": args.load, "period_s": args.period,
                    "rounds": args.rounds, "repeats": args.repeats}
    for scenario in scenarios:
        walls: dict = {s: [] for s in settings}
        changes = []
        for rep in range(args.repeats):
            order = settings[rep % len(settings):] + settings[:rep % len(settings)]
            for s in order:
                res = one_run(s, args.rounds, scenario, args.load, args.period)
                walls[s].append(res["wall_s"])
                if s == "auto":
                    changes.append(res["changes"])
        med = {s: round(statistics.median(v), 2) for s, v in walls.items()}
        best = min(med[s] for s in settings if s != "auto")
        report[scenario] = {"wall_s": med, "auto_over_best_fixed": round(med["auto"] / best, 3),
                            "auto_thread_changes": changes}
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
