"""One renderer per figure kind: a figure's plots and tables from its runs' rows.

Plots as PNG, PDF and SVG, tables as CSV and markdown, in a style (:func:`figure_style`):
``report`` or ``paper``.
"""

from __future__ import annotations

import contextlib
import math
import textwrap
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from cycler import cycler

from wirelessfl.run.kinds import canonical
from wirelessfl.run.records import first_reaching

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from wirelessfl.report.metrics import (
    diverged,
    final_accuracy,
    group_runs,
    mean_steps,
    nanmean,
    over_seeds,
    row_value,
    run_finals,
    run_rows,
    session_starts,
    time_to_target,
    transition_accuracy,
)
from wirelessfl.report.spec import Figure, run_tasks, series_label, show_value, sweep_label
from wirelessfl.report.tables import (
    LABELS,
    as_list,
    final_markdown,
    gains_markdown,
    targets_markdown,
    transitions_markdown,
    write_csv,
    write_text,
)
from wirelessfl.run.records import atomic_write

#: What a ``final`` figure can show per run: the last evaluation's test accuracy and loss,
#: and the simulated time to target.
_FINAL = {"accuracy": "final test accuracy", "loss": "final test loss",
          "time": "simulated time to target [s]"}


#: Figure styles (``wirelessfl figures --style``): ``report`` (the default: wide panels, the
#: title in the image) and ``paper`` (IEEE single-column panels, 3.5 in wide, 8-pt text, the
#: Okabe-Ito colour-blind-safe palette, fonts kept as text in PDF and SVG, and no title in the
#: image: the report README's caption carries it).
STYLES = ("report", "paper")
#: Okabe & Ito's eight colours, distinguishable under the common colour-vision deficiencies.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
             "#000000")
_PAPER_RC = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7,
             "ytick.labelsize": 7, "legend.fontsize": 6, "lines.linewidth": 1.2,
             "lines.markersize": 3, "axes.prop_cycle": cycler(color=list(OKABE_ITO))}
#: Every style: text stays text in the vector formats (editable, searchable).
_VECTOR_RC = {"pdf.fonttype": 42, "svg.fonttype": "none"}
#: Panel width and height [in] per style.
_PANEL = {"report": (5.0, 3.8), "paper": (3.5, 2.6)}
_STYLE: ContextVar[str] = ContextVar("figure_style", default="report")
#: Whether the image carries the figure's title (the style's default: only ``report``'s).
_TITLE: ContextVar[bool] = ContextVar("figure_title", default=True)
#: The formats every figure is written in (the PNG for the README, vector ones for papers).
FORMATS = ("png", "pdf", "svg")


@contextlib.contextmanager
def figure_style(name: str = "report", title: bool | None = None) -> Iterator[None]:
    """Render the figures of the block in style ``name`` (:data:`STYLES`).

    ``title``: whether the image carries the figure's title (None: the style's default,
    ``report`` yes, ``paper`` no); the README's caption carries it either way.
    """
    if name not in STYLES:
        raise ValueError(f"figure style must be one of {', '.join(STYLES)}, got {name!r}")
    if title is not None and not isinstance(title, bool):
        raise TypeError(f"title must be True, False or None, got {title!r}")
    token = _STYLE.set(name)
    titled = _TITLE.set(name == "report" if title is None else title)
    try:
        with plt.rc_context({**_VECTOR_RC, **(_PAPER_RC if name == "paper" else {})}):
            yield
    finally:
        _TITLE.reset(titled)
        _STYLE.reset(token)


def _figure(rows: int, cols: int, scale: float = 1.0) -> tuple[plt.Figure, np.ndarray]:
    """A grid of panels in the style's size, sharing each column's y-axis.

    A column shows one quantity, so its panels compare by eye.
    """
    w, h = _PANEL[_STYLE.get()]
    return plt.subplots(rows, cols, figsize=(scale * w * cols, scale * h * rows), squeeze=False,
                        sharey="col")


def _panels(fig: Figure, ncols: int) -> tuple[plt.Figure, np.ndarray, list[str]]:
    panels = list(dict.fromkeys(r.panel for r in fig.runs))
    f, ax = _figure(len(panels), ncols)
    return f, ax, panels


