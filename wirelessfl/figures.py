"""Regenerate a paper's figures and tables: ``wirelessfl figures <paper> [--scale] [--only]``.

A paper's figures are data, in ``experiments/<paper>/figures.yaml``:

- ``base``: the config every run starts from; ``scales``: per scale (``quick``, ``paper``)
  the ``seeds`` and dotted ``overrides`` for all runs;
- ``figures``: per figure or table, a ``kind``:

  - ``curves``: accuracy against ``x``, and what each curve needs to reach the run's
    target accuracy;
  - ``sweep``: a metric at the first round reaching ``target`` against the sweep values;
  - ``table``: that metric per ``targets`` row and series × sweep column, beside the
    paper's numbers under ``reference``;
  - ``final_accuracy``: final test accuracy (the mean of the last ``last`` evaluations,
    ``specs/rafed.md`` §4) per series × panel, mean ± std over seeds, with optional
    ``also`` columns (logged extras such as ``param_fraction``, ``gamma_star``); against
    the sweep values when there is a sweep;
  - ``transitions`` (dynamic clients): accuracy over the first rounds after each session
    transition, a row per panel and a column per transition and series;
  - multi-task runs (FedAST): ``gains`` (time to target per series, and the gain of
    ``method`` over ``baseline``), ``time_curves`` (accuracy or loss against simulated
    time) and ``final`` (final accuracy, loss or time to target against the sweep values);

  its ``panels`` (label → dotted overrides, or a list of such mappings meaning their
  product, :func:`panel_grid`) and ``series`` (label → dotted overrides, with an optional
  ``by_panel: {panel: overrides}`` for settings that differ per panel), an optional ``sweep``
  (``key``, ``label``, ``values``, or ``label`` and ``points``: value → overrides; a series
  that sets a swept key itself is not swept: a reference line) and per-scale entries
  (``quick:``/``paper:``) that replace any of these keys (their ``overrides`` are added);
  ``scales`` limits a figure to some scales.

Every run is panel × series × sweep value × seed. A run's folder is named by a hash of its
resolved config, so figures that need the same run share it, finished runs are reused and
interrupted ones resume. Outputs go to the report folder: ``<figure>.png`` and
``<figure>.csv`` for figures, ``<table>.csv`` and ``<table>.md`` for tables, and
``README.md`` listing them.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

from wirelessfl.config import (
    ConfigError,
    apply_overrides,
    presets_dir,
    resolve,
    to_dict,
    without_later_defaults,
)
from wirelessfl.errors import RunFolderError, TrainingDiverged
from wirelessfl.records import RunRecord, first_reaching

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SCALES = ("quick", "paper")
KINDS = ("curves", "sweep", "table", "transitions", "gains", "time_curves", "final",
         "final_accuracy")
_LABELS = {"round": "global round", "uplink_mb_per_client": "uplink per client [MB]",
           "uplink_mb_paper_per_client": "uplink per client [MB, §6.6]",
           "sim_time_s": "simulated latency [s]", "sim_time_min": "simulated run time [min]"}


@dataclass(frozen=True)
class RunSpec:
    """One run of a figure: its place in the figure and its full config."""

    panel: str
    series: str
    value: Any
    seed: int
    raw: dict[str, Any]

    @property
    def key(self) -> str:
        """Hash of the resolved config (without its name): equal configs share a run.

        Settings added after runs were made (:data:`wirelessfl.config.LATER_DEFAULTS`) enter
        the hash only when they differ from their defaults, so a new option leaves existing
        runs' keys alone.
        """
        config = without_later_defaults(_canonical({**self.raw, "name": "run"}))
        text = json.dumps({**config, "name": ""}, sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:12]


def _canonical(raw: dict[str, Any]) -> dict[str, Any]:
    """The resolved config of a single-task or a multi-task run, as a plain mapping."""
    from wirelessfl.multitask import is_multitask, multitask_to_dict, resolve_multitask

    return multitask_to_dict(resolve_multitask(raw)) if is_multitask(raw) else to_dict(resolve(raw))


@dataclass(frozen=True)
class Figure:
    """A figure or table at one scale, with its runs."""

    name: str
    spec: dict[str, Any]
    runs: tuple[RunSpec, ...]
    scale: str = "quick"

    @property
    def title(self) -> str:
        """The figure's title, with the scale its runs use (a user's sweep has none)."""
        scale = f" [{self.scale} scale]" if self.scale else ""
        return f"{self.spec.get('title', self.name)}{scale}"


def load_figures(paper: str, scale: str, only: list[str] | None = None,
                 extra: list[str] | None = None) -> list[Figure]:
    """The figures of ``experiments/<paper>/figures.yaml`` at ``scale`` (all checked)."""
    import yaml

    path = presets_dir() / paper / "figures.yaml"
    if not path.is_file():
        known = sorted(p.parent.name for p in presets_dir().glob("*/figures.yaml"))
        raise ConfigError(f"no figures for paper {paper!r}; papers with figures: {', '.join(known)}")
    if scale not in SCALES:
        raise ConfigError(f"--scale must be one of {', '.join(SCALES)}, got {scale!r}")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc.__class__.__name__})") from exc
    figures = doc["figures"]
    unknown = sorted(set(only or ()) - set(figures))
    if unknown:
        raise ConfigError(f"--only {', '.join(unknown)}: unknown; {paper} has {', '.join(figures)}")
    scale_doc = doc["scales"][scale]
    out = []
    for name, fig in figures.items():
        if (only and name not in only) or scale not in fig.get("scales", SCALES):
            continue
        spec = {k: v for k, v in fig.items() if k not in (*SCALES, "scales")}
        spec.update({k: v for k, v in (fig.get(scale) or {}).items() if k != "overrides"})
        overrides = {**scale_doc.get("overrides", {}), **fig.get("overrides", {}),
                     **(fig.get(scale) or {}).get("overrides", {})}
        if spec["kind"] not in KINDS:
            raise ConfigError(f"{path}: figure {name} has kind {spec['kind']!r}; use one of {KINDS}")
        seeds = spec.get("seeds", scale_doc["seeds"])
        _check_seeds(seeds, f"{path}: figure {name}: seeds")
        points = sweep_points(spec.get("sweep"))
        base = apply_overrides(doc["base"], _pairs(overrides) + list(extra or ()))
        runs = []
        for panel, p_over in panel_grid(spec.get("panels")).items():
            for series, s_over in spec["series"].items():
                s_over = _series_overrides(s_over, panel)
                # a series that sets a swept key itself is a fixed reference line
                for value, v_over in [(None, {})] if _sets_swept(s_over, points) else points:
                    for seed in seeds:
                        raw = apply_overrides(base, _pairs({**p_over, **s_over, **v_over,
                                                            "seed": seed}))
                        _canonical(raw)  # fail before any training
                        runs.append(RunSpec(panel, series, value, seed, raw))
        out.append(Figure(name, spec, tuple(runs), scale))
    return out


def _series_overrides(over: dict[str, Any] | None, panel: str) -> dict[str, Any]:
    """A series' overrides in ``panel``: its own, then those of its ``by_panel`` entry for it.

    ``by_panel`` gives per-panel settings of one series (e.g. a method's learning rates per
    dataset, FAdamGC's Table 5).
    """
    over = dict(over or {})
    per_panel = over.pop("by_panel", None) or {}
    return {**over, **per_panel.get(panel, {})}


def panel_grid(panels: dict[str, Any] | list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """A figure's panels: a mapping name → overrides, or a list of them meaning their product.

    In a product a panel is named by its parts' names joined by spaces and takes their
    overrides in order (e.g. dataset × overlap × α × algorithm, the rows of a table); a
    list of such lists is the union of their products.

    Examples
    --------
    >>> list(panel_grid([{"FMNIST": {"a": 1}}, {"o=0": {"b": 0}, "o=0.2": {"b": 0.2}}]).items())
    [('FMNIST o=0', {'a': 1, 'b': 0}), ('FMNIST o=0.2', {'a': 1, 'b': 0.2})]
    """
    if not panels:
        return {"": {}}
    if isinstance(panels, dict):
        return {name: dict(over or {}) for name, over in panels.items()}
    if all(isinstance(part, list) for part in panels):  # a union of products
        return {name: over for part in panels for name, over in panel_grid(part).items()}
    grid: dict[str, dict[str, Any]] = {"": {}}
    for part in panels:
        grid = {f"{name} {n}".strip(): {**over, **(o or {})}
                for name, over in grid.items() for n, o in part.items()}
    return grid


def sweep_points(sweep: dict[str, Any] | None) -> list[tuple[Any, dict[str, Any]]]:
    """A figure's sweep as (value, overrides) pairs.

    ``{key, values}`` sets one key to each value; ``{points: {value: overrides}}`` sets
    several keys per value (e.g. an active-client ratio with its pool size and budget).
    """
    if not sweep:
        return [(None, {})]
    if "points" in sweep:
        return [(value, dict(over)) for value, over in sweep["points"].items()]
    return [(value, {sweep["key"]: value}) for value in sweep["values"]]


def _sets_swept(series: dict[str, Any], points: list[tuple[Any, dict[str, Any]]]) -> bool:
    """Whether a series' overrides set a swept key, or a section holding one."""
    swept = {k for _, over in points for k in over}
    return any(k == s or s.startswith(k + ".") or k.startswith(s + ".")
               for k in series for s in swept)


def _pairs(overrides: dict[str, Any]) -> list[str]:
    return [f"{k}={json.dumps(v)}" for k, v in overrides.items()]


def run_folder(root: Path, run: RunSpec) -> Path:
    """Where ``run`` lives under the report folder."""
    return root / "runs" / run.key


def missing_runs(figures: list[Figure], root: Path) -> list[RunSpec]:
    """Runs without a finished summary, each once."""
    seen: dict[str, RunSpec] = {}
    for fig in figures:
        for r in fig.runs:
            if RunRecord(run_folder(root, r)).summary() is None:
                seen.setdefault(r.key, r)
    return list(seen.values())


def execute(runs: list[RunSpec], root: Path, *, quiet: bool = False,
            log: Callable[[str], None] = print, jobs: int = 1, ray: Any = None) -> None:
    """Train (or resume) every run in ``runs``, ``jobs`` of them at a time.

    A run whose data cannot be loaded (e.g. CIFAR-10 without ``--data-dir``), whose folder
    another process is writing, or that diverges is skipped with its one-line reason (the
    other runs go on); its figure is then reported as incomplete. With ``jobs`` > 1
    each run trains in its own process (PyTorch threads split among them); every run is
    seeded by its config alone, so the numbers are those of ``jobs = 1``. With ``ray`` (a
    :class:`~wirelessfl.distributed.RayOptions`) every run is a Ray task instead.
    """
    import os

    if ray is not None:
        from wirelessfl.distributed import execute_ray

        execute_ray(runs, root, ray, log=log, quiet=quiet)
        return

    from channels.validation import as_int

    as_int("jobs", jobs, lo=1, hi=os.cpu_count() or 1)
    if jobs > 1 and len(runs) > 1:
        _execute_parallel(runs, root, jobs, log)
        return
    from wirelessfl.multitask import is_multitask, resolve_multitask, run_multitask
    from wirelessfl.runner import prepare, run

    for i, r in enumerate(runs, 1):
        folder = run_folder(root, r)
        value = "" if r.value is None else f" {r.value}"
        # a run's name is its label, made folder-safe (a series may be called "w/o ...")
        name = " ".join(f"{r.series}{value} {r.panel} s{r.seed}".replace("/", "-")
                        .replace("\\", "-").split()).lstrip(".-")[:128]
        log(f"[{i}/{len(runs)}] {name} -> {folder}")
        if is_multitask(r.raw):
            try:
                run_multitask(resolve_multitask({**r.raw, "name": name}), folder, quiet=quiet,
                              resume=RunRecord(folder).exists())
            except ValueError as exc:
                log(f"  skipped: {str(exc).splitlines()[0]}")
            continue
        try:
            exp = prepare(resolve({**r.raw, "name": name}))
        except ValueError as exc:
            log(f"  skipped: {str(exc).splitlines()[0]}")
            continue
        try:
            run(exp, folder, resume=RunRecord(folder).exists(), quiet=quiet)
        except (RunFolderError, TrainingDiverged) as exc:  # e.g. locked by another process
            log(f"  skipped: {str(exc).splitlines()[0]}")


def _run_in_process(run: RunSpec, root: Path, threads: int, index: str) -> str:
    """One run in a worker process; returns its log lines."""
    import torch

    torch.set_num_threads(threads)
    lines: list[str] = []
    execute([run], root, quiet=True, log=lines.append)
    return "\n".join(line.replace("[1/1]", index) for line in lines)


def _execute_parallel(runs: list[RunSpec], root: Path, jobs: int,
                      log: Callable[[str], None]) -> None:
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor, as_completed

    jobs = min(jobs, len(runs))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_run_in_process, r, root, threads, f"[{i}/{len(runs)}]")
                   for i, r in enumerate(runs, 1)]
        for fut in as_completed(futures):
            log(fut.result())


