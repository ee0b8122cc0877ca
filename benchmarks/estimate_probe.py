"""How near ``--estimate``'s probe comes to timing the same setting whole.

    python benchmarks/estimate_probe.py --json [--setting PAPER:FIGURE:PANEL:SERIES ...]

For each setting (a paper-scale figure's panel and series, its first sweep value and seed)
it times the probe (:func:`wirelessfl.report.estimate.probe_setting`: one round with sampled
training, evaluation timed on 100 samples and scaled) and the whole timing
(:func:`wirelessfl.report.estimate.time_whole_setting`: real rounds on the stand-in with its
real-size test set), both on the same stand-in data, and reports each one's seconds a round,
an evaluation and a run, and the ratio probe / whole of a run's seconds. The default
settings have rounds short enough to time whole here: HIST Table I (LeNet-5, Fashion-MNIST),
a co-design FCNN round, dynamic clients' Table 12 on SVHN (MOON, a CNN) and Table 3 on SVHN
(FedAvg), both with the proposed initial model. Run it alone on the machine: both timings are wall clocks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from wirelessfl.report import estimate
from wirelessfl.report.spec import load_figures
from wirelessfl.run.kinds import canonical

DEFAULT = ("hist:table1::HIST", "codesign:clients::", "dynamic:table12:SVHN:Proposed",
           "dynamic:table3:SVHN o=0.0 α=0.3 FedAvg:Proposed")


def pick(setting: str) -> Any:
    """The first run of ``PAPER:FIGURE:PANEL:SERIES`` (empty panel or series: the first)."""
    paper, figure, panel, series = (setting.split(":") + ["", "", ""])[:4]
    (fig,) = load_figures(paper, "paper", only=[figure])
    for r in fig.runs:
        if (not panel or panel in r.panel) and (not series or series == r.series):
            return r
    raise SystemExit(f"{setting}: no such run (panels {sorted({r.panel for r in fig.runs})}, "
                     f"series {sorted({r.series for r in fig.runs})})")


def measure(setting: str, sample_rounds: int = 2) -> dict[str, Any]:
    """The probe's and the whole timing's costs of one setting, side by side."""
    run = pick(setting)
    cfg = canonical(run.raw)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        probe = estimate.probe_setting(run, Path(tmp) / "probe")
        probe_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        whole = estimate.time_whole_setting(run, sample_rounds, Path(tmp), lambda _: None)
        whole_s = time.perf_counter() - t0
    for cost in (probe, whole):
        if isinstance(cost, str):
            return {"setting": setting, "label": run.label, "error": cost}
    every = int(cfg.get("eval_every") or 1)
    return {"setting": setting, "label": run.label, "rounds": int(cfg["rounds"]),
            "eval_every": every,
            "probe": {"start_s": probe.start, "round_s": probe.per_round, "eval_s": probe.per_eval,
                      "run_s": probe.of(cfg), "sampled": probe.sampled, "took_s": probe_s},
            "whole": {"start_s": whole.start, "round_s": whole.per_round,
                      "run_s": whole.of(cfg), "took_s": whole_s},
            "probe_over_whole": probe.of(cfg) / max(whole.of(cfg), 1e-9)}


#: Figures of three kinds whose quick runs fit minutes here, for ``--against-runs``.
FIGURES = ("codesign:noise_free", "hist:fig3", "fadamgc:fig2")


def against_runs(figure: str, folder: Path) -> dict[str, Any]:
    """``figures --estimate`` for ``PAPER:FIGURE`` at quick scale against training it for real.

    Both are the command line's, in their own processes, one after the other: the estimate's
    hours, the real run's wall seconds (start-up included), their ratio. Nothing is reused.
    """
    import subprocess
    import sys

    paper, name = figure.split(":")
    base = [sys.executable, "-m", "wirelessfl.cli", "figures", paper, "--scale", "quick",
            "--only", name, "--out", str(folder / name), "--quiet"]
    t0 = time.perf_counter()
    est = subprocess.run([*base, "--estimate"], capture_output=True, text=True, check=True)
    est_took = time.perf_counter() - t0
    hours = [float(line.split()[3]) for line in est.stdout.splitlines()  # start-up included
             if line.split()[:1] == ["total"]]
    t0 = time.perf_counter()
    subprocess.run(base, capture_output=True, text=True, check=True)
    real = time.perf_counter() - t0
    est_s = hours[0] * 3600 if hours else float("nan")
    return {"figure": figure, "estimate_s": est_s, "estimate_took_s": est_took, "real_s": real,
            "estimate_over_real": est_s / real, "load": os.getloadavg()[0]}


def main() -> None:  # noqa: D103
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", action="append", help="PAPER:FIGURE:PANEL:SERIES (repeatable)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--against-runs", nargs="*", metavar="PAPER:FIGURE",
                    help="compare `figures --estimate` with a real run of these quick figures "
                         f"(none named: {', '.join(FIGURES)})")
    args = ap.parse_args()
    if args.against_runs is not None:
        with tempfile.TemporaryDirectory() as tmp:
            rows = [against_runs(f, Path(tmp)) for f in args.against_runs or FIGURES]
        print(json.dumps({"machine": platform.processor() or platform.machine(),
                          "cores": os.cpu_count(), "figures": rows}, indent=1))
        return
    rows = []
    for s in args.setting or DEFAULT:
        rows.append(measure(s))
        r = rows[-1]
        if not args.json:
            print(r if "error" in r else
                  f"{r['label']}: probe {r['probe']['run_s'] / 3600:.3g} h a run "
                  f"({r['probe']['round_s']:.3g} s a round + {r['probe']['eval_s']:.3g} s an "
                  f"evaluation), whole {r['whole']['run_s'] / 3600:.3g} h "
                  f"({r['whole']['round_s']:.3g} s a round): ratio {r['probe_over_whole']:.2f}",
                  flush=True)
    if args.json:
        print(json.dumps({"machine": platform.processor() or platform.machine(),
                          "threads": torch.get_num_threads(), "settings": rows}, indent=1))


if __name__ == "__main__":
    main()
