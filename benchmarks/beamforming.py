"""Receive-beamforming benchmark: quality against the SDR bound and instances per second.

    python benchmarks/beamforming.py --json [--seed S ...] [--instances 200] [--multistart-subset K]

For (M, n) in {(4, 8), (10, 15), (16, 30)} and each instance seed (``--seed``, repeatable;
default: ``--fresh`` new seeds, printed in the output, so the headline is on instances
nothing was tuned on) it draws Rayleigh instances h ~ CN(0, I_M), computes the SDR upper
bound of every instance and reports, per method, the ratio min_gain / bound as mean ±
standard error, its minimum and instances per second (whole-call wall time). The cvxpy
multi-start SCA (from every §5.6 start, the same starts as ``fast``) runs on the first
``--multistart-subset`` instances (default: all); ``fast_minus_sca_multistart`` is the
paired difference of the ratios on those instances and ``fast_speedup_vs_sca_multistart``
the ratio of instances per second. ``certified`` reports its gap to the bound.
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

from channels.rayleigh import simo_rayleigh
from solvers import beamforming

SIZES = ((4, 8), (10, 15), (16, 30))


def _stats(x: np.ndarray) -> dict:
    return {"mean": float(x.mean()), "stderr": float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1
            else float("nan"), "min": float(x.min())}


def _entry(r: beamforming.BeamformingResult, bound: np.ndarray) -> dict:
    ratio = r.min_gain / bound[: r.min_gain.size]
    return {"instances": int(r.min_gain.size), "ratio": _stats(ratio),
            "instances_per_second": r.min_gain.size / r.seconds,
            "never_below_start": bool((r.min_gain >= r.start_gain).all())}


def bench(m: int, n: int, seed: int, count: int, multistart_subset: int) -> dict:
    h = simo_rayleigh((count,), n, m, np.random.default_rng(seed))
    sdr = beamforming.solve(h, "sdr", seed=seed)
    bound = sdr.upper_bound
    row = {"M": m, "n": n, "seed": seed, "sdr": _entry(sdr, bound)}
    results = {method: beamforming.solve(h, method, seed=seed)
               for method in ("fast", "certified", "eigen", "strongest", "random")}
    for method, r in results.items():
        row[method] = _entry(r, bound)
    row["certified"]["gap_relative"] = _stats(results["certified"].gap / results["certified"].upper_bound)
    k = min(multistart_subset, count)
    ms = beamforming.solve(h[:k], "sca", multistart=True, seed=seed)
    row["sca_multistart"] = _entry(ms, bound)
    fast = results["fast"].min_gain[:k] / bound[:k]
    row["fast_minus_sca_multistart"] = _stats(fast - ms.min_gain / bound[:k])
    row["fast_at_least_sca_multistart"] = float((fast >= ms.min_gain / bound[:k] - 1e-9).mean())
    row["fast_speedup_vs_sca_multistart"] = (row["fast"]["instances_per_second"]
                                             / row["sca_multistart"]["instances_per_second"])
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--seed", type=int, action="append", help="instance seed (repeatable)")
    p.add_argument("--fresh", type=int, default=1, help="fresh seeds when no --seed (default 1)")
    p.add_argument("--instances", type=int, default=200)
    p.add_argument("--multistart-subset", type=int, default=None, help="default: all instances")
    p.add_argument("--sizes", default=None, help="e.g. 10x15,4x8 (M x n); default all three")
    args = p.parse_args()
    seeds = args.seed or [int(np.random.SeedSequence().entropy % 2**32) for _ in range(args.fresh)]
    sizes = SIZES if not args.sizes else [tuple(int(v) for v in s.split("x"))
                                          for s in args.sizes.split(",")]
    warnings.filterwarnings("ignore", "Solution may be inaccurate")
    rows = [bench(m, n, seed, args.instances, args.multistart_subset or args.instances)
            for seed in seeds for m, n in sizes]
    print(json.dumps({"seeds": seeds, "beamforming": rows}, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