def _y_axis(a: plt.Axes, label: str, accuracy: bool = True) -> None:
    """The y axis's label; an accuracy axis in percent, as the tables and ``wirelessfl plot``.

    The runs and the CSVs keep accuracy as a fraction (the metric rows' unit); only the ticks
    read it as a percentage (0.8 is drawn as 80), so limits and reference lines stay in the data's unit.
    """
    if not accuracy:
        a.set_ylabel(label)
        return
    from matplotlib.ticker import PercentFormatter

    a.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, symbol=""))
    a.set_ylabel(f"{label} [%]")


def render_curves(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Mean accuracy over seeds (band: min to max) against each ``x``.

    ``y``: ``test_accuracy`` (default) or ``active_accuracy`` (dynamic clients: the test
    samples of the active label set); runs with sessions get their session boundaries as
    dotted vertical lines (Fig. 2 of the dynamic-clients paper).
    """
    xs = fig.spec["x"] if isinstance(fig.spec["x"], list) else [fig.spec["x"]]
    y = fig.spec.get("y", "test_accuracy")
    f, ax, panels = _panels(fig, len(xs))
    table = []
    for (panel, series, value), runs in group_runs(fig).items():
        rows = [run_rows(root, r) for r in runs]
        n = min(len(r) for r in rows)
        acc = np.array([[row[y] for row in r[:n]] for r in rows])
        for c, key in enumerate(xs):
            x = np.nanmean([[row_value(row, key) if row["round"] else 0.0 for row in r[:n]]
                            for r in rows], axis=0)
            a = ax[panels.index(panel)][c]
            line, = a.plot(x, acc.mean(0), label=series_label(fig, series, value))
            if len(rows) > 1:
                a.fill_between(x, acc.min(0), acc.max(0), color=line.get_color(), alpha=0.15)
            for i in session_starts(rows[0][:n]):  # the session's first round starts at x[i-1]
                a.axvline(x[i - 1], color="0.5", lw=0.6, ls=":")
            a.set(xlabel=LABELS.get(key, key), title=panel)
            _y_axis(a, y.replace("_", " "), "accuracy" in y)
            a.grid(alpha=0.3)
        table += [{"panel": panel, "series": series, "sweep": show_value(value), "round": rows[0][i]["round"],
                   **({"session": rows[0][i]["session"]} if "session" in rows[0][i] else {}),
                   "accuracy_mean": acc[:, i].mean(), "accuracy_min": acc[:, i].min(),
                   "accuracy_max": acc[:, i].max(), "seeds": len(rows),
                   **{k: nanmean([row_value(r[i], k) if r[i]["round"] else 0.0 for r in rows])
                      for k in xs if k != "round"}} for i in range(n)]
    return [*_finish(fig, f, ax, out, table), _targets_csv(fig, root, out)]


def render_transitions(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Dynamic clients' tables: accuracy after each session transition, beside the paper's.

    A row per panel (and sweep value), a column per transition k (``transitions``, default
    1, 2, 3) and series; a cell is the mean over seeds (± sample std) of
    :func:`transition_accuracy` at session P + 1 + k (``docs/papers/dynamic_clients.md`` §4.3, P the
    run's pilot sessions). ``reference``: per panel the paper's cells in the same column
    order (per sweep value when swept). With ``method`` the note counts, per transition,
    the rows where it is ≥ each other series and where it is best. A run whose training
    diverged is left out of its cell's mean, which says how many did.
    """
    ks, window = fig.spec.get("transitions", [1, 2, 3]), fig.spec.get("window", 10)
    groups = group_runs(fig)
    series = list(dict.fromkeys(s for _, s, _ in groups))
    keys = list(dict.fromkeys((p, v) for p, _, v in groups))
    pilot = {r.key: canonical(r.raw)["initial_model"]["pilot_sessions"] for r in fig.runs}
    gone = {r.key for r in fig.runs if diverged(root, r)}  # read once, not per transition
    rows, cells = [], {}
    for panel, value in keys:
        ref = (fig.spec.get("reference") or {}).get(panel)
        ref = ref.get(value) if isinstance(ref, dict) else ref
        ref = iter(ref or ())
        row: dict[str, Any] = {"setting": panel, sweep_label(fig, "sweep"): show_value(value)}
        for k in ks:
            for name in series:
                runs = groups.get((panel, name, value), [])
                kept = [r for r in runs if r.key not in gone]  # a diverged run has none
                vals = np.array([transition_accuracy(run_rows(root, r), pilot[r.key] + 1 + k, window)
                                 for r in kept]) * 100
                mean = float(np.mean(vals)) if vals.size else math.nan
                std = float(np.std(vals, ddof=1)) if vals.size > 1 else math.nan
                cells[(panel, value, k, name)] = mean
                row.update({f"{name} T{k}": round(mean, 2), f"{name} T{k} std": round(std, 2),
                            f"{name} T{k} paper": next(ref, None),
                            f"{name} T{k} diverged": f"{len(runs) - len(kept)}/{len(runs)}"})
        rows.append(row)
    md = out / f"{fig.name}.md"
    write_text(md, transitions_markdown(fig, rows, keys, ks, series, cells))
    return [write_csv(out / f"{fig.name}.csv", rows), md]


def _targets_csv(fig: Figure, root: Path, out: Path) -> Path:
    """Round, uplink and simulated latency at the first round reaching the run's target."""
    table = []
    for (panel, series, value), runs in group_runs(fig).items():
        target = runs[0].raw.get("target_accuracy")
        if target is None:
            continue
        rows = [run_rows(root, r) for r in runs]
        hits = [h for h in (first_reaching(r, target) for r in rows) if h is not None]
        row = {"panel": panel, "series": series, "sweep": show_value(value), "target": target,
               "reached": f"{len(hits)}/{len(rows)}",
               "final_accuracy_mean": float(np.mean([r[-1]["test_accuracy"] for r in rows]))}
        for key in ("round", "uplink_mb_per_client", "sim_time_s"):
            row[f"{key}_mean"] = float(np.mean([row_value(h, key) for h in hits])) if hits else math.nan
        table.append(row)
    return write_csv(out / f"{fig.name}-to-target.csv", table)


def render_sweep(fig: Figure, root: Path, out: Path) -> list[Path]:
    """``metric`` (one or a list, a column each) to reach ``target`` against the sweep values.

    ``log_y`` lists the metrics whose axis is logarithmic (values spanning decades).
    """
    metrics, target = as_list(fig.spec["metric"]), fig.spec["target"]
    logs = set(as_list(fig.spec.get("log_y", [])))
    f, ax, panels = _panels(fig, len(metrics))
    label = sweep_label(fig)
    table, lines = [], {}
    for (panel, series, value), runs in group_runs(fig).items():
        row: dict[str, Any] = {"panel": panel, "series": series, label: show_value(value)}
        for metric in metrics:
            reached, count = over_seeds(root, runs, target, metric)
            mean = float(reached.mean()) if reached.size else float("nan")
            row.update({f"{metric}_to_{target:g}_mean": mean,
                        f"{metric}_std": _sample_std(reached),
                        "reached": count})
            lines.setdefault((panel, series, metric), []).append((value, mean))
        table.append(row)
    swept = list(dict.fromkeys((p, s) for (p, s, _), pts in lines.items()
                               if not (len(pts) == 1 and pts[0][0] is None)))
    every = {int(canonical(r.raw).get("eval_every") or 1) for r in fig.runs}
    for (panel, series, metric), pts in lines.items():
        a = ax[panels.index(panel)][metrics.index(metric)]
        if len(pts) == 1 and pts[0][0] is None:  # a series not swept: a reference line
            a.axhline(pts[0][1], ls="--", color="0.4", label=series)
        else:  # a marker each and a small dodge: series that coincide stay visible
            i = swept.index((panel, series))
            a.plot(_dodged([show_value(p[0]) for p in pts], i, len(swept)), [p[1] for p in pts],
                   marker=MARKERS[i % len(MARKERS)], label=series, alpha=0.85)
            _ticks_at(a, [show_value(p[0]) for p in pts])
        quantum = (f" (evals every {max(every)})" if metric == "round" and max(every) > 1
                   else "")
        a.set(xlabel=label, ylabel=f"{LABELS.get(metric, metric)} to {100 * target:g}%{quantum}",
              title=panel, yscale="log" if metric in logs else "linear")
        a.grid(alpha=0.3)
    return _finish(fig, f, ax, out, table)


def _sample_std(values: np.ndarray) -> float:
    """The sample standard deviation over seeds (n − 1); 0 for one seed, NaN for none."""
    if values.size == 0:
        return float("nan")
    return float(values.std(ddof=1)) if values.size > 1 else 0.0


def _finish(fig: Figure, f: plt.Figure, ax: np.ndarray, out: Path,
            table: list[dict[str, Any]], *, legend: bool = True) -> list[Path]:
    if legend:
        ax[0][0].legend(fontsize=7)
    if any(type(c).__name__ in ("PolyCollection", "FillBetweenPolyCollection")
           for a in np.ravel(ax) for c in a.collections):  # say what the shaded bands are
        f.text(0.995, 0.005, "lines: mean over seeds; shaded: min to max over seeds",
               ha="right", va="bottom", fontsize=7, color="0.35")
    if _TITLE.get():  # (else the caption carries the title: the README's)
        # about 12 characters of 10-pt text per inch: wrap titles wider than a one-column figure
        f.suptitle(textwrap.fill(fig.title, int(12 * f.get_figwidth())), fontsize=10)
    for a in np.ravel(ax):  # a panel's title (12 pt: about 10 characters an inch) within it
        width = a.get_position().width * f.get_figwidth()
        a.set_title(textwrap.fill(a.get_title(), max(16, int(10 * width))))
    f.tight_layout()
    paths = []
    try:  # each written aside and renamed: an interrupted save leaves no half-written file
        for fmt in FORMATS:
            paths.append(out / f"{fig.name}.{fmt}")
            atomic_write(paths[-1], lambda fh, fmt=fmt: f.savefig(
                fh, dpi=120 if fmt == "png" else 300, format=fmt,
                **({"metadata": {"Date": None}} if fmt == "svg" else
                   {"metadata": {"CreationDate": None}} if fmt == "pdf" else {})))
    finally:
        plt.close(f)
    return [*paths, write_csv(out / f"{fig.name}.csv", table)]


def render_table(fig: Figure, root: Path, out: Path) -> list[Path]:
    """``metric`` (one or a list) to each target, mean ± sample std over seeds, beside the paper's.

    ``targets`` is a list, or per panel a list (e.g. 75% on CIFAR-10, 50% on CIFAR-100);
    ``reference`` gives per panel and target the paper's columns, or per panel, target and
    metric when the table has several metrics.
    """
    metrics = as_list(fig.spec["metric"])
    groups = group_runs(fig)
    columns = list(dict.fromkeys((s, v) for _, s, v in groups))
    paper = fig.spec.get("reference", {})
    rows = []
    for panel in dict.fromkeys(p for p, _, _ in groups):
        targets = fig.spec["targets"]
        for target in (targets.get(panel, []) if isinstance(targets, dict) else targets):
            for metric in metrics:
                row: dict[str, Any] = {"setting": panel, "target": f"{100 * target:g}%",
                                       "quantity": LABELS.get(metric, metric)}
                ref = (paper.get(panel) or {}).get(target)
                ref = ref.get(metric) if isinstance(ref, dict) else ref
                for (series, value), theirs in zip(columns, ref or [None] * len(columns)):
                    reached, count = over_seeds(root, groups[(panel, series, value)], target,
                                                 metric)
                    col = series_label(fig, series, value)
                    row[col] = round(float(reached.mean()), 2) if reached.size else None
                    row[f"{col} std"] = round(_sample_std(reached), 2) if reached.size else None
                    row[f"{col} reached"] = count
                    row[f"{col} paper"] = theirs
                rows.append(row)
    md = out / f"{fig.name}.md"
    write_text(md, targets_markdown(fig, rows, columns, len(metrics) > 1))
    return [write_csv(out / f"{fig.name}.csv", rows), md]


def render_gains(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Mean time to target per sweep value (bars per series) and the gain of ``method``.

    Gain over ``baseline``: (T_baseline − T_method) / T_baseline (``docs/papers/fedast.md`` §4.7).
    ``metric``: ``mean_accuracy`` (default) or ``all_done``.
    """
    method, baseline = fig.spec["method"], fig.spec["baseline"]
    label = sweep_label(fig, "setting")
    groups = group_runs(fig)
    f, ax, panels = _panels(fig, 1)
    table = []
    for panel in panels:
        values = list(dict.fromkeys(v for p, _, v in groups if p == panel))
        series = list(dict.fromkeys(s for p, s, _ in groups if p == panel))
        a, width = ax[panels.index(panel)][0], 0.8 / len(series)
        for v_i, value in enumerate(values):
            row: dict[str, Any] = {"panel": panel, label: show_value(value)}
            for s_i, name in enumerate(series):
                runs = groups[(panel, name, value)]
                times = np.array([time_to_target(r, run_rows(root, r), fig.spec.get(
                    "metric", "mean_accuracy")) for r in runs])
                done = times[~np.isnan(times)]
                row[f"{name} time"] = float(done.mean()) if done.size else math.nan
                row[f"{name} reached"] = f"{done.size}/{times.size}"
                a.bar(v_i + (s_i - (len(series) - 1) / 2) * width, row[f"{name} time"], width,
                      color=f"C{s_i}", label=name if v_i == 0 else None)
            gain = 1 - row[f"{method} time"] / row[f"{baseline} time"]
            row["gain_percent"] = 100 * gain
            top = np.nanmax([row[f"{n} time"] for n in series])
            a.annotate(f"{100 * gain:.1f}%", (v_i, top), ha="center", va="bottom", fontsize=8)
            table.append(row)
        a.set_xticks(range(len(values)), [show_value(v) for v in values])
        a.set(xlabel=label, ylabel="simulated time to target [s]", title=panel)
        a.grid(alpha=0.3, axis="y")
    paths = _finish(fig, f, ax, out, table)
    md = out / f"{fig.name}.md"
    write_text(md, gains_markdown(fig, table, method, baseline, label))
    return [*paths, md]


def render_time_curves(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Test accuracy (or loss) against simulated time (mean over seeds, band min–max).

    One panel per (panel, sweep value) and ``y`` entry (``accuracy``, default, or ``loss``),
    one line per series: the mean over a run's tasks (Fig. 15; the target dashed), or with
    ``per_task`` one line per series and task (Figs. 4/14).
    """
    groups = group_runs(fig)
    panels = list(dict.fromkeys(p for p, _, _ in groups))
    values = list(dict.fromkeys(v for _, _, v in groups))
    ys = fig.spec.get("y", ["accuracy"])
    cols = [(v, y) for v in values for y in ys]
    f, ax = _figure(len(panels), len(cols), scale=0.92)
    label = sweep_label(fig)
    table = []
    for (panel, series, value), runs in groups.items():
        names = [t.name for t in run_tasks(runs[0])] if fig.spec.get("per_task") else [None]
        for y, task in [(y, t) for y in ys for t in names]:
            steps = [mean_steps(run_rows(root, r), f"test_{y}", task and [task]) for r in runs]
            grid = np.linspace(0.0, max(t[-1] for t, _ in steps), 200)
            before = 0.0 if y == "accuracy" else math.nan
            curves = np.array([np.where(i >= 0, m[np.maximum(i, 0)], before) for t, m in steps
                               for i in [np.searchsorted(t, grid, side="right") - 1]])
            name = series if task is None else f"{series} {task}"
            a = ax[panels.index(panel)][cols.index((value, y))]
            line, = a.plot(grid, curves.mean(0), label=name)
            if len(runs) > 1:
                a.fill_between(grid, curves.min(0), curves.max(0), color=line.get_color(),
                               alpha=0.15)
            if y == "accuracy" and task is None:
                a.axhline(run_tasks(runs[0])[0].target, color="k", lw=0.8, ls="--")
            a.set(xlabel="simulated time [s]",
                  title=f"{panel} {label}={show_value(value)}".strip(" ="))
            _y_axis(a, f"{'mean ' if task is None else ''}test {y}", y == "accuracy")
            a.grid(alpha=0.3)
            table += [{"panel": panel, "series": series, "task": task or "mean",
                       label or "sweep": show_value(value), "time": g, f"{y}_mean": c}
                      for g, c in zip(grid[::10], curves.mean(0)[::10])]
    return _finish(fig, f, ax, out, table)


def render_final(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Final accuracy, loss or time to target (``y``) against the sweep values (Figs. 3, 8, 9).

    One line per series (with ``per_task``, per series and task), mean over the seeds that
    have a value; a series without sweep values (a reference such as centralized training)
    is a dashed horizontal line.
    """
    ys, per_task = fig.spec.get("y", ["accuracy"]), fig.spec.get("per_task", False)
    label = sweep_label(fig)
    f, ax, panels = _panels(fig, len(ys))
    table, lines = [], {}
    for (panel, series, value), runs in group_runs(fig).items():
        finals = [run_finals(r, run_rows(root, r), per_task) for r in runs]
        for task in finals[0]:
            row: dict[str, Any] = {"panel": panel, "series": series, "task": task,
                                   label: show_value(value)}
            for y in ys:
                vals = np.array([fin[task][y] for fin in finals])
                row[y] = float(np.nanmean(vals)) if np.isfinite(vals).any() else math.nan
            times = np.array([fin[task]["time"] for fin in finals])
            row["reached"] = f"{int(np.isfinite(times).sum())}/{times.size}"
            table.append(row)
            lines.setdefault((panel, series, task), []).append((value, row))
    for (panel, series, task), pts in lines.items():
        name = series if task == "mean" else f"{series} {task}"
        for c, y in enumerate(ys):
            a = ax[panels.index(panel)][c]
            if pts[0][0] is None:
                if np.isfinite(pts[0][1][y]):
                    a.axhline(pts[0][1][y], color="C7", ls="--", label=name)
            else:
                a.plot([v for v, _ in pts], [r[y] for _, r in pts], marker="o", label=name)
            a.set(xlabel=label, title=panel)
            _y_axis(a, _FINAL[y], y == "accuracy")
            a.grid(alpha=0.3)
    return _finish(fig, f, ax, out, table)


def _mark_diverged(a: plt.Axes, pts: list[dict[str, Any]], series: str, color: str) -> None:
    """An × at the foot of the axis, in the series' colour, where a sweep value's runs diverged."""
    gone = [p for p in pts if p["diverged"]]
    if not gone:
        return
    import matplotlib.transforms as mtransforms

    foot = mtransforms.blended_transform_factory(a.transData, a.transAxes)
    counts = ", ".join(f"{p['diverged']}/{p['seeds']}" for p in gone)
    a.plot([show_value(p["value"]) for p in gone], [0.03] * len(gone), ls="none", marker="x",
           ms=8, mew=2, color=color, transform=foot, clip_on=False,
           label=f"{series}: diverged ({counts} seeds)")


def render_final_accuracy(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Final accuracy per series (rows) and panel × sweep value (columns), mean ± sample std over seeds.

    The PNG has one axis per panel: bars per series, or lines against the sweep values (a
    series that is not swept is a dashed reference line). ``also`` adds the mean over
    seeds of other row keys at the last evaluation (e.g. the realised parameter fraction).
    A run whose training diverged has no final accuracy: the mean is over the other seeds,
    the table counts the diverged ones, and the plot marks their sweep values with an × at
    the axis' foot.
    """
    last, also = int(fig.spec.get("last", 10)), as_list(fig.spec.get("also", []))
    groups = group_runs(fig)
    table = []
    for (panel, series, value), runs in groups.items():
        gone = [diverged(root, r) for r in runs]
        rows = [run_rows(root, r) for r, d in zip(runs, gone) if not d]
        finals = np.array([final_accuracy(r, last) for r in rows])
        table.append({"panel": panel, "series": series, sweep_label(fig, "sweep"): show_value(value),
                      "final_accuracy_mean": float(finals.mean()) if len(finals) else math.nan,
                      "final_accuracy_std": float(finals.std(ddof=1)) if len(finals) > 1 else
                      (0.0 if len(finals) else math.nan),
                      "seeds": len(runs), "diverged": sum(gone),
                      **{k: nanmean([row_value(r[-1], k) for r in rows if r]) for k in also}})
    drawn_also = [k for k in as_list(fig.spec.get("draw_also", [])) if k in also]
    f, ax, panels = _panels(fig, 1 + len(drawn_also))
    lines: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row, (panel, series, value) in zip(table, groups):
        lines.setdefault((panel, series), []).append({**row, "value": value})
    swept = [(p, s) for (p, s), pts in lines.items() if pts[0]["value"] is not None]
    for (panel, series), pts in lines.items():
        a = ax[panels.index(panel)][0]
        if pts[0]["value"] is None and fig.spec.get("sweep"):
            a.axhline(pts[0]["final_accuracy_mean"], ls="--", color="0.4", label=series)
        elif fig.spec.get("sweep"):
            # series that coincide stay apart: a marker each, and a small sideways dodge
            i, xs = swept.index((panel, series)), [show_value(p["value"]) for p in pts]
            xs = _dodged(xs, i, len(swept))
            drawn = a.errorbar(xs, [p["final_accuracy_mean"] for p in pts],
                               yerr=[p["final_accuracy_std"] for p in pts],
                               marker=MARKERS[i % len(MARKERS)], capsize=3, label=series,
                               alpha=0.85)
            _mark_diverged(a, pts, series, drawn.lines[0].get_color())
            _ticks_at(a, [show_value(p["value"]) for p in pts])
            for c, key in enumerate(drawn_also, 1):  # e.g. the privacy spent, beside it
                b = ax[panels.index(panel)][c]
                b.plot(xs, [p[key] for p in pts], marker=MARKERS[i % len(MARKERS)],
                       color=drawn.lines[0].get_color(), label=series, alpha=0.85)
                b.set(xlabel=fig.spec.get("xlabel") or sweep_label(fig, "method"),
                      ylabel=LABELS.get(key, key), title=panel)
                if all(p[key] > 0 for p in pts if np.isfinite(p[key])):
                    b.set_yscale("log")
                _ticks_at(b, [show_value(p["value"]) for p in pts])
                b.grid(alpha=0.3)
        else:
            x = [s for (p, s) in lines if p == panel].index(series)
            a.bar(x, pts[0]["final_accuracy_mean"], yerr=pts[0]["final_accuracy_std"],
                  capsize=3, label=series)
        a.set(xlabel=fig.spec.get("xlabel") or sweep_label(fig, "method"), title=panel)
        _y_axis(a, f"final accuracy (last {last} evals)")
        a.grid(alpha=0.3)
    bars = not fig.spec.get("sweep")
    if bars:  # bars start at 0 (a cut axis exaggerates gaps); their names are the ticks
        for i, panel in enumerate(panels):
            names = [s for (p, s) in lines if p == panel]
            ax[i][0].set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
        hi = max(p[0]["final_accuracy_mean"] + p[0]["final_accuracy_std"] for p in lines.values())
        ax[0][0].set_ylim(0.0, min(1.0, hi + 0.05) if hi > 0 else 1.0)  # shared by the panels
    paths = _finish(fig, f, ax, out, table, legend=not bars)
    md = out / f"{fig.name}.md"
    write_text(md, final_markdown(fig, table, last))
    return [*paths, md]


#: One marker per series, so lines that coincide stay apart.
MARKERS = ("o", "s", "^", "v", "D", "x", "P", "*")


def _dodged(xs: list[Any], i: int, n: int) -> list[Any]:
    """Numeric x-values moved sideways for the i-th of n series (2 % of the smallest step).

    Series whose points coincide (AirComp at high SNR and the noise-free reference, or
    over-the-air and central DP at one z) are then all visible; non-numeric x are kept.
    """
    try:
        vals = [float(x) for x in xs]
    except (TypeError, ValueError):
        return xs
    steps = np.diff(sorted(set(vals)))
    if n < 2 or not len(steps):
        return xs
    shift = 0.02 * float(steps.min()) * (i - (n - 1) / 2)
    return [v + shift for v in vals]


def _ticks_at(a: Any, xs: list[Any]) -> None:
    """Ticks at the sweep's own values (a dodged series sits beside them), when numeric."""
    try:
        a.set_xticks(sorted({float(x) for x in xs}))
    except (TypeError, ValueError):
        pass


RENDERERS = {"curves": render_curves, "sweep": render_sweep, "table": render_table,
             "transitions": render_transitions,
             "gains": render_gains, "time_curves": render_time_curves, "final": render_final,
             "final_accuracy": render_final_accuracy}
