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
    ``docs/papers/rafed.md`` §4) per series × panel, mean ± std over seeds, with optional
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

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wirelessfl.errors import parse_yaml
from wirelessfl.run.config import ConfigError, apply_overrides, key_view, presets_dir
from wirelessfl.run.kinds import canonical, resolve_config
from wirelessfl.run.records import RunRecord

SCALES = ("quick", "paper")


KINDS = ("curves", "sweep", "table", "transitions", "gains", "time_curves", "final",
         "final_accuracy")


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

        The hash is of the config's :func:`~wirelessfl.run.configtypes.key_view`: settings
        added after runs were made enter it only when they differ from their defaults, so a
        new option leaves existing runs' keys alone.
        """
        config = key_view(resolve_config({**self.raw, "name": "run"}))
        text = json.dumps({**config, "name": ""}, sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Figure:
    """A figure or table at one scale, with its runs."""

    name: str
    spec: dict[str, Any]
    runs: tuple[RunSpec, ...]
    scale: str = "quick"
    #: The settings the scale changes (``key=value``), so a title says what was run.
    settings: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        """The figure's title, with the scale its runs use and what that scale changes."""
        if not self.scale:  # a user's sweep
            return str(self.spec.get("title", self.name))
        changed = f": {', '.join(self.settings)}" if self.settings else ""
        return f"{self.spec.get('title', self.name)} [{self.scale} scale{changed}]"


def load_figures(paper: str, scale: str, only: list[str] | None = None,
                 extra: list[str] | None = None) -> list[Figure]:
    """The figures of ``experiments/<paper>/figures.yaml`` at ``scale`` (all checked)."""
    path = presets_dir() / paper / "figures.yaml"
    if not path.is_file():
        known = sorted(p.parent.name for p in presets_dir().glob("*/figures.yaml"))
        raise ConfigError(f"no figures for paper {paper!r}; papers with figures: {', '.join(known)}")
    if scale not in SCALES:
        raise ConfigError(f"--scale must be one of {', '.join(SCALES)}, got {scale!r}")
    doc = parse_yaml(path.read_text(), str(path))
    missing = [k for k in ("base", "scales", "figures")
               if not isinstance(doc, dict) or not isinstance(doc.get(k), dict)]
    if missing:
        raise ConfigError(f"{path}: needs a mapping `{missing[0]}` (figures.yaml holds base, "
                          "scales and figures)")
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
        check_seeds(seeds, f"{path}: figure {name}: seeds")
        points = sweep_points(spec.get("sweep"))
        base = apply_overrides(doc["base"], override_pairs(overrides) + list(extra or ()))
        runs = []
        for panel, p_over in panel_grid(spec.get("panels")).items():
            for series, s_over in spec["series"].items():
                s_over = _series_overrides(s_over, panel)
                # a series that sets a swept key itself is a fixed reference line
                for value, v_over in [(None, {})] if _sets_swept(s_over, points) else points:
                    for seed in seeds:
                        raw = apply_overrides(base, override_pairs({**p_over, **s_over, **v_over,
                                                            "seed": seed}))
                        canonical(raw)  # fail before any training
                        runs.append(RunSpec(panel, series, value, seed, raw))
        changed = {**scale_doc.get("overrides", {}), **(fig.get(scale) or {}).get("overrides", {})}
        settings = tuple(f"{str(k).rsplit('.', 1)[-1]}={v}" for k, v in sorted(changed.items()))
        out.append(Figure(name, spec, tuple(runs), scale, settings))
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


def override_pairs(overrides: dict[str, Any]) -> list[str]:
    """Dotted overrides as ``key=value`` strings for :func:`~wirelessfl.run.config.apply_overrides`."""
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


def check_seeds(seeds: Any, where: str) -> None:
    """1 to 1000 distinct integers in [0, 2^63): a repeated seed would count a run twice."""
    if (not isinstance(seeds, (list, tuple)) or not 0 < len(seeds) <= 1000
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**63
                       for s in seeds)):
        raise ConfigError(f"{where}: give 1 to 1000 integers in [0, 2^63)")
    if len(set(seeds)) < len(seeds):
        raise ConfigError(f"{where}: {first_repeated(list(seeds))} is given twice; give each seed once")


def first_repeated(items: list[Any]) -> str:
    """The first item that occurs twice, for an error message."""
    seen: set[Any] = set()
    for x in items:
        if x in seen:
            return str(x)[:40]
        seen.add(x)
    return ""


def show_value(value: Any) -> str:
    """A sweep value as text; a list of equal entries (one SNR for all cells) as one."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)) and len(set(map(str, value))) == 1:
        value = value[0]
    return str(value)


def sweep_label(fig: Figure, default: str = "") -> str:
    """The sweep's axis label (its ``label``, else its ``key``)."""
    sweep = fig.spec.get("sweep") or {}
    return sweep.get("label") or sweep.get("key") or default


def series_label(fig: Figure, series: str, value: Any) -> str:
    """A series' name in legends and tables, with its sweep value (``FAdamGC S~=5``)."""
    return series if value is None else f"{series} {sweep_label(fig)}={show_value(value)}"


def run_tasks(run: RunSpec) -> tuple[Any, ...]:
    """The tasks (:class:`~wirelessfl.run.tasks.TaskConfig`) of a multi-task run."""
    from wirelessfl.run.multitask import resolve_multitask

    return resolve_multitask(run.raw).tasks
