"""wirelessfl against Flower and pfl-research on one FedAvg workload, runs interleaved.

    python benchmarks/peers/run.py setup                      # once: the peers' own environments
    python benchmarks/peers/run.py bench --json               # 60 clients x 20 steps, quiet
    python benchmarks/peers/run.py bench --load 4 --json      # with 4 busy processes beside
    python benchmarks/peers/run.py bench --clients 1000 --steps 3 --batch 20 --json

The workload (``workload.py``): FedAvg, Fashion-MNIST split IID, the FCNN 784-300-10 with
dropout, plain SGD (lr 0.05), every client trained each round, the 10,000 test images
evaluated after each round. ``steps x batch`` equals a client's shard (one epoch of full
batches), so every framework does the same work: 60 clients x 20 steps of 50, or 1,000
clients x 3 steps of 20.

``setup`` makes two virtual environments under ``--envs`` (default ``runs/peers``, which git
ignores): ``venv-flwr`` with ``flwr[simulation]`` (Flower's simulation runtime on Ray) and
``venv-pfl`` with ``pfl[pytorch]`` (pfl-research), each with ``torch==2.13.0``. It needs the
package index; nothing here runs in CI or the tests.

``bench`` runs, ``--repeats`` times, each framework in its own process, rotating the order
each repeat (interleaved, so a drift in the machine's load hits all alike); repeat ``r``
uses seed ``--seed + r`` for every framework (partition, initial model, data order), so the
final accuracies compare over as many seeds as repeats:

- ``wirelessfl``: ``ours.py``, this project with its defaults (``engine: auto``,
  ``threads: auto``), in this interpreter's environment, with the environment as it is;
- ``flower-run``: ``flower_run.py``, Flower's current entry point (``flwr run`` of the app in
  ``flower_app.py`` against a local simulation SuperLink) with ``--workers`` Ray actors;
- ``flower``: ``flower_sim.py``, the same app through ``run_simulation``, the Python entry
  point Flower 1.42 deprecates (kept while the two differ);
- ``pfl``: ``pfl_sim.py`` under ``torchrun --nproc_per_node=WORKERS`` (pfl-research's
  multi-process simulation; two workers is its best configuration on 2 cores), with no
  per-user evaluation (``pfl_sim.EVALUATION_FREQUENCY``: the others evaluate only the
  server's model on the test set, and so does pfl here; its module docstring says why each
  setting is as it is).

The peers get their best settings for a loaded machine (``--peer-env``):
``OMP_WAIT_POLICY=PASSIVE`` (without it PyTorch's OpenMP spin-wait makes them many times
slower) and ``RAY_worker_niceness=0`` (Ray runs its workers at nice 15 by default, so beside
busy processes Flower's clients barely run: a 4-round run took over 8 minutes). ``--load N`` starts N busy
processes (a pure-Python arithmetic loop each, no memory traffic) before each framework's
run and stops them after it: the same fixed background load for all.

Sessions matter on Linux. With autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``
= 1, the default of most distributions) the CPU is shared fairly between *sessions* first,
then between the threads inside each. The load therefore runs as one background job in a
session of its own, and each framework is started in a new session, as a command typed
into a terminal. ``torchrun`` starts each pfl worker in a further session of its own, so
pfl-research's two workers get two shares where a one-process framework gets one: on 2
cores beside the load, about 2/3 of the machine against 1/2. Until 2026-11-24 the driver
started the load and ``wirelessfl`` in its own session (``--shared-session`` gives that
layout back): there wirelessfl's threads shared one group with the four busy processes
(1/3 of the machine) while pfl's workers still had two groups of their own: pfl-research
then looked 1.1-1.3x faster than wirelessfl beside the load (0.88x and 0.75x speed-ups at
60 x 20 and 1,000 x 3) where, each framework in a session of its own, it is 1.8-1.9x slower.

Reported per framework: seconds per round (median over the rounds after the first, which
pays for warm-up, then median over repeats), the machine's busy CPU seconds per round (the
same medians, from ``/proc/stat`` at each round's end, so the whole process tree counts:
workers, Ray actors; quiet runs only, as the load's own CPU would count), the final test
accuracy (mean and standard deviation over the seeds), the busy CPU seconds over the whole
run, start-up included, and wirelessfl's speed-up over each peer in wall time and in CPU
seconds (their seconds per round / ours). ``same_learning`` says whether the accuracy gap is
within twice its standard error over the seeds. The targets: at least 3x Flower and 2x
pfl-research quiet, in both, and 2x and 1.5x beside a load of 4.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import workload  # noqa: E402  (numpy and torch only: the peers' environments import it too)

ROOT = HERE.parents[1]
FRAMEWORKS = ("wirelessfl", "flower-run", "flower", "pfl")
PEERS = FRAMEWORKS[1:]
PINS = {"venv-flwr": ["flwr[simulation]==1.42.0"], "venv-pfl": ["pfl[pytorch]==0.6.0"]}


def setup(envs: Path) -> None:
    """Create the peers' environments (torch first: the CPU wheel, not a CUDA build)."""
    envs.mkdir(parents=True, exist_ok=True)
    for name, pins in PINS.items():
        venv = envs / name
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run(pip + ["torch==2.13.0"], check=True)
        subprocess.run(pip + pins, check=True)
        print(f"{name}: ready", file=sys.stderr)


