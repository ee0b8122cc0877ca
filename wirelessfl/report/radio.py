"""The radio of an ``nr`` run, from its rows: ``wirelessfl radio RUN_DIR``.

Every metrics row of a run over ``network.model: nr`` (with its HARQ limit or association
rule, the default) carries its round's per-client radio: ``radio`` = {clients, sinr_db,
mcs, prbs, tbler, rate_mbps, upload_s, capped, outage} (:meth:`wirelessfl.net.nr.NRRound.uplink`),
and ``outage``, the clients in outage. :func:`radio_records` flattens them to one record per
client and round (``pandas.DataFrame(radio_records(folder))``); :func:`radio_summary` gives
each quantity's distribution; :func:`plot_radio` draws it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from wirelessfl.run.records import RunRecord, is_number

#: The per-client quantities of a row's ``radio``, with their units.
FIELDS = {"sinr_db": "SINR [dB]", "mcs": "MCS index", "prbs": "PRBs alone",
          "tbler": "TBLER", "rate_mbps": "rate at the round's first shares [Mbit/s]",
          "upload_s": "upload time [s]"}


def radio_records(folder: str | Path) -> list[dict[str, Any]]:
    """One record per client and logged round.

    Each has round, client, each of :data:`FIELDS`, capped and outage (ValueError, one line,
    for a folder without radio rows).
    """
    rows = RunRecord(folder).rows()
    out: list[dict[str, Any]] = []
    for row in rows:
        radio = row.get("radio")
        if not isinstance(radio, dict):
            continue
        clients = radio.get("clients")
        if not isinstance(clients, list):
            raise ValueError(f"{folder}: the radio of round {row.get('round')} is damaged (no "
                             "client list)")
        lost = set(row.get("outage") or [])
        for i, c in enumerate(clients):
            rec = {"round": row.get("round"), "client": c, "outage": c in lost}
            for key in (*FIELDS, "capped"):
                values = radio.get(key)
                if not isinstance(values, list) or len(values) != len(clients):
                    raise ValueError(f"{folder}: the radio of round {row.get('round')} is "
                                     f"damaged ({key!r} is not one value per client)")
                rec[key] = values[i]
            out.append(rec)
    if not out:
        raise ValueError(f"{folder} has no radio rows: only runs over network.model nr log "
                         "them (with harq_max or min_sinr_db, the defaults)")
    return out


def radio_summary(folder: str | Path) -> dict[str, Any]:
    """Each quantity's percentiles (10, 50, 90) over the client-rounds that uploaded.

    Also the share of MCS-capped uploads and the client-rounds in outage.
    """
    recs = radio_records(folder)
    served = [r for r in recs if not r["outage"]]
    out: dict[str, Any] = {"client_rounds": len(recs), "outage": len(recs) - len(served),
                           "capped_share": (float(np.mean([bool(r["capped"]) for r in served]))
                                            if served else float("nan"))}
    for key in FIELDS:
        vals = np.array([r[key] for r in served if is_number(r[key])], float)
        out[key] = ({"p10": float(np.percentile(vals, 10)), "median": float(np.median(vals)),
                     "p90": float(np.percentile(vals, 90))} if len(vals) else None)
    return out


def format_summary(folder: str | Path, summary: dict[str, Any]) -> str:
    """The summary as the command prints it."""
    lines = [f"{folder}: {summary['client_rounds']} client-rounds logged, "
             f"{summary['outage']} in outage, {100 * summary['capped_share']:.0f}% of uploads at "
             "the top MCS with room to spare (Sionna has no table for MCS 28)",
             f"{'':44s} {'p10':>9s} {'median':>9s} {'p90':>9s}"]
    for key, label in FIELDS.items():
        q = summary[key]
        lines.append(f"{label:44s} " + ("-" if q is None else
                                         f"{q['p10']:9.3g} {q['median']:9.3g} {q['p90']:9.3g}"))
    return "\n".join(lines)


def plot_radio(folder: str | Path, out: str | Path) -> Path:
    """Histograms of :data:`FIELDS` over the uploads that arrived; a PNG at ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wirelessfl.run.records import atomic_write

    recs = [r for r in radio_records(folder) if not r["outage"]]
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.4))
    for a, (key, label) in zip(axes.ravel(), FIELDS.items()):
        vals = [r[key] for r in recs if is_number(r[key])]
        if vals:
            a.hist(vals, bins=min(30, max(5, len(set(vals)))), color="#4c72b0")
        a.set_xlabel(label)
        a.set_ylabel("client-rounds")
        a.grid(alpha=0.3)
    fig.suptitle(f"Radio of {Path(folder).name}: {len(recs)} uploads", fontsize=10)
    fig.tight_layout()
    out = Path(out)
    try:
        atomic_write(out, lambda fh: fig.savefig(fh, dpi=110, format="png"))
    finally:
        plt.close(fig)
    return out
