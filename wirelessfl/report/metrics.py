"""What a figure reads off its runs' rows.

Values at a target, final accuracies, accuracy after session transitions, and the
multi-task time curves and times to target.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from wirelessfl.report.spec import Figure, RunSpec, run_folder, run_tasks
from wirelessfl.run.records import RunRecord, first_reaching


def run_rows(root: Path, run: RunSpec) -> list[dict[str, Any]]:
    """The metric rows of ``run`` under the report folder ``root``."""
    return RunRecord(run_folder(root, run)).rows()


def diverged(root: Path, run: RunSpec) -> bool:
    """Whether ``run``'s training diverged (it has a divergence record and no summary)."""
    record = RunRecord(run_folder(root, run))
    return record.summary() is None and record.diverged() is not None


def row_value(row: dict[str, Any], key: str) -> float:
    """A row's ``key``; the §6.6 MB fall back to exact MB when the model has no convention."""
    if key == "uplink_mb_paper_per_client" and key not in row:
        key = "uplink_mb_per_client"
    if key == "sim_time_min":
        v = row.get("sim_time_s")
        return float("nan") if v is None else float(v) / 60
    v = row.get(key)
    return float("nan") if v is None else float(v)


def to_target(rows: list[dict[str, Any]], target: float, metric: str) -> float:
    """``metric`` at the first round reaching ``target`` (§6.6); NaN if never reached."""
    hit = first_reaching(rows, target)
    return float("nan") if hit is None else row_value(hit, metric)


def over_seeds(root: Path, runs: list[RunSpec], target: float,
                metric: str) -> tuple[np.ndarray, str]:
    """``metric`` at the target of the runs that reached it, and "reached/runs"."""
    vals = np.array([to_target(run_rows(root, r), target, metric) for r in runs])
    reached = vals[~np.isnan(vals)]
    return reached, f"{reached.size}/{vals.size}"


def group_runs(fig: Figure) -> dict[tuple[str, str, Any], list[RunSpec]]:
    """A figure's runs grouped by (panel, series, sweep value): the seeds of one point."""
    out: dict[tuple[str, str, Any], list[RunSpec]] = {}
    for r in fig.runs:
        value = tuple(r.value) if isinstance(r.value, list) else r.value  # e.g. an SNR pair
        out.setdefault((r.panel, r.series, value), []).append(r)
    return out


def nanmean(values: list[float]) -> float:
    """Mean of the finite values; NaN (without numpy's warning) when there are none."""
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def session_starts(rows: list[dict[str, Any]]) -> list[int]:
    """Indices of the rows that open a new session (none for a run without sessions)."""
    return [i for i in range(1, len(rows)) if rows[i].get("session") != rows[i - 1].get("session")
            and rows[i - 1]["round"] > 0]


def transition_accuracy(rows: list[dict[str, Any]], session: int, window: int = 10) -> float:
    """Mean active-label accuracy over the first ``window`` rounds of ``session`` (§4.3).

    A row at round t carries the session its clients trained in (round t − 1's); NaN when
    the run has no such session.
    """
    mine = [r for r in rows if r["round"] > 0 and r.get("session") == session]
    if not mine:
        return math.nan
    first = mine[0]["round"]
    return float(np.mean([r["active_accuracy"] for r in mine if r["round"] < first + window]))


def mean_steps(rows: list[dict[str, Any]], key: str = "test_accuracy",
               tasks: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A multi-task run's evaluation times and, at each, the mean of ``key`` over ``tasks``.

    Each task (default: all of the run's) counts with its latest evaluation; before its
    first, an accuracy counts as 0 and a loss as NaN. With ``test_accuracy`` over all tasks
    this is ``docs/papers/fedast.md`` §7 item 11's curve for M identical tasks.
    """
    tasks = tasks or sorted({r["task"] for r in rows})
    rows = sorted((r for r in rows if r["task"] in tasks), key=lambda r: r["sim_time"])
    latest = dict.fromkeys(tasks, 0.0 if key == "test_accuracy" else math.nan)
    means = []
    for r in rows:
        latest[r["task"]] = r[key]
        means.append(float(np.mean(list(latest.values()))))
    return np.array([r["sim_time"] for r in rows], float), np.array(means)


def mean_accuracy_time(rows: list[dict[str, Any]], target: float) -> float:
    """First simulated time the mean accuracy over a run's tasks reaches ``target`` (NaN if never)."""
    times, means = mean_steps(rows)
    hit = np.flatnonzero(means >= target)
    return float(times[hit[0]]) if hit.size else float("nan")


def all_done_time(rows: list[dict[str, Any]], targets: dict[str, float]) -> float:
    """First simulated time every task has reached its own target (heterogeneous tasks)."""
    times = []
    for name, target in targets.items():
        hit = next((r["sim_time"] for r in rows if r["task"] == name
                    and r["test_accuracy"] >= target), None)
        times.append(float("nan") if hit is None else float(hit))
    return max(times)


def time_to_target(run: RunSpec, rows: list[dict[str, Any]], metric: str) -> float:
    """A multi-task run's time to target: ``mean_accuracy`` (identical tasks) or ``all_done``."""
    if metric == "all_done":
        return all_done_time(rows, {t.name: t.target for t in run_tasks(run)})
    return mean_accuracy_time(rows, run_tasks(run)[0].target)


def run_finals(run: RunSpec, rows: list[dict[str, Any]],
               per_task: bool) -> dict[str, dict[str, float]]:
    """A multi-task run's final test accuracy and loss and its time to target.

    Per task (``per_task``), or ``mean`` over its tasks: the mean of their final values and
    the time the mean accuracy reaches the target. NaN where not reached.
    """
    tasks = run_tasks(run)
    out = {}
    for t in tasks:
        last = next((r for r in reversed(rows) if r["task"] == t.name), None)
        out[t.name] = {"accuracy": math.nan if last is None else last["test_accuracy"],
                       "loss": math.nan if last is None else last["test_loss"],
                       "time": all_done_time(rows, {t.name: t.target})}
    if per_task:
        return out
    return {"mean": {"accuracy": float(np.mean([v["accuracy"] for v in out.values()])),
                     "loss": float(np.mean([v["loss"] for v in out.values()])),
                     "time": mean_accuracy_time(rows, tasks[0].target)}}


def final_accuracy(rows: list[dict[str, Any]], last: int) -> float:
    """Mean test accuracy over a run's last ``last`` evaluations (round 0 excluded)."""
    acc = [r["test_accuracy"] for r in rows if r["round"]][-last:]
    return float(np.mean(acc)) if acc else math.nan