# --------------------------------------------------------------------------- metrics


def _rows(root: Path, run: RunSpec) -> list[dict[str, Any]]:
    return RunRecord(run_folder(root, run)).rows()


def _value(row: dict[str, Any], key: str) -> float:
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
    return float("nan") if hit is None else _value(hit, metric)


def _over_seeds(root: Path, runs: list[RunSpec], target: float,
                metric: str) -> tuple[np.ndarray, str]:
    """``metric`` at the target of the runs that reached it, and "reached/runs"."""
    vals = np.array([to_target(_rows(root, r), target, metric) for r in runs])
    reached = vals[~np.isnan(vals)]
    return reached, f"{reached.size}/{vals.size}"


def _groups(fig: Figure) -> dict[tuple[str, str, Any], list[RunSpec]]:
    out: dict[tuple[str, str, Any], list[RunSpec]] = {}
    for r in fig.runs:
        value = tuple(r.value) if isinstance(r.value, list) else r.value  # e.g. an SNR pair
        out.setdefault((r.panel, r.series, value), []).append(r)
    return out


def _show(value: Any) -> str:
    """A sweep value as text; a list of equal entries (one SNR for all cells) as one."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)) and len(set(map(str, value))) == 1:
        value = value[0]
    return str(value)


def _sweep_label(fig: Figure, default: str = "") -> str:
    """The sweep's axis label (its ``label``, else its ``key``)."""
    sweep = fig.spec.get("sweep") or {}
    return sweep.get("label") or sweep.get("key") or default


