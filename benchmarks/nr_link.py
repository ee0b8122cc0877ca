"""The ``nr`` link's own cost per round against a 60-client FCNN FedAvg round (issue 69's target: ≤ 10 %).

    PYTHONPATH=. python benchmarks/nr_link.py --json [--out FILE] [--rounds 5]

One process: Sionna's import and PHY tables are built first and timed apart (once per
process, not per round). Then a 60-client Fashion-MNIST FCNN FedAvg round (IID, 20 local
steps of batch 50, the batched engine, evaluation off) under ``tdma`` and under ``nr``,
both with a 2 s deadline (so each round draws the link's rates twice: the uplink that drops
and the clock), medians of ``--rounds`` rounds after a warm-up; and the link's own work
alone, the median of 20 calls: the round's radio of 60 clients (``channels(60)``: fading,
power control and link adaptation on every PRB count) plus their uploads sharing the band
(``uplink``: outage, PRB shares, finish times). ``link_share`` = 2 × that / the ``nr``
round. The PHY tables (Sionna's TBLER on a SINR grid for every PRB count) are built once per
process and band, timed apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def _base(threads: int) -> dict:
    return {"seed": 0, "rounds": 100, "eval_every": 1000,
            "data": {"dataset": "fashion_mnist", "num_clients": 60, "partition": "iid"},
            "model": {"name": "fcnn"}, "local": {"lr": 0.05, "batch_size": 50, "steps": 20},
            "algorithm": {"name": "fedavg"}, "threads": threads}


NETWORKS = {
    "tdma": {"model": "tdma", "snr_db": 10.0, "antennas": 4, "bandwidth_hz": 18.36e6,
             "deadline_s": 2.0},
    "nr": {"model": "nr", "deadline_s": 2.0},
}


def measure(rounds: int, threads: int) -> dict:
    from wirelessfl.net.nr import phy_tables, radio, sionna
    from wirelessfl.run.kinds import open_run

    t0 = time.perf_counter()
    sionna()
    t1 = time.perf_counter()
    radio()
    t2 = time.perf_counter()
    phy_tables(51)
    t3 = time.perf_counter()
    out = {"sionna_import_s": t1 - t0, "phy_tables_s": t2 - t1, "grid_tables_s": t3 - t2,
           "rounds": {}}
    for name, net in NETWORKS.items():
        exp = open_run({**_base(threads), "network": net}).exp
        state, _ = exp.algorithm.apply(exp.initial_state())  # warm-up (and the drop)
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            state, _ = exp.algorithm.apply(state)
            times.append(time.perf_counter() - t)
        out["rounds"][name] = statistics.median(times)
        if name == "nr":
            calls = []
            ids, bits = np.arange(60), np.full(60, 7.63e6)
            for i in range(20):
                t = time.perf_counter()
                exp.link.channels(60, np.random.default_rng(i)).uplink(ids, bits, 2.0, 0.0)
                calls.append(time.perf_counter() - t)
            out["nr_rates_60_s"] = statistics.median(calls)
    out["link_share"] = 2 * out["nr_rates_60_s"] / out["rounds"]["nr"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", action="store_true", help="print the JSON report")
    p.add_argument("--out", help="also write the JSON report to this file")
    args = p.parse_args(argv)
    report = measure(args.rounds, args.threads)
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        print(text)
    else:
        print(f"Sionna import {report['sionna_import_s']:.1f} s, PHY tables "
              f"{report['phy_tables_s']:.1f} s, grid tables {report['grid_tables_s']:.1f} s "
              "(once per process); 60-client FCNN round: "
              f"tdma {report['rounds']['tdma'] * 1e3:.0f} ms, nr {report['rounds']['nr'] * 1e3:.0f} "
              f"ms; nr radio + uploads of 60 {report['nr_rates_60_s'] * 1e3:.2f} ms, "
              f"{100 * report['link_share']:.1f}% of the round (2 calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
