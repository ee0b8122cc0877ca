"""A paper's figure trained in worker processes, runs alone against lockstep groups (issue 68).

    python benchmarks/figure_jobs.py --json FILE      # HIST's quick Fig. 3, --jobs 2 vs --batch-runs 6
    python benchmarks/figure_jobs.py --paper hist --only fig3 --jobs 2 --batch-runs 6 --repeats 4

Each setting is one whole ``wirelessfl figures PAPER --scale SCALE --only NAME --jobs J``
command into a fresh report folder: with its runs alone (``--batch-runs 1``, every run in a
worker of its own, one after another) and with ``--batch-runs M`` (lockstep groups of at
most M runs, dealt by work). The settings alternate (``--repeats`` passes, the order swapped
each pass), so both see the machine's drift alike. Per command: wall seconds, the user and
system CPU seconds, minor page faults and peak RSS of its processes (``getrusage`` of a
fresh parent's children, which counts the workers the command waited for). Reported: each setting's
medians and ``groups_over_alone``, the median wall ratio (issue 68's CPU target: at most 1,
"at least as fast"). Needs the figure's datasets (HIST: ``dataset-fashion-mnist``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from wirelessfl.run.records import cpu_model

ROOT = Path(__file__).resolve().parents[1]


#: Runs a command and prints the rusage of its process tree (a fresh parent per command, so
#: the peak RSS is that command's, not the largest of every command before it).
_WRAP = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
wall = time.perf_counter() - start
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps([wall, u.ru_utime, u.ru_stime, u.ru_minflt, u.ru_maxrss]))
"""


def measure(args: argparse.Namespace, batch_runs: int) -> dict[str, float]:
    """One whole figure command with ``--batch-runs batch_runs``: its times and memory."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "wirelessfl", "figures", args.paper, "--scale", args.scale,
               "--only", args.only, "--jobs", str(args.jobs), "--batch-runs", str(batch_runs),
               "--out", str(Path(tmp) / "report"), "--quiet"]
        out = subprocess.run([sys.executable, "-c", _WRAP, *cmd], cwd=ROOT, check=True,
                             capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    wall, user, system, faults, rss_kb = json.loads(out.strip().splitlines()[-1])
    return {"wall_s": round(wall, 2), "user_s": round(user, 2), "system_s": round(system, 2),
            "minor_faults": faults, "peak_rss_gb": round(rss_kb / 2**20, 2)}


def main() -> None:  # noqa: D103
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paper", default="hist")
    p.add_argument("--scale", default="quick", choices=("quick", "paper"))
    p.add_argument("--only", default="fig3", help="one figure of the paper")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--batch-runs", type=int, default=6)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    args = p.parse_args()
    if args.jobs < 1 or args.batch_runs < 2 or args.repeats < 1:
        p.error("--jobs and --repeats must be >= 1 and --batch-runs >= 2")
    settings = {"alone": 1, "groups": args.batch_runs}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in settings}
    for rep in range(args.repeats):
        for name in (list(settings) if rep % 2 == 0 else list(settings)[::-1]):
            runs[name].append(measure(args, settings[name]))
            print(f"pass {rep + 1}: {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    medians = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in runs.items()}
    out = {"benchmark": "figure_jobs", "paper": args.paper, "scale": args.scale,
           "figure": args.only, "jobs": args.jobs, "batch_runs": args.batch_runs,
           "machine": {"cpu": cpu_model(), "cpus": os.cpu_count()},
           "runs": runs, "medians": medians,
           "groups_over_alone": round(medians["groups"]["wall_s"] / medians["alone"]["wall_s"], 3),
           "target_groups_over_alone": 1.0}
    text = json.dumps(out, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