def series_label(fig: Figure, series: str, value: Any) -> str:
    """A series' name in legends and tables, with its sweep value (``FAdamGC S~=5``)."""
    return series if value is None else f"{series} {_sweep_label(fig)}={_show(value)}"


# --------------------------------------------------------------------------- rendering


def _panels(fig: Figure, ncols: int) -> tuple[plt.Figure, np.ndarray, list[str]]:
    panels = list(dict.fromkeys(r.panel for r in fig.runs))
    f, ax = plt.subplots(len(panels), ncols, figsize=(5.0 * ncols, 3.8 * len(panels)),
                         squeeze=False)
    return f, ax, panels


def _nanmean(values: list[float]) -> float:
    """Mean of the finite values; NaN (without numpy's warning) when there are none."""
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


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
    for (panel, series, value), runs in _groups(fig).items():
        rows = [_rows(root, r) for r in runs]
        n = min(len(r) for r in rows)
        acc = np.array([[row[y] for row in r[:n]] for r in rows])
        for c, key in enumerate(xs):
            x = np.nanmean([[_value(row, key) if row["round"] else 0.0 for row in r[:n]]
                            for r in rows], axis=0)
            a = ax[panels.index(panel)][c]
            line, = a.plot(x, acc.mean(0), label=series_label(fig, series, value))
            if len(rows) > 1:
                a.fill_between(x, acc.min(0), acc.max(0), color=line.get_color(), alpha=0.15)
            for i in session_starts(rows[0][:n]):  # the session's first round starts at x[i-1]
                a.axvline(x[i - 1], color="0.5", lw=0.6, ls=":")
            a.set(xlabel=_LABELS.get(key, key), ylabel=y.replace("_", " "), title=panel)
            a.grid(alpha=0.3)
        table += [{"panel": panel, "series": series, "sweep": _show(value), "round": rows[0][i]["round"],
                   **({"session": rows[0][i]["session"]} if "session" in rows[0][i] else {}),
                   "accuracy_mean": acc[:, i].mean(), "accuracy_min": acc[:, i].min(),
                   "accuracy_max": acc[:, i].max(), "seeds": len(rows),
                   **{k: _nanmean([_value(r[i], k) if r[i]["round"] else 0.0 for r in rows])
                      for k in xs if k != "round"}} for i in range(n)]
    return [*_finish(fig, f, ax, out, table), _targets_csv(fig, root, out)]


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


