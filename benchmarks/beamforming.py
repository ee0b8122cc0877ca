"""Receive-beamforming benchmark: quality against the SDR bound and instances per second.

    python benchmarks/beamforming.py --json [--instances 1000] [--sca-subset 50]

For (M, n) in {(10, 15), (4, 8), (16, 30)} it draws Rayleigh instances h ~ CN(0, I_M) and
solves them with every method of :func:`solvers.beamforming.solve`. The SDR upper bound is
computed on every instance; each method reports the mean and minimum of min_gain / bound and
instances per second (whole-call wall time). The cvxpy SCA reference (from the best §5.6
candidate) runs on the first ``--sca-subset`` instances and its multi-start variant on the
first ``--multistart-subset`` (with fast's ratio on the same subsets beside them);
``fast_speedup_vs_sca`` is the ratio of instances per second.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from channels.rayleigh import simo_rayleigh
from solvers import beamforming

SIZES = ((10, 15), (4, 8), (16, 30))


def _entry(r: beamforming.BeamformingResult, bound: np.ndarray) -> dict:
    ratio = r.min_gain / bound[: r.min_gain.size]
    return {"instances": int(r.min_gain.size), "ratio_mean": float(ratio.mean()),
            "ratio_min": float(ratio.min()), "instances_per_second": r.min_gain.size / r.seconds,
            "never_below_start": bool((r.min_gain >= r.start_gain).all())}


def bench(m: int, n: int, count: int, sca_subset: int, multistart_subset: int) -> dict:
    h = simo_rayleigh((count,), n, m, np.random.default_rng(0))
    sdr = beamforming.solve(h, "sdr")
    bound = sdr.upper_bound
    row = {"M": m, "n": n, "sdr": _entry(sdr, bound)}
    for method in ("fast", "eigen", "strongest", "random"):
        row[method] = _entry(beamforming.solve(h, method), bound)
    row["sca"] = _entry(beamforming.solve(h[:sca_subset], "sca"), bound)
    row["sca_multistart"] = _entry(beamforming.solve(h[:multistart_subset], "sca",
                                                     multistart=True), bound)
    fast_ratio = beamforming.solve(h).min_gain / bound
    row["fast_ratio_mean_on_sca_subset"] = float(fast_ratio[:sca_subset].mean())
    row["fast_ratio_mean_on_multistart_subset"] = float(fast_ratio[:multistart_subset].mean())
    row["fast_speedup_vs_sca"] = (row["fast"]["instances_per_second"]
                                  / row["sca"]["instances_per_second"])
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--sca-subset", type=int, default=50)
    p.add_argument("--multistart-subset", type=int, default=10)
    args = p.parse_args()
    rows = [bench(m, n, args.instances, args.sca_subset, args.multistart_subset)
            for m, n in SIZES]
    print(json.dumps({"beamforming": rows}, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
