"""PNG plots of run folders: accuracy vs rounds, vs uplink MB per client, vs simulated time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

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
    axes = plot_axes(records)
    fig, ax = plt.subplots(1, len(axes), figsize=(4.6 * len(axes), 3.6), squeeze=False)
    for a, (key, label) in zip(ax[0], axes):
        curves = {rec.folder.name: [(_x(r, key), 100.0 * r["test_accuracy"]) for r in rec.rows()
                                    if is_number(_x(r, key)) and is_number(r.get("test_accuracy"))]
                  for rec in records}
        log = key == "sim_time_s" and _spans_decades(curves)
        seen: dict[tuple, str] = {}
        for i, (name, pts) in enumerate(curves.items()):
            if log:
                pts = [p for p in pts if p[0] > 0]  # (round 0 at t = 0 has no place on a log axis)
            if not pts:
                continue
            same = seen.setdefault(tuple(pts), name)  # a curve drawn exactly over another: said
            a.plot(*zip(*pts), marker=MARKERS[i % len(MARKERS)], markersize=4,
                   markevery=max(1, len(pts) // 12), alpha=0.85,
                   label=name if same == name else f"{name} (= {same}, drawn under it)")
        a.set_xlabel(label + (" (log scale)" if log else ""))
        if log:  # AirComp's milliseconds beside NR's minutes: both readable
            a.set_xscale("log")
        if key == "round":  # rounds are whole numbers: no 2.5 ticks
            a.xaxis.set_major_locator(MaxNLocator(integer=True))
        a.set_ylabel("test accuracy [%]")
        a.grid(alpha=0.3)
    ax[0][0].legend(fontsize=8)
    fig.suptitle(_title(records), fontsize=10)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:  # written aside and renamed: an interrupted save leaves no half-written PNG
        atomic_write(out, lambda fh: fig.savefig(fh, dpi=120, format="png"))
    finally:
        plt.close(fig)
    return out


#: One marker per run (its line's points, about 12 of them), so overlapping lines stay apart.
MARKERS = ("o", "s", "^", "v", "D", "x", "P", "*")


def _spans_decades(curves: dict[str, list[tuple[float, float]]], decades: float = 2.0) -> bool:
    """Whether the runs' last x-values differ by more than ``decades`` powers of ten.

    (AirComp's rounds end in milliseconds where NR's take minutes: on a linear axis the first
    is a vertical line at 0.)
    """
    ends = [max(x for x, _ in pts) for pts in curves.values() if pts]
    ends = [x for x in ends if x > 0]
    return len(ends) >= 2 and max(ends) / min(ends) > 10.0 ** decades


def plot_axes(records: Sequence[RunRecord]) -> list[tuple[str, str]]:
    """The x-axes (row key, label) that some row of the runs has: rounds, uplink, simulated time."""
    return [(k, label) for k, label in _AXES
            if any(is_number(row.get(k)) for r in records for row in r.rows())]


def _x(row: dict, key: str) -> object:
    """``row[key]``; a timed run's round 0 (before any round) is at simulated time 0."""
    if key == "sim_time_s" and row.get(key) is None and row.get("round") == 0:
        return 0.0
    return row.get(key)


def _title(records: list[RunRecord]) -> str:
    """The run's name and settings (one run), else how many runs."""
    if len(records) > 1:
        return f"test accuracy of {len(records)} runs"
    try:
        cfg = records[0].config()
    except ValueError:
        return records[0].folder.name
    data, algo = cfg.get("data") or {}, cfg.get("algorithm") or cfg.get("method") or {}
    parts = [str(cfg.get("name", records[0].folder.name)),
             str(algo.get("name", "")) if isinstance(algo, dict) else "",
             str(data.get("dataset", "")) if isinstance(data, dict) else "",
             f"{data.get('num_clients')} clients" if isinstance(data, dict)
             and data.get("num_clients") else ""]
    return " · ".join(p for p in parts if p)