def render_transitions(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Dynamic clients' tables: accuracy after each session transition, beside the paper's.

    A row per panel (and sweep value), a column per transition k (``transitions``, default
    1, 2, 3) and series; a cell is the mean over seeds (± sample std) of
    :func:`transition_accuracy` at session P + 1 + k (``dynamic_clients.md`` §4.3, P the
    run's pilot sessions). ``reference``: per panel the paper's cells in the same column
    order (per sweep value when swept). With ``method`` the note counts, per transition,
    the rows where it is ≥ each other series and where it is best.
    """
    ks, window = fig.spec.get("transitions", [1, 2, 3]), fig.spec.get("window", 10)
    groups = _groups(fig)
    series = list(dict.fromkeys(s for _, s, _ in groups))
    keys = list(dict.fromkeys((p, v) for p, _, v in groups))
    pilot = {r.key: _canonical(r.raw)["initial_model"]["pilot_sessions"] for r in fig.runs}
    rows, cells = [], {}
    for panel, value in keys:
        ref = (fig.spec.get("reference") or {}).get(panel)
        ref = ref.get(value) if isinstance(ref, dict) else ref
        ref = iter(ref or ())
        row: dict[str, Any] = {"setting": panel, _sweep_label(fig, "sweep"): _show(value)}
        for k in ks:
            for name in series:
                runs = groups.get((panel, name, value), [])
                vals = np.array([transition_accuracy(_rows(root, r), pilot[r.key] + 1 + k, window)
                                 for r in runs]) * 100
                mean = float(np.mean(vals)) if vals.size else math.nan
                std = float(np.std(vals, ddof=1)) if vals.size > 1 else math.nan
                cells[(panel, value, k, name)] = mean
                row.update({f"{name} T{k}": round(mean, 2), f"{name} T{k} std": round(std, 2),
                            f"{name} T{k} paper": next(ref, None)})
        rows.append(row)
    md = out / f"{fig.name}.md"
    md.write_text(_transitions_markdown(fig, rows, keys, ks, series, cells))
    return [_write_csv(out / f"{fig.name}.csv", rows), md]


def _transitions_markdown(fig: Figure, rows: list[dict[str, Any]], keys: list, ks: list[int],
                          series: list[str], cells: dict) -> str:
    swept = any(v is not None for _, v in keys)
    label = _sweep_label(fig, "sweep")
    cols = [f"{name} T{k}" for k in ks for name in series]
    head = "| setting |" + (f" {label} |" if swept else "") + " " + " | ".join(cols) + " |\n"
    head += "|---|" + ("---|" if swept else "") + "---|" * len(cols) + "\n"
    body = ""
    for r in rows:
        out = []
        for c in cols:
            mean, std, ref = r[c], r[f"{c} std"], r[f"{c} paper"]
            text = "—" if math.isnan(mean) else f"{mean:.2f}" + (
                "" if math.isnan(std) else f" ± {std:.2f}")
            out.append(text + ("" if ref is None else f" ({ref})"))
        body += (f"| {r['setting']} |" + (f" {r[label]} |" if swept else "") + " "
                 + " | ".join(out) + " |\n")
    note = (f"\nT{{k}}: mean active-label test accuracy (%) over the first {fig.spec.get('window', 10)} "
            "rounds of session P + 1 + k, mean ± sample std over seeds; the paper's value in "
            "brackets.\n")
    method = fig.spec.get("method")
    if method in series and len(series) > 1:
        for k in ks:
            at = {name: [cells[(p, v, k, name)] for p, v in keys] for name in series}
            n = sum(not math.isnan(x) for x in at[method])
            wins = [f"≥ {o} in {sum(a >= b for a, b in zip(at[method], at[o]))}/{n}"
                    for o in series if o != method]
            best = sum(all(at[method][i] >= at[o][i] for o in series) for i in range(len(keys)))
            note += f"\n- T{k}: {method} " + ", ".join(wins) + f"; best in {best}/{n} rows."
        note += "\n"
    extra = fig.spec.get("note")
    return f"# {fig.title}\n\n{head}{body}{note}" + (f"\n{extra}\n" if extra else "")


def _targets_csv(fig: Figure, root: Path, out: Path) -> Path:
    """Round, uplink and simulated latency at the first round reaching the run's target."""
    table = []
    for (panel, series, value), runs in _groups(fig).items():
        target = runs[0].raw.get("target_accuracy")
        if target is None:
            continue
        rows = [_rows(root, r) for r in runs]
        hits = [h for h in (first_reaching(r, target) for r in rows) if h is not None]
        row = {"panel": panel, "series": series, "sweep": _show(value), "target": target,
               "reached": f"{len(hits)}/{len(rows)}",
               "final_accuracy_mean": float(np.mean([r[-1]["test_accuracy"] for r in rows]))}
        for key in ("round", "uplink_mb_per_client", "sim_time_s"):
            row[f"{key}_mean"] = float(np.mean([_value(h, key) for h in hits])) if hits else math.nan
        table.append(row)
    return _write_csv(out / f"{fig.name}-to-target.csv", table)


def render_sweep(fig: Figure, root: Path, out: Path) -> list[Path]:
    """``metric`` (one or a list, a column each) to reach ``target`` against the sweep values."""
    metrics, target = _as_list(fig.spec["metric"]), fig.spec["target"]
    f, ax, panels = _panels(fig, len(metrics))
    label = _sweep_label(fig)
    table, lines = [], {}
    for (panel, series, value), runs in _groups(fig).items():
        row: dict[str, Any] = {"panel": panel, "series": series, label: _show(value)}
        for metric in metrics:
            reached, count = _over_seeds(root, runs, target, metric)
            mean = float(reached.mean()) if reached.size else float("nan")
            row.update({f"{metric}_to_{target:g}_mean": mean,
                        f"{metric}_std": float(reached.std()) if reached.size else float("nan"),
                        "reached": count})
            lines.setdefault((panel, series, metric), []).append((value, mean))
        table.append(row)
    for (panel, series, metric), pts in lines.items():
        a = ax[panels.index(panel)][metrics.index(metric)]
        if len(pts) == 1 and pts[0][0] is None:  # a series not swept: a reference line
            a.axhline(pts[0][1], ls="--", color="0.4", label=series)
        else:
            a.plot([_show(p[0]) for p in pts], [p[1] for p in pts], marker="o", label=series)
        a.set(xlabel=label, ylabel=f"{_LABELS.get(metric, metric)} to {100 * target:g}%",
              title=panel)
        a.grid(alpha=0.3)
    return _finish(fig, f, ax, out, table)


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _finish(fig: Figure, f: plt.Figure, ax: np.ndarray, out: Path,
            table: list[dict[str, Any]]) -> list[Path]:
    ax[0][0].legend(fontsize=7)
    # about 12 characters of 10-pt text per inch: wrap titles wider than a one-column figure
    f.suptitle(textwrap.fill(fig.title, int(12 * f.get_figwidth())), fontsize=10)
    f.tight_layout()
    png = out / f"{fig.name}.png"
    f.savefig(png, dpi=120)
    plt.close(f)
    return [png, _write_csv(out / f"{fig.name}.csv", table)]


def render_table(fig: Figure, root: Path, out: Path) -> list[Path]:
    """``metric`` (one or a list) to each target, mean ± std over seeds, beside the paper's.

    ``targets`` is a list, or per panel a list (e.g. 75% on CIFAR-10, 50% on CIFAR-100);
    ``reference`` gives per panel and target the paper's columns, or per panel, target and
    metric when the table has several metrics.
    """
    metrics = _as_list(fig.spec["metric"])
    groups = _groups(fig)
    columns = list(dict.fromkeys((s, v) for _, s, v in groups))
    paper = fig.spec.get("reference", {})
    rows = []
    for panel in dict.fromkeys(p for p, _, _ in groups):
        targets = fig.spec["targets"]
        for target in (targets.get(panel, []) if isinstance(targets, dict) else targets):
            for metric in metrics:
                row: dict[str, Any] = {"setting": panel, "target": f"{100 * target:g}%",
                                       "quantity": _LABELS.get(metric, metric)}
                ref = (paper.get(panel) or {}).get(target)
                ref = ref.get(metric) if isinstance(ref, dict) else ref
                for (series, value), theirs in zip(columns, ref or [None] * len(columns)):
                    reached, count = _over_seeds(root, groups[(panel, series, value)], target,
                                                 metric)
                    col = series_label(fig, series, value)
                    row[col] = round(float(reached.mean()), 2) if reached.size else None
                    row[f"{col} std"] = round(float(reached.std()), 2) if reached.size else None
                    row[f"{col} reached"] = count
                    row[f"{col} paper"] = theirs
                rows.append(row)
    md = out / f"{fig.name}.md"
    md.write_text(_markdown(fig, rows, columns, len(metrics) > 1))
    return [_write_csv(out / f"{fig.name}.csv", rows), md]


def _markdown(fig: Figure, rows: list[dict[str, Any]], columns: list[tuple[str, Any]],
              quantity: bool = False) -> str:
    labels = [series_label(fig, s, v) for s, v in columns]
    q = " quantity |" if quantity else ""
    head = f"| setting | target |{q} " + " | ".join(labels) + " |\n"
    head += "|---|---|" + ("---|" if quantity else "") + "---|" * len(labels) + "\n"
    body = ""
    for r in rows:
        cells = []
        for c in labels:
            ours = ("not reached" if r[c] is None else
                    f"{r[c]:.2f}" + (f" ± {r[f'{c} std']:.2f}" if r[f"{c} std"] else ""))
            ref = r[f"{c} paper"]
            theirs = ("" if ref is None else
                      f" (paper {ref:.2f})" if isinstance(ref, (int, float)) else f" (paper {ref})")
            cells.append(f"{ours} [{r[f'{c} reached']}]{theirs}")
        qcell = f" {r['quantity']} |" if quantity else ""
        body += f"| {r['setting']} | {r['target']} |{qcell} " + " | ".join(cells) + " |\n"
    what = ", ".join(_LABELS.get(m, m) for m in _as_list(fig.spec.get("metric")))
    note = (f"\n{what} at the first evaluation reaching the target: mean ± std over the "
            "seeds that reached it [reached/seeds]; the paper's value in brackets.\n")
    extra = fig.spec.get("note")
    return f"# {fig.title}\n\n{head}{body}{note}" + (f"\n{extra}\n" if extra else "")


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if isinstance(v, float) and math.isnan(v) else v
                        for k, v in r.items()})
    return path