class Load:
    """``n`` busy processes while the ``with`` block runs: one background job, in its own session.

    ``shared=True`` starts them as children of this driver instead, in its session: the layout
    of the measurements before 2026-11-24 (see the module docstring: under Linux's autogroup
    scheduling that puts the load in one CPU-share group with ``wirelessfl`` only).
    """

    CODE = "x = 1.0\nwhile True:\n    x = x * 1.000001 + 1e-9"  # no imports, no memory
    JOB = ("import os, sys\nfor _ in range(int(sys.argv[1]) - 1):\n    if os.fork() == 0:\n"
           "        break\n" + CODE)

    def __init__(self, n: int, shared: bool = False) -> None:
        self.n, self.shared, self.procs = n, shared, []

    def __enter__(self) -> Load:
        if self.n and self.shared:
            self.procs = [subprocess.Popen([sys.executable, "-c", self.CODE], cwd=ROOT,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                          for _ in range(self.n)]
        elif self.n:  # a session leader forking n - 1 more: one process group to stop
            self.procs = [subprocess.Popen([sys.executable, "-c", self.JOB, str(self.n)],
                                           cwd=ROOT, start_new_session=True,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        time.sleep(0.5 if self.n else 0)
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            if not self.shared:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # the leader's group: it and its forks
                except ProcessLookupError:
                    pass
            p.kill()
            p.wait()


def _busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (``/proc/stat``; 0 where absent)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0.0
    ticks = [int(v) for v in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def command(framework: str, envs: Path, args: argparse.Namespace) -> tuple[list[str], dict]:
    """The command line and environment of one framework's run."""
    work = workload.command_line(args)
    env = dict(os.environ)
    if framework == "wirelessfl":
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        return [sys.executable, str(HERE / "ours.py"), *work], env
    env.update(kv.split("=", 1) for kv in args.peer_env)
    if framework in ("flower", "flower-run"):
        script = "flower_sim.py" if framework == "flower" else "flower_run.py"
        return [str(envs / "venv-flwr" / "bin" / "python"), str(HERE / script), *work], env
    return [str(envs / "venv-pfl" / "bin" / "torchrun"), "--standalone",
            f"--nproc_per_node={args.workers}", str(HERE / "pfl_sim.py"), *work], env


def run_one(framework: str, envs: Path, args: argparse.Namespace) -> dict:
    """One run of one framework: its JSON line, plus the machine's busy CPU seconds."""
    cmd, env = command(framework, envs, args)
    with Load(args.load, shared=args.shared_session):
        busy = _busy_seconds()
        t = time.perf_counter()
        try:  # a session of its own, as a command started from a terminal
            out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                                 timeout=args.timeout, start_new_session=not args.shared_session)
        except subprocess.TimeoutExpired:
            return {"framework": framework, "error": f"timed out after {args.timeout} s"}
        wall, busy = time.perf_counter() - t, _busy_seconds() - busy
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        text = (out.stderr or out.stdout).strip().splitlines()
        tail = [ln for ln in text if "Error" in ln or "error:" in ln][-3:] or text[-3:]
        return {"framework": framework, "error": f"exit {out.returncode}: {' | '.join(tail)}"}
    rec = json.loads(lines[-1])
    rec.update(framework=framework, wall_s=wall, loaded=bool(args.load),
               busy_cpu_s_run=None if args.load else busy)
    return rec


def summarize(runs: list[dict]) -> dict:
    """Median seconds per round (after the first round) and mean final accuracy, per framework."""
    out: dict[str, dict] = {}
    for fw in FRAMEWORKS:
        ok = [r for r in runs if r["framework"] == fw and "error" not in r]
        errors = [r["error"] for r in runs if r["framework"] == fw and "error" in r]
        if not ok:
            if errors:
                out[fw] = {"errors": errors}
            continue
        per_run = [statistics.median(r["round_seconds"][1:] or r["round_seconds"]) for r in ok]
        cpu = [statistics.median(r["round_cpu_seconds"][1:] or r["round_cpu_seconds"])
               for r in ok if r.get("round_cpu_seconds") and not r.get("loaded")]
        busy = [r["busy_cpu_s_run"] for r in ok if r.get("busy_cpu_s_run")]
        acc = [r["accuracy"][-1] for r in ok]
        out[fw] = {"seconds_per_round": statistics.median(per_run), "runs": per_run,
                   "cpu_seconds_per_round": statistics.median(cpu) if cpu else None,
                   "final_accuracy": statistics.fmean(acc),
                   "final_accuracy_sd": statistics.stdev(acc) if len(acc) > 1 else None,
                   "busy_cpu_s_run": statistics.median(busy) if busy else None,
                   "errors": errors}
    ours = out.get("wirelessfl", {})
    for fw in PEERS:
        peer = out.get(fw, {})
        if ours.get("seconds_per_round") and "seconds_per_round" in peer:
            peer["wirelessfl_speedup"] = peer["seconds_per_round"] / ours["seconds_per_round"]
            if peer["cpu_seconds_per_round"] and ours["cpu_seconds_per_round"]:
                peer["wirelessfl_cpu_speedup"] = (peer["cpu_seconds_per_round"]
                                                  / ours["cpu_seconds_per_round"])
            peer["accuracy_gap_points"] = 100 * (ours["final_accuracy"] - peer["final_accuracy"])
            sds = [ours["final_accuracy_sd"], peer["final_accuracy_sd"]]
            if None not in sds:  # the gap against twice its standard error over the seeds
                se = 100 * (sum(sd ** 2 / len(ours["runs"]) for sd in sds[:1])
                            + sds[1] ** 2 / len(peer["runs"])) ** 0.5
                peer["accuracy_gap_two_se_points"] = 2 * se
                peer["same_learning"] = abs(peer["accuracy_gap_points"]) <= 2 * se
    return out


def main(argv: list[str] | None = None) -> None:  # noqa: D103
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("action", choices=("setup", "bench"))
    p.add_argument("--envs", type=Path, default=ROOT / "runs" / "peers")
    p.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    workload.add_arguments(p)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--load", type=int, default=0, help="busy background processes (0-64)")
    p.add_argument("--peer-env", nargs="*",
                   default=["OMP_WAIT_POLICY=PASSIVE", "RAY_worker_niceness=0"])
    p.add_argument("--shared-session", action="store_true",
                   help="the load and wirelessfl in this driver's session (the old layout)")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    workload.check(p, args)
    if not 0 <= args.load <= 64 or args.repeats < 1 or args.rounds < 2:
        p.error("--load must be in [0, 64], --repeats >= 1 and --rounds >= 2")
    if any("=" not in kv for kv in args.peer_env):
        p.error("--peer-env takes KEY=VALUE pairs")
    if args.action == "setup":
        setup(args.envs)
        return
    runs = []
    for rep in range(args.repeats):
        order = args.frameworks[rep % len(args.frameworks):] + \
            args.frameworks[:rep % len(args.frameworks)]
        seeded = argparse.Namespace(**{**vars(args), "seed": args.seed + rep})
        for fw in order:
            r = run_one(fw, args.envs, seeded)
            if "error" in r:  # one retry (a start-up race of Ray or torchrun); both kept
                first = r["error"]
                r = run_one(fw, args.envs, seeded)
                r["retried_after"] = first
            r["seed"] = seeded.seed
            runs.append(r)
            print(f"repeat {rep}: {fw}: " + (r["error"] if "error" in r else
                  f"{statistics.median(r['round_seconds'][1:]):.3f} s/round, "
                  f"accuracy {r['accuracy'][-1]:.4f}"), file=sys.stderr)
    result = {"workload": {k: getattr(args, k) for k in ("clients", "steps", "batch", "rounds",
                                                         "repeats", "workers", "load", "seed",
                                                         "shared_session")},
              "peer_env": args.peer_env, "cpus": os.cpu_count(), "summary": summarize(runs),
              "runs": runs}
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
