"""PNG plots of run folders: accuracy vs rounds, vs uplink MB per client, vs simulated time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from wirelessfl.run.records import RunRecord, atomic_write, is_number  # noqa: E402

_AXES = (("round", "global round"), ("uplink_mb_per_client", "uplink per client [MB]"),
         ("sim_time_s", "simulated time [s]"))


def plot_runs(folders: Sequence[str | Path], out: str | Path) -> Path:
    """Plot test accuracy of each run against every x-axis its metrics have; save a PNG."""
    records = [RunRecord(f) for f in folders]
    for r in records:
        if not r.rows():
            raise ValueError(f"{r.folder} has no metrics.jsonl rows; is it a run folder?")
        if not any(is_number(row.get("test_accuracy")) for row in r.rows()):
            raise ValueError(f"{r.folder}: no metrics row has a test_accuracy; the plot shows "
                             "test accuracy (is metrics.jsonl damaged?)")
    axes = [(k, label) for k, label in _AXES if any(k in r.rows()[0] for r in records)]
    fig, ax = plt.subplots(1, len(axes), figsize=(4.6 * len(axes), 3.6), squeeze=False)
    for rec in records:
        rows = rec.rows()
        name = rec.folder.name
        for a, (key, label) in zip(ax[0], axes):
            pts = [(r[key], r["test_accuracy"]) for r in rows
                   if is_number(r.get(key)) and is_number(r.get("test_accuracy"))]
            if pts:
                a.plot(*zip(*pts), marker="." if len(pts) < 40 else None, label=name)
            a.set_xlabel(label)
            a.set_ylabel("test accuracy")
            a.grid(alpha=0.3)
    ax[0][0].legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:  # written aside and renamed: an interrupted save leaves no half-written PNG
        atomic_write(out, lambda fh: fig.savefig(fh, dpi=120, format="png"))
    finally:
        plt.close(fig)
    return out