def mean_steps(rows: list[dict[str, Any]], key: str = "test_accuracy",
               tasks: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A multi-task run's evaluation times and, at each, the mean of ``key`` over ``tasks``.

    Each task (default: all of the run's) counts with its latest evaluation; before its
    first, an accuracy counts as 0 and a loss as NaN. With ``test_accuracy`` over all tasks
    this is ``specs/fedast.md`` §7 item 11's curve for M identical tasks.
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


def render_gains(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Mean time to target per sweep value (bars per series) and the gain of ``method``.

    Gain over ``baseline``: (T_baseline − T_method) / T_baseline (``specs/fedast.md`` §4.7).
    ``metric``: ``mean_accuracy`` (default) or ``all_done``.
    """
    method, baseline = fig.spec["method"], fig.spec["baseline"]
    label = _sweep_label(fig, "setting")
    groups = _groups(fig)
    f, ax, panels = _panels(fig, 1)
    table = []
    for panel in panels:
        values = list(dict.fromkeys(v for p, _, v in groups if p == panel))
        series = list(dict.fromkeys(s for p, s, _ in groups if p == panel))
        a, width = ax[panels.index(panel)][0], 0.8 / len(series)
        for v_i, value in enumerate(values):
            row: dict[str, Any] = {"panel": panel, label: _show(value)}
            for s_i, name in enumerate(series):
                runs = groups[(panel, name, value)]
                times = np.array([time_to_target(r, _rows(root, r), fig.spec.get(
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
        a.set_xticks(range(len(values)), [_show(v) for v in values])
        a.set(xlabel=label, ylabel="simulated time to target", title=panel)
        a.grid(alpha=0.3, axis="y")
    paths = _finish(fig, f, ax, out, table)
    md = out / f"{fig.name}.md"
    md.write_text(_gains_markdown(fig, table, method, baseline, label))
    return [*paths, md]


def _gains_markdown(fig: Figure, table: list[dict[str, Any]], method: str, baseline: str,
                    label: str) -> str:
    swept = "sweep" in fig.spec
    head = (f"| setting |{f' {label} |' if swept else ''} {method} | {baseline} | gain |\n"
            f"|---|{'---|' if swept else ''}---|---|---|\n")
    body = "".join(
        f"| {r['panel']} |{f' {r[label]} |' if swept else ''} "
        f"{r[f'{method} time']:.1f} [{r[f'{method} reached']}] | "
        f"{r[f'{baseline} time']:.1f} [{r[f'{baseline} reached']}] | {r['gain_percent']:.1f}% |\n"
        for r in table)
    what = ("every task has reached its target (for identical copies: the paper's finish time)"
            if fig.spec.get("metric") == "all_done"
            else "the mean accuracy over the tasks first reaches the target")
    grid = {r.raw.get("eval_interval") for r in fig.runs}
    cadence = (f"; every method evaluated every {grid.pop():g} units of simulated time"
               if len(grid) == 1 and None not in grid else "")
    note = (f"\nMean simulated time at which {what}{cadence}, over the seeds that reached it "
            "[reached/seeds]. Paper: "
            f"{fig.spec.get('reference', '')}\n")
    return f"# {fig.title}\n\n{head}{body}{note}"


def render_time_curves(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Test accuracy (or loss) against simulated time (mean over seeds, band min–max).

    One panel per (panel, sweep value) and ``y`` entry (``accuracy``, default, or ``loss``),
    one line per series: the mean over a run's tasks (Fig. 15; the target dashed), or with
    ``per_task`` one line per series and task (Figs. 4/14).
    """
    groups = _groups(fig)
    panels = list(dict.fromkeys(p for p, _, _ in groups))
    values = list(dict.fromkeys(v for _, _, v in groups))
    ys = fig.spec.get("y", ["accuracy"])
    cols = [(v, y) for v in values for y in ys]
    f, ax = plt.subplots(len(panels), len(cols), figsize=(4.5 * len(cols), 3.6 * len(panels)),
                         squeeze=False)
    label = _sweep_label(fig)
    table = []
    for (panel, series, value), runs in groups.items():
        names = [t.name for t in run_tasks(runs[0])] if fig.spec.get("per_task") else [None]
        for y, task in [(y, t) for y in ys for t in names]:
            steps = [mean_steps(_rows(root, r), f"test_{y}", task and [task]) for r in runs]
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
            a.set(xlabel="simulated time", ylabel=f"{'mean ' if task is None else ''}test {y}",
                  title=f"{panel} {label}={_show(value)}".strip(" ="))
            a.grid(alpha=0.3)
            table += [{"panel": panel, "series": series, "task": task or "mean",
                       label or "sweep": _show(value), "time": g, f"{y}_mean": c}
                      for g, c in zip(grid[::10], curves.mean(0)[::10])]
    return _finish(fig, f, ax, out, table)


#: What a ``final`` figure can show per run: the last evaluation's test accuracy and loss,
#: and the simulated time to target.
_FINAL = {"accuracy": "final test accuracy", "loss": "final test loss",
          "time": "simulated time to target"}


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


def render_final(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Final accuracy, loss or time to target (``y``) against the sweep values (Figs. 3, 8, 9).

    One line per series (with ``per_task``, per series and task), mean over the seeds that
    have a value; a series without sweep values (a reference such as centralized training)
    is a dashed horizontal line.
    """
    ys, per_task = fig.spec.get("y", ["accuracy"]), fig.spec.get("per_task", False)
    label = _sweep_label(fig)
    f, ax, panels = _panels(fig, len(ys))
    table, lines = [], {}
    for (panel, series, value), runs in _groups(fig).items():
        finals = [run_finals(r, _rows(root, r), per_task) for r in runs]
        for task in finals[0]:
            row: dict[str, Any] = {"panel": panel, "series": series, "task": task,
                                   label: _show(value)}
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
            a.set(xlabel=label, ylabel=_FINAL[y], title=panel)
            a.grid(alpha=0.3)
    return _finish(fig, f, ax, out, table)


def final_accuracy(rows: list[dict[str, Any]], last: int) -> float:
    """Mean test accuracy over a run's last ``last`` evaluations (round 0 excluded)."""
    acc = [r["test_accuracy"] for r in rows if r["round"]][-last:]
    return float(np.mean(acc)) if acc else math.nan


def render_final_accuracy(fig: Figure, root: Path, out: Path) -> list[Path]:
    """Final accuracy per series (rows) and panel × sweep value (columns), mean ± std over seeds.

    The PNG has one axis per panel: bars per series, or lines against the sweep values (a
    series that is not swept is a dashed reference line). ``also`` adds the mean over
    seeds of other row keys at the last evaluation (e.g. the realised parameter fraction).
    """
    last, also = int(fig.spec.get("last", 10)), _as_list(fig.spec.get("also", []))
    groups = _groups(fig)
    table = []
    for (panel, series, value), runs in groups.items():
        rows = [_rows(root, r) for r in runs]
        finals = np.array([final_accuracy(r, last) for r in rows])
        table.append({"panel": panel, "series": series, _sweep_label(fig, "sweep"): _show(value),
                      "final_accuracy_mean": float(finals.mean()),
                      "final_accuracy_std": float(finals.std(ddof=1)) if len(finals) > 1 else 0.0,
                      "seeds": len(finals),
                      **{k: _nanmean([_value(r[-1], k) for r in rows]) for k in also}})
    f, ax, panels = _panels(fig, 1)
    lines: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row, (panel, series, value) in zip(table, groups):
        lines.setdefault((panel, series), []).append({**row, "value": value})
    for (panel, series), pts in lines.items():
        a = ax[panels.index(panel)][0]
        if pts[0]["value"] is None and fig.spec.get("sweep"):
            a.axhline(pts[0]["final_accuracy_mean"], ls="--", color="0.4", label=series)
        elif fig.spec.get("sweep"):
            a.errorbar([_show(p["value"]) for p in pts], [p["final_accuracy_mean"] for p in pts],
                       yerr=[p["final_accuracy_std"] for p in pts], marker="o", capsize=3,
                       label=series)
        else:
            x = [s for (p, s) in lines if p == panel].index(series)
            a.bar(x, pts[0]["final_accuracy_mean"], yerr=pts[0]["final_accuracy_std"],
                  capsize=3, label=series)
        a.set(xlabel=_sweep_label(fig, "method"), ylabel=f"final accuracy (last {last} evals)",
              title=panel)
        a.grid(alpha=0.3)
    if not fig.spec.get("sweep"):
        for i, panel in enumerate(panels):
            names = [s for (p, s) in lines if p == panel]
            ax[i][0].set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
            lo = min(lines[(panel, s)][0]["final_accuracy_mean"] for s in names)
            ax[i][0].set_ylim(max(0.0, lo - 0.1), None)
    paths = _finish(fig, f, ax, out, table)
    md = out / f"{fig.name}.md"
    md.write_text(_final_markdown(fig, table, last))
    return [*paths, md]


def _final_markdown(fig: Figure, table: list[dict[str, Any]], last: int) -> str:
    """Series as rows, panel (× sweep value) as columns: accuracy in % mean ± std."""
    label = _sweep_label(fig, "sweep")
    cols = list(dict.fromkeys((r["panel"], r[label]) for r in table))
    names = [f"{p} {label}={v}".strip() if v else p for p, v in cols]
    cells = {(r["series"], r["panel"], r[label]): r for r in table}
    out = f"# {fig.title}\n\n| method | " + " | ".join(names) + " |\n"
    out += "|---|" + "---|" * len(cols) + "\n"
    for series in dict.fromkeys(r["series"] for r in table):
        row = []
        for p, v in cols:
            r = cells.get((series, p, v)) or cells.get((series, p, ""))
            row.append("" if r is None else
                       f"{100 * r['final_accuracy_mean']:.2f} ± {100 * r['final_accuracy_std']:.2f}"
                       + "".join(f"; {k} {r[k]:.3g}" for k in _as_list(fig.spec.get("also", []))))
        out += f"| {series} | " + " | ".join(row) + " |\n"
    note = (f"\nFinal test accuracy [%]: the mean of each run's last {last} evaluations, "
            "mean ± sample std over seeds.\n")
    extra = fig.spec.get("note")
    return out + note + (f"\n{extra}\n" if extra else "")


def run_tasks(run: RunSpec) -> tuple[Any, ...]:
    """The tasks (:class:`~wirelessfl.tasks.TaskConfig`) of a multi-task run."""
    from wirelessfl.multitask import resolve_multitask

    return resolve_multitask(run.raw).tasks


RENDERERS = {"curves": render_curves, "sweep": render_sweep, "table": render_table,
             "transitions": render_transitions,
             "gains": render_gains, "time_curves": render_time_curves, "final": render_final,
             "final_accuracy": render_final_accuracy}


def render(figures: list[Figure], root: Path) -> list[Path]:
    """Write every figure's outputs and a README listing them; skip figures with missing runs."""
    root.mkdir(parents=True, exist_ok=True)
    outputs, lines = [], []
    for fig in figures:
        if any(RunRecord(run_folder(root, r)).summary() is None for r in fig.runs):
            lines.append(f"- {fig.name}: runs missing (run `wirelessfl figures` again)")
            continue
        paths = RENDERERS[fig.spec["kind"]](fig, root, root)
        outputs += paths
        lines.append(f"- **{fig.name}** — {fig.title}: "
                     + ", ".join(f"[{p.name}]({p.name})" for p in paths))
    readme = root / "README.md"
    readme.write_text("# Regenerated figures and tables\n\n" + "\n".join(lines) + "\n")
    return [*outputs, readme]


def regenerate(paper: str, scale: str, root: Path, *, only: list[str] | None = None,
               extra: list[str] | None = None, quiet: bool = False,
               log: Callable[[str], None] = print, jobs: int = 1,
               ray: Any = None) -> list[Path]:
    """Run what is missing (``jobs`` at a time, or as Ray tasks), then render; the written files."""
    return _complete(load_figures(paper, scale, only, extra), root, f"{paper} ({scale})",
                     quiet=quiet, log=log, jobs=jobs, ray=ray)


#: Marks a report folder as this tool's: its tables, plots and README may be rewritten.
REPORT_MARK = ".wirelessfl-report"


def _claim_report_folder(root: Path) -> None:
    """Use ``root`` only if it is new, empty or a report folder made here (else ConfigError).

    A folder from before the mark existed is recognised by its ``runs/`` folder. Nothing
    that this tool did not write is ever overwritten.
    """
    if root.exists() and not root.is_dir():
        raise ConfigError(f"report folder {root} is a file; give a folder with --out")
    if (root.is_dir() and any(root.iterdir()) and not (root / REPORT_MARK).is_file()
            and not (root / "runs").is_dir()):
        raise ConfigError(f"report folder {root} holds files this tool did not write; give a "
                          "new or empty folder with --out (nothing is overwritten)")
    root.mkdir(parents=True, exist_ok=True)
    (root / REPORT_MARK).touch()


def _complete(figures: list[Figure], root: Path, what: str, *, quiet: bool,
              log: Callable[[str], None], jobs: int, ray: Any) -> list[Path]:
    """Train the figures' missing runs (each once), then render them under ``root``."""
    _claim_report_folder(root)
    todo = missing_runs(figures, root)
    log(f"{what}: {len(todo)} of {len({r.key for f in figures for r in f.runs})} runs to do; "
        f"report folder {root}")
    execute(todo, root, quiet=quiet, log=log, jobs=jobs, ray=ray)
    return render(figures, root)


def _check_seeds(seeds: Any, where: str) -> None:
    """1 to 1000 distinct integers in [0, 2^63): a repeated seed would count a run twice."""
    if (not isinstance(seeds, (list, tuple)) or not 0 < len(seeds) <= 1000
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**63
                       for s in seeds)):
        raise ConfigError(f"{where}: give 1 to 1000 integers in [0, 2^63)")
    if len(set(seeds)) < len(seeds):
        raise ConfigError(f"{where}: {_repeated(list(seeds))} is given twice; give each seed once")


def _repeated(items: list[Any]) -> str:
    """The first item that occurs twice, for an error message."""
    seen: set[Any] = set()
    for x in items:
        if x in seen:
            return str(x)[:40]
        seen.add(x)
    return ""


def sweep(config: str, grid: list[str], seeds: list[int], root: Path, *,
          extra: list[str] | None = None, quiet: bool = False,
          log: Callable[[str], None] = print, jobs: int = 1, ray: Any = None) -> list[Path]:
    """A user's sweep: every combination of ``grid`` (``key=v1,v2``) × ``seeds`` of ``config``.

    Runs go to ``root/runs`` under their config hashes (finished ones reused, interrupted
    ones resumed, on the local or the Ray executor); ``sweep.md``/``.csv``/``.png`` give the
    final accuracy (the last evaluation) per grid point, mean ± std over the seeds.
    """
    import itertools

    import yaml

    from wirelessfl.config import load_raw

    _check_seeds(seeds, "--seeds")
    axes = []
    for item in grid:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise ConfigError(f"--grid {item[:60]!r}: write KEY=V1,V2,... (e.g. local.lr=0.01,0.03)")
        try:
            axis = [(key.strip(), yaml.safe_load(v)) for v in values.split(",")]
        except yaml.YAMLError:
            raise ConfigError(f"--grid {item[:60]!r}: a value is not a YAML scalar") from None
        shown = [_show(v) for _, v in axis]
        if len(set(shown)) < len(shown):
            raise ConfigError(f"--grid {item[:60]!r}: {_repeated(shown)} is given twice; "
                              "give each value once")
        axes.append(axis)
    if not axes:
        raise ConfigError("give at least one --grid KEY=V1,V2,...")
    keys = [a[0][0] for a in axes]
    if len(set(keys)) < len(keys):
        raise ConfigError(f"--grid: {_repeated(keys)} has two --grid options; give its values "
                          "in one, comma-separated")
    points = list(itertools.product(*axes))
    if len(points) * len(seeds) > 10_000:
        raise ConfigError(f"the sweep has {len(points) * len(seeds)} runs; at most 10000")
    base = apply_overrides(load_raw(config), list(extra or ()))
    runs = []
    for point in points:
        label = ", ".join(f"{k}={_show(v)}" for k, v in point)
        for seed in seeds:
            raw = apply_overrides(base, _pairs({**dict(point), "seed": seed}))
            _canonical(raw)  # fail before any training
            runs.append(RunSpec("final accuracy", label, None, seed, raw))
    fig = Figure("sweep", {"kind": "final_accuracy", "last": 1,
                           "title": f"sweep of {config} over {', '.join(a[0][0] for a in axes)}"},
                 tuple(runs), scale="")
    return _complete([fig], root, "sweep", quiet=quiet, log=log, jobs=jobs, ray=ray)
