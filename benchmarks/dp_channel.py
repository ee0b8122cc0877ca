"""The privacy the channel's own noise buys over the air, beside digital DP at the same ε.

    PYTHONPATH=. python benchmarks/dp_channel.py [--seeds 0 1 2] [--snr-db 10] [--out FILE]

Issue 73's target: on the quick co-design setting of figure (g) (real Fashion-MNIST, N = 20
clients, K = 10 a round, the 784-300-10 FCNN, 10 local steps of batch 32, γ = 0.05, 20
rounds, updates clipped to C = 1, uniform weights) FedAvg runs over the air (AirComp, 10
receive antennas, ``snr_db``, symbols not normalised: normalised ones carry noise that scales
with the updates) with ``dp: over_the_air`` and ``dp_noise: 0``: the clients add nothing, and
each round is accounted at the channel's own noise multiplier z_t = σ_t·K/C
from its logged MSE (``docs/guide/robustness.md``). Then the same runs with central DP over an
exact link at the z whose 20 rounds spend the same ε (solved by bisection on the same
accountant), and without DP. Printed and written as JSON: per seed the channel's ε after
the run, its multipliers' range, and the final accuracies (mean of the last 2 evaluations).
Fashion-MNIST must be installed (``dataset-fashion-mnist``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

ROUNDS, N, K, DELTA = 20, 20, 10, 1e-5


def config(seed: int, **over: dict) -> dict:
    """The quick co-design run of figure (g), with ``over`` merged into its sections."""
    raw = {"seed": seed, "rounds": ROUNDS, "eval_every": 5,
           "data": {"dataset": "fashion_mnist", "partition": "dirichlet_over_clients",
                    "num_clients": N, "alpha": 0.5, "min_size": 10},
           "model": {"name": "fcnn"}, "local": {"lr": 0.05, "batch_size": 32, "steps": 10},
           "algorithm": {"name": "fedavg", "clients_per_round": K, "weighting": "uniform"},
           "network": {"model": "none"}}
    for key, part in over.items():
        raw[key] = {**raw[key], **part}
    return raw


def run(raw: dict) -> list[dict]:
    """The rows of one run (in a scratch folder)."""
    from wirelessfl.run.kinds import open_run, run_job
    from wirelessfl.run.records import RunRecord

    with tempfile.TemporaryDirectory() as tmp:
        run_job(open_run(raw), Path(tmp) / "run", quiet=True)
        return RunRecord(Path(tmp) / "run").rows()


def final(rows: list[dict]) -> float:
    """Mean test accuracy of the last two evaluations."""
    return statistics.fmean(r["test_accuracy"] for r in rows[-2:])


def noise_for_epsilon(eps: float) -> float:
    """The central-DP z whose ROUNDS rounds spend ``eps`` (bisection on log z)."""
    from wirelessfl.server.privacy import epsilon

    if not math.isfinite(eps):
        return 0.0
    lo, hi = 1e-3, 1e3
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if epsilon("central", mid, ROUNDS, N, K, DELTA) > eps:
            lo = mid
        else:
            hi = mid
    return hi


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--snr-db", type=float, default=10.0)
    p.add_argument("--out", help="also write the JSON report here")
    args = p.parse_args(argv)
    air = {"model": "aircomp", "aggregation": "over_the_air", "snr_db": args.snr_db,
           "antennas": 10, "normalise": False}  # (normalised, the noise depends on the data)
    out = []
    for seed in args.seeds:
        rows = run(config(seed, algorithm={"dp": "over_the_air", "dp_noise": 0.0,
                                           "dp_clip": 1.0}, network=air))
        eps = rows[-1]["epsilon"]
        z_eq = noise_for_epsilon(eps)
        central = (run(config(seed, algorithm={"dp": "central", "dp_noise": z_eq, "dp_clip": 1.0}))
                   if z_eq > 0 else None)
        plain = run(config(seed))
        channel = [r["dp_channel_noise"] for r in rows if r.get("dp_channel_noise") is not None]
        out.append({"seed": seed, "epsilon_channel": eps,
                    "channel_multiplier_min": min(channel) if channel else None,
                    "channel_multiplier_max": max(channel) if channel else None,
                    "accuracy_channel_alone": final(rows),
                    "central_z_at_same_epsilon": z_eq,
                    "central_epsilon": central[-1]["epsilon"] if central else None,
                    "accuracy_central": final(central) if central else None,
                    "accuracy_no_dp": final(plain)})
        print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    report = {"snr_db": args.snr_db, "rounds": ROUNDS, "clients": N, "per_round": K,
              "delta": DELTA, "runs": out}
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
