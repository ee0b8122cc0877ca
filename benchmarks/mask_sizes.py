"""Mask-size solver benchmark: solve time per backend and agreement of the optima.

    python benchmarks/mask_sizes.py --json [--seed S] [--agreement 1000]

Instances come from ``--seed`` (default: a fresh seed, printed in the output), so the
headline numbers are on instances the solver was never tuned on. ``--agreement K`` solves K
fresh N = 64 instances one call at a time with the exact solver and Gurobi and reports how
many optima agree and the median per-call speed-up (the solver-quality issue's target:
≥ 100×, the same optimum on all).

For N in {4, 16, 64, 256, 1024, 1e4, 1e5} cells it draws instances (per-unit latencies
U(1, 2) ms, D = 300·N/4 units, cap ⌊1.5 D/N⌋) and times each backend that can take the size
(Gurobi's pip licence is size-limited; HiGHS takes ~10 s at N = 1024), model building
included, one call per instance; up to N = 1024 also the per-instance time of one batched
call on 1000 instances. It also reports the Fig. 6 scenario of HIST (N = 4, 15 clients per
cell, §6.4): optimised vs uniform OMA round latency averaged over rounds.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from solvers import mask_sizes
from solvers.latency import size_cap, uniform_sizes
from wirelessfl.net.resources import draw_resources, unit_latency

LIMITS = {"exact": 10**5, "highs": 1024, "gurobi": 1024}


def time_backends(n_cells: int, repeats: int, rng: np.random.Generator) -> dict:
    total = 300 * n_cells // 4
    cap = size_cap(total, n_cells)
    row: dict = {"N": n_cells}
    lat: dict[str, list[float]] = {}
    instances = rng.uniform(1e-3, 2e-3, (repeats, n_cells))
    for backend, limit in LIMITS.items():
        if n_cells > limit:
            continue
        secs = []
        for k in range(repeats):
            c = instances[k]
            t = time.perf_counter()
            try:
                r = mask_sizes.solve(c, total, cap, backend=backend)
            except mask_sizes.SolverUnavailableError as exc:
                row[f"{backend}_error"] = str(exc)
                break
            secs.append(time.perf_counter() - t)
            lat.setdefault(backend, []).append(float(r.latency))
        if secs:
            row[f"{backend}_seconds"] = float(np.median(secs))
    ref = np.array(lat["exact"])
    row["max_rel_gap_vs_exact"] = {b: float(np.max(np.abs(np.array(v) - ref[:len(v)]) / ref[:len(v)]))
                                   for b, v in lat.items() if b != "exact"}
    if n_cells <= 1024:  # a latency study solves many rounds/instances in one batched call
        batch = rng.uniform(1e-3, 2e-3, (1000, n_cells))
        t = time.perf_counter()
        mask_sizes.solve(batch, total, cap)
        row["exact_batched_seconds_per_instance"] = (time.perf_counter() - t) / 1000
    if "gurobi_seconds" in row:
        row["exact_speedup_vs_gurobi"] = row["gurobi_seconds"] / row["exact_seconds"]
        if "exact_batched_seconds_per_instance" in row:
            row["exact_batched_speedup_vs_gurobi"] = (row["gurobi_seconds"]
                                                      / row["exact_batched_seconds_per_instance"])
    return row


def fig6_scenario(rounds: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    opt, uni = [], []
    for _ in range(rounds):
        c = unit_latency(draw_resources(4, 15, rng), scheme="oma", units=300,
                         num_params=238_510, local_steps=40)
        r = mask_sizes.solve(c, 300, size_cap(300, 4))
        opt.append(5 * float(r.latency))
        uni.append(5 * float((c * uniform_sizes(300, 4)).max()))
    return {"rounds": rounds, "optimised_round_latency_s": float(np.mean(opt)),
            "uniform_round_latency_s": float(np.mean(uni)),
            "saving": 1 - float(np.mean(opt)) / float(np.mean(uni))}


def agreement(count: int, rng: np.random.Generator, n_cells: int = 64) -> dict:
    """One call per instance, exact vs Gurobi: agreeing optima and the per-call speed-up."""
    same, ratios, exact_s, gurobi_s = 0, [], [], []
    for _ in range(count):
        c = rng.uniform(1e-3, 2e-3, n_cells) * rng.choice([1.0, 10.0], n_cells)
        total = int(rng.integers(1, 300 * n_cells // 4))
        cap = max(size_cap(total, n_cells), -(-total // n_cells))  # feasible
        t = time.perf_counter()
        e = mask_sizes.solve(c, total, cap)
        exact_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        try:
            g = mask_sizes.solve(c, total, cap, backend="gurobi")
        except mask_sizes.SolverUnavailableError as exc:
            return {"error": str(exc)}
        gurobi_s.append(time.perf_counter() - t)
        same += bool(np.isclose(e.latency, g.latency, rtol=1e-9, atol=0))
        ratios.append(gurobi_s[-1] / exact_s[-1])
    return {"N": n_cells, "instances": count, "same_optimum": same,
            "exact_seconds_median": float(np.median(exact_s)),
            "gurobi_seconds_median": float(np.median(gurobi_s)),
            "speedup_median": float(np.median(ratios)),
            "speedup_mean_of_medians": float(np.median(gurobi_s) / np.median(exact_s))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=None, help="instance seed (default: a fresh one)")
    p.add_argument("--agreement", type=int, default=1000, help="N = 64 instances vs Gurobi")
    args = p.parse_args()
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    rows = [time_backends(n, args.repeats, rng) for n in (4, 16, 64, 256, 1024, 10**4, 10**5)]
    out = {"seed": seed, "agreement_n64": agreement(args.agreement, rng), "backends": rows,
           "fig6": fig6_scenario(100, seed)}
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
