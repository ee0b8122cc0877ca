"""The NR uplink's sharing, HARQ limit and outage against the model of runs made before (issue 90).

    PYTHONPATH=. python benchmarks/nr_sharing.py [--out FILE]

For the defaults (UMi, 20 MHz at 30 kHz, 20 clients) and seeds 0-2, one round each on the
``("network", 1)`` stream, each client uploading the FCNN's 238,510 fp32 parameters
(7.63 Mbit), under the new default (``sharing: ofdma``, HARQ 4, RLC 4, min SINR -5 dB) and
under the link of runs made before (``sharing: tdma``, HARQ without limit, everyone served):

- ``rate_alone_mbps``: each client's rate with the band to itself (new: the PRB count that
  maximises its rate; before: its open-loop PRBs), pooled over seeds;
- ``throughput_mbps``: what each client achieved in the round, payload / its upload time;
- ``round_s``: the round's upload time; ``achieved_bler``: the mean TBLER of the clients not
  capped by the MCS table, and ``capped_share``, the share capped (MCS 27 with TBLER below
  half the target: Sionna has no table for MCS 28).

Prints and writes JSON: distributions as p10 / median / p90.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

BITS = 238_510 * 32.0
LEGACY = {"sharing": "tdma", "harq_max": 0, "min_sinr_db": None}


def _q(x: np.ndarray) -> dict[str, float]:
    return {"p10": float(np.percentile(x, 10)), "median": float(np.median(x)),
            "p90": float(np.percentile(x, 90))}


def measure(clients: int = 20, seeds: tuple[int, ...] = (0, 1, 2)) -> dict:
    from wirelessfl.net.links import NetworkConfig, make_link
    from wirelessfl.rng import Seeds

    out: dict = {"clients": clients, "seeds": list(seeds), "payload_bits": BITS}
    for name, settings in (("new", {}), ("before", LEGACY)):
        alone, thr, rounds, bler, capped, outage = [], [], [], [], [], 0
        for seed in seeds:
            link = make_link(NetworkConfig.of("nr", **settings), 1000, clients, Seeds(seed))
            ids = np.arange(clients)
            rng = Seeds(seed).generator("network", 1)
            if name == "new":
                ch = link.channels(clients, rng)
                up = ch.uplink(ids, np.full(clients, BITS), None, 0.0)
                ok = ~up.outage
                outage += int(up.outage.sum())
                tb = np.asarray(up.radio["tbler"], float)
                cap = np.asarray(up.radio["capped"], bool)
            else:
                sinr, prbs = link.sinr(clients, rng)
                mcs, _, tbler = link.transport(sinr, prbs)
                ch = link.channels(clients, Seeds(seed).generator("network", 1))
                up = ch.uplink(ids, np.full(clients, BITS), None, 0.0)
                ok = np.ones(clients, bool)
                tb = np.minimum(tbler, 1.0)
                cap = (mcs == 27) & (tbler < 0.05)
            alone.append(ch.rates)
            thr.append(BITS / up.finish_s[ok])
            rounds.append(float(up.seconds))
            bler.append(tb[ok & ~cap])
            capped.append(cap[ok])
        out[name] = {"rate_alone_mbps": _q(np.concatenate(alone) / 1e6),
                     "throughput_mbps": _q(np.concatenate(thr) / 1e6),
                     "round_s": rounds,
                     "achieved_bler": float(np.mean(np.concatenate(bler))),
                     "capped_share": float(np.mean(np.concatenate(capped))),
                     "outage": outage}
    out["median_rate_alone_ratio"] = (out["new"]["rate_alone_mbps"]["median"]
                                      / out["before"]["rate_alone_mbps"]["median"])
    out["median_throughput_ratio"] = (out["new"]["throughput_mbps"]["median"]
                                      / out["before"]["throughput_mbps"]["median"])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--out", help="also write the JSON report to this file")
    args = p.parse_args(argv)
    report = measure(args.clients)
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
