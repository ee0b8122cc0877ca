"""Regenerate a paper's figures and tables: ``wirelessfl figures <paper> [--scale] [--only]``.

A paper's figures are data, in ``experiments/<paper>/figures.yaml``:

- ``base``: the config every run starts from; ``scales``: per scale (``quick``, ``paper``)
  the ``seeds`` and dotted ``overrides`` for all runs;
- ``figures``: per figure or table, a ``kind``:

  - ``curves``: accuracy against ``x``, and what each curve needs to reach the run's
    target accuracy;
  - ``sweep``: a metric at the first round reaching ``target`` against the sweep values
    (``log_y``: the metrics drawn on a logarithmic axis);
  - ``table``: that metric per ``targets`` row and series × sweep column, beside the
    paper's numbers under ``reference``;
  - ``final_accuracy``: final test accuracy (the mean of the last ``last`` evaluations,
    ``docs/papers/rafed.md`` §4) per series × panel, mean ± sample std over seeds, with optional
    ``also`` columns (logged extras such as ``param_fraction``, ``gamma_star``); against
    the sweep values when there is a sweep;
  - ``transitions`` (dynamic clients): accuracy over the first rounds after each session
    transition, a row per panel and a column per transition and series;
  - multi-task runs (FedAST): ``gains`` (time to target per series, and the gain of
    ``method`` over ``baseline``), ``time_curves`` (accuracy or loss against simulated
    time) and ``final`` (final accuracy, loss or time to target against the sweep values);

  its ``title`` names what the figure shows, never a setting: the settings its runs share
  are read from their resolved configs and added to the title (:func:`run_settings`), so a
  title cannot state a setting that did not run;
  its ``panels`` (label → dotted overrides, or a list of such mappings meaning their
  product, :func:`panel_grid`) and ``series`` (label → dotted overrides, with an optional
  ``by_panel: {panel: overrides}`` for settings that differ per panel), an optional ``sweep``
  (``key``, ``label``, ``values``, or ``label`` and ``points``: value → overrides; a series
  that sets a swept key itself is not swept: a reference line) and per-scale entries
  (``quick:``/``paper:``) that replace any of these keys (their ``overrides`` are added);
  ``scales`` limits a figure to some scales; ``seeds`` replaces the scale's seeds and
  ``overrides`` adds dotted overrides for this figure's runs; ``claim`` (``finding``,
  ``better``, ``than``, ``measure``, ``lower``, ...) is what the report's verdict tests.

Every run is panel × series × sweep value × seed. A run's folder is named by a hash of its
resolved config, so figures that need the same run share it, finished runs are reused and
interrupted ones resume. Outputs go to the report folder: ``<figure>.png``, ``.pdf``,
``.svg`` and ``<figure>.csv`` for figures, ``<table>.csv`` and ``<table>.md`` for tables, and
``README.md`` listing them. ``<paper>/figures.yaml`` is looked up in the folders of
``WIRELESSFL_EXPERIMENTS`` and the shipped ``experiments/``
(:func:`~wirelessfl.run.config.experiment_dirs`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from wirelessfl.errors import parse_yaml
from wirelessfl.run.config import ConfigError, apply_overrides, figures_file, key_view
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
    #: The sweep's axis label (``N``, ``SNR dB``), for :attr:`label`.
    swept: str = ""

    @property
    def label(self) -> str:
        """What the run is, as the dry run and the log show it: ``panel · series N=2 · seed 0``."""
        series = self.series if self.value is None else f"{self.series} {self.swept}={show_value(self.value)}"
        return " · ".join(x for x in (self.panel, series, f"seed {self.seed}") if x)

    @cached_property
    def key(self) -> str:
        """Hash of the resolved config (without its name): equal configs share a run.

        The hash is of the config's :func:`~wirelessfl.run.configtypes.key_view`: settings
        added after runs were made enter it only when they differ from their defaults, so a
        new option leaves existing runs' keys alone.
        """
        return config_key(self.raw)


def config_key(raw: dict[str, Any]) -> str:
    """A run's folder name: the hash of its resolved config's key view, without its name.

    A run folder's stored ``config.yaml`` gives its own folder's name back (the check of a
    run restored from an archive, :mod:`~wirelessfl.report.archive`).
    """
    config = key_view(resolve_config({**raw, "name": "run"}))
    text = json.dumps({**config, "name": ""}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Figure:
    """A figure or table at one scale, with its runs."""

    name: str
    spec: dict[str, Any]
    runs: tuple[RunSpec, ...]
    scale: str = "quick"

    @property
    def caption(self) -> str:
        """What the figure shows, as ``figures.yaml`` names it (no settings: see :attr:`settings`)."""
        return str(self.spec.get("title", self.name))

    @property
    def settings(self) -> str:
        """The settings its runs share, read from their resolved configs (:func:`run_settings`).

        A table with its own ``targets`` states those instead of the runs' target.
        """
        targets = self.spec.get("targets")
        if not targets:
            return run_settings(self.runs, self.scale)
        shown = sorted({t for ts in (targets.values() if isinstance(targets, dict) else [targets])
                        for t in ts})
        line = run_settings(self.runs, self.scale, skip=("target_accuracy",))
        head, _, tail = line.rpartition("; ")
        return f"{head}, targets {', '.join(f'{100 * t:g}%' for t in shown)}; {tail}"

    @property
    def title(self) -> str:
        """Caption, then the settings that ran: ``Fig. 3: … — 30 clients, 10 local steps, …``.

        Built from the runs' resolved configs, never from the paper's settings, so a title
        cannot show a setting that did not run.
        """
        return f"{self.caption} — {self.settings}"


def load_figures(paper: str, scale: str, only: list[str] | None = None,
                 extra: list[str] | None = None, seeds: list[int] | None = None) -> list[Figure]:
    """The figures of ``experiments/<paper>/figures.yaml`` at ``scale`` (all checked).

    ``seeds`` replaces every figure's seeds (``figures --seeds 0-9``). A run's key is the hash
    of its config, seed included, so adding seeds adds runs and leaves the others' keys.
    """
    path = figures_file(paper)
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
    outside = sorted(n for n in set(only or ()) if scale not in figures[n].get("scales", SCALES))
    if outside:
        at = [n for n, f in figures.items() if scale in f.get("scales", SCALES)]
        raise ConfigError(f"--only {', '.join(outside)}: not a figure of the {scale} scale of "
                          f"{paper} (it has {', '.join(at) or 'none'}); use --scale "
                          f"{'paper' if scale == 'quick' else 'quick'} or another --only")
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
        check_claim_spec(spec, f"{path}: figure {name}")
        fig_seeds = spec.get("seeds", scale_doc["seeds"])
        check_seeds(fig_seeds, f"{path}: figure {name}: seeds")
        if seeds is not None:
            check_seeds(seeds, "--seeds")
            fig_seeds = seeds
        points = sweep_points(spec.get("sweep"))
        base = apply_overrides(doc["base"], override_pairs(overrides) + list(extra or ()))
        runs = []
        for panel, p_over in panel_grid(spec.get("panels")).items():
            for series, s_over in spec["series"].items():
                s_over = _series_overrides(s_over, panel)
                # a series that sets a swept key itself is a fixed reference line
                for value, v_over in [(None, {})] if _sets_swept(s_over, points) else points:
                    for seed in fig_seeds:
                        raw = apply_overrides(base, override_pairs({**p_over, **s_over, **v_over,
                                                            "seed": seed}))
                        run = RunSpec(panel, series, value, seed, raw,
                                      axis_label(spec.get("sweep")))
                        _ = run.key  # resolves the config: fails before any training
                        runs.append(run)
        out.append(Figure(name, spec, tuple(runs), scale))
    return out


def budget_here(fig: Figure) -> str:
    """What each series of ``fig`` may spend, read from its runs' configs.

    "" where the configs do not say (a multi-task run whose time cap is its task preset's).
    E.g. ``HIST: 30 rounds; HFedAvg: 15 rounds; each run spends its whole budget``: the
    budget a claim's censored runs were censored at, at the scale that ran.
    """
    caps: dict[str, dict[str, list[str]]] = {}
    stops = set()
    for run in fig.runs:
        raw = run.raw
        if raw.get("max_time") is not None:
            unit, cap = "s simulated", f"{raw['max_time']:g}"
        elif raw.get("rounds") is not None:
            unit, cap = "rounds", f"{raw['rounds']}"
        else:
            return ""
        have = caps.setdefault(run.series, {}).setdefault(unit, [])
        if cap not in have:
            have.append(cap)
        stops.add(bool(raw.get("stop_at_target")))
    if not caps:
        return ""
    each = "; ".join(f"{series}: " + " or ".join(f"{' / '.join(c)} {unit}"
                                                 for unit, c in units.items())
                     for series, units in caps.items())
    how = ("each run stops at the target, or at this cap" if stops == {True} else
           "each run spends its whole budget" if stops == {False} else
           "some runs stop at the target, the others spend their whole budget")
    return f"{each}; {how}"


#: The settings a title states when all of a figure's runs share them: resolved-config key
#: (a multi-task run's task settings under ``tasks.``) and how the value reads.
HEADLINE: tuple[tuple[str, Callable[[Any], str]], ...] = (
    ("data.dataset", lambda v: DATASET_NAMES.get(v, str(v))),
    ("tasks.data.dataset", lambda v: DATASET_NAMES.get(v, str(v))),
    ("model.name", str),
    ("tasks.model.name", str),
    ("data.num_clients", "{} clients".format),
    ("tasks.data.num_clients", "{} clients".format),
    ("data.alpha", "Dir(α={})".format),
    ("algorithm.cells", "N={} cells".format),
    ("algorithm.clients_per_round", "{} clients a round".format),
    ("local.steps", "{} local steps".format),
    ("local.epochs", lambda v: f"{v} local epoch{'s' * (v != 1)}"),
    ("local.batch_size", "batch {}".format),
    ("algorithm.edge_rounds", "E={} edge rounds".format),
    ("population.rounds_per_session", "{} rounds a session".format),
    ("population.groups", "{} client groups".format),
    ("network.model", "{} link".format),
    ("network.snr_db", "{:g} dB SNR".format),
    ("network.antennas", lambda v: f"M={v} antenna{'s' * (v != 1)}"),
    ("network.deadline_s", "{} s deadline".format),
    ("rounds", "{} rounds".format),
    ("max_rounds", "at most {} rounds".format),
    ("max_time", "{:g} s simulated".format),
    ("target_accuracy", lambda v: f"target {100 * v:g}%"),
    ("tasks.target", lambda v: f"target {100 * v:g}%"),
)

#: Dataset names as papers write them.
DATASET_NAMES = {"fashion_mnist": "Fashion-MNIST", "mnist": "MNIST", "cifar10": "CIFAR-10",
                 "cifar100": "CIFAR-100", "svhn": "SVHN", "tinyimagenet": "Tiny ImageNet",
                 "ag_news": "AG News", "synthetic": "synthetic data"}

#: Settings a headline entry is shown with only when the run uses them.
_ONLY_WHEN = {"data.alpha": lambda c: "dirichlet" in str(c.get("data.partition", "")),
              "tasks.data.alpha": lambda c: False,
              "network.model": lambda c: c.get("network.model") != "none",
              "population.groups": lambda c: c.get("population.kind") != "static",
              "local.steps": lambda c: c.get("local.epochs") is None,
              "local.epochs": lambda c: c.get("local.epochs") is not None}


#: Settings that are only a cap when the runs stop at their target (``stop_at_target``).
_CAPS = frozenset({"rounds", "max_time"})


def flat_settings(config: dict[str, Any]) -> dict[str, Any]:
    """A resolved config as dotted keys; a multi-task run's tasks under ``tasks.`` when they agree."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}{k}.", v)
        else:
            out[prefix[:-1]] = value

    walk("", {k: v for k, v in config.items() if k != "tasks"})
    tasks = config.get("tasks")
    if isinstance(tasks, list) and tasks:
        per = [flat_settings(t) for t in tasks if isinstance(t, dict)]
        for key in per[0] if per else ():
            if all(json.dumps(p.get(key), sort_keys=True, default=str)
                   == json.dumps(per[0][key], sort_keys=True, default=str) for p in per):
                out[f"tasks.{key}"] = per[0][key]
    return out


def run_settings(runs: tuple[RunSpec, ...] | list[RunSpec], scale: str = "",
                 skip: tuple[str, ...] = ()) -> str:
    """The :data:`HEADLINE` settings all ``runs`` share, from their resolved configs.

    A setting that differs between runs (a panel's, series' or sweep's) is left to the
    legend; the scale and the number of seeds close the line.

    Examples
    --------
    >>> raw = {"data": {"dataset": "synthetic", "num_clients": 4}, "rounds": 2}
    >>> run_settings([RunSpec("", "", None, 0, raw), RunSpec("", "", None, 1, raw)], "quick")
    'synthetic data, fcnn, 4 clients, 20 local steps, batch 50, 2 rounds; quick scale, 2 seeds'
    """
    flats = [flat_settings(canonical(r.raw)) for r in runs]
    parts = []
    for key, show in HEADLINE:
        if key in skip:
            continue
        values = {json.dumps(f.get(key), sort_keys=True, default=str) for f in flats}
        if len(values) != 1 or flats[0].get(key) is None:
            continue
        if key in _ONLY_WHEN and not _ONLY_WHEN[key](flats[0]):
            continue
        # a run that stops at its target ran up to its rounds or simulated time, not all of it
        capped = key in _CAPS and all(f.get("stop_at_target") is True for f in flats)
        parts.append(("at most " if capped else "") + show(flats[0][key]))
    seeds = len({r.seed for r in runs})
    tail = f"{scale} scale, " if scale else ""
    return f"{', '.join(parts)}; {tail}{seeds} seed{'s' * (seeds != 1)}"


#: The keys of a figure's ``claim`` (:mod:`~wirelessfl.report.claims`).
CLAIM_KEYS = ("finding", "better", "than", "close", "to", "within", "measure", "lower", "target",
              "last", "why", "unchecked", "budget")


#: Words by which a finding names a trend or a magnitude: a pairwise verdict per setting does
#: not compute them, so a claim using them says so in ``unchecked`` (:func:`wording_problems`).
TREND = re.compile(
    r"\b(grows?|grew|growing|hurts?|degrades?|converges?|lead|flat|most|fastest|slowly|"
    r"less as|more as|more again|loses more|as (?:N|M|SNR|the \w+) (?:grows?|shrinks?)|"
    r"within \d+ (?:points?|%)|up to \d+%|\d+% less)\b", re.I)


def checked_text(claim: dict[str, Any]) -> str:
    """What a claim's verdict tests, in words generated from its fields."""
    on = str(claim.get("measure", "round"))
    if claim.get("within") is not None:
        return (f"{claim.get('close')} within ±{float(claim['within']):g} of {claim.get('to')} "
                f"in {on}, setting by setting (two one-sided tests at 5% each)")
    if claim.get("better") is None or claim.get("than") is None:
        return ""
    how = "lower" if bool(claim.get("lower", True)) else "higher"
    return (f"{claim['better']} has {how} {on} than {claim['than']}, setting by setting "
            "(a two-sided test at 5% in each; no trend across settings)")


def wording_problems(claim: dict[str, Any]) -> list[str]:
    """The trend or magnitude words of a checked claim's finding not owned in ``unchecked``.

    A claim's words must be no stronger than its check.
    """
    if not checked_text(claim):
        return []
    text = re.sub(r"^\([^)]*\)\s*", "", str(claim.get("finding", "")))  # "(question, after …)"
    unchecked = str(claim.get("unchecked", ""))
    return [m.group(0) for m in TREND.finditer(text) if m.group(0).lower() not in unchecked.lower()]


def claim_series(names: str | list[str]) -> tuple[str, ...]:
    """The series a claim key names: one name, or (``close``) a list of them."""
    return tuple(names) if isinstance(names, list) else (names,)


def check_claim_spec(spec: dict[str, Any], where: str) -> None:
    """A figure's ``claim`` (:mod:`~wirelessfl.report.claims`) names a finding and its series."""
    claim = spec.get("claim")
    if claim is None:
        return
    if not isinstance(claim, dict) or not str(claim.get("finding", "")).strip():
        raise ConfigError(f"{where}: claim needs a `finding` (the paper's result, in words)")
    unknown = sorted(map(str, set(claim) - set(CLAIM_KEYS)))
    if unknown:
        raise ConfigError(f"{where}: claim has unknown key {unknown[0]!r}; its keys are "
                          f"{', '.join(CLAIM_KEYS)}")
    if "unchecked" in claim and not (isinstance(claim["unchecked"], str)
                                     and claim["unchecked"].strip()):
        raise ConfigError(f"{where}: claim.unchecked must say, in words, which parts of the "
                          "finding the verdict does not test")
    loose = wording_problems(claim)
    if loose:
        raise ConfigError(f"{where}: the claim's finding says {loose[0]!r}, a trend or size its "
                          "verdict does not compute; say so in claim.unchecked (with those "
                          "words) or reword the finding")
    if "within" in claim:
        margin = claim["within"]
        if (isinstance(margin, bool) or not isinstance(margin, (int, float))
                or not 0 < margin < float("inf")):
            raise ConfigError(f"{where}: claim.within {margin!r} must be a positive number (the "
                              "closeness margin, in the measure's units)")
        if claim.get("close") is None or claim.get("to") is None or {"better", "than"} & set(claim):
            raise ConfigError(f"{where}: a claim with `within` names `close` (a series or a "
                              "list) and `to`, not `better`/`than`")
    elif {"close", "to"} & set(claim):
        raise ConfigError(f"{where}: claim.close/to need `within` (the closeness margin)")
    close = claim.get("close")
    if isinstance(close, list) and (not close or not all(isinstance(c, str) for c in close)):
        raise ConfigError(f"{where}: claim.close {close!r} must name a series or a non-empty "
                          "list of series")
    for key in ("better", "than", "close", "to"):
        for name in claim_series(claim.get(key)):
            if name is not None and name not in (spec.get("series") or {}):
                raise ConfigError(f"{where}: claim.{key} {name!r} is not one of its series "
                                  f"({', '.join(spec.get('series') or {})})")


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
    """Runs without a finished summary, each once; a run recorded as diverged is not one.

    Its rerun would resume from its last checkpoint and diverge again with the same
    numbers (:meth:`~wirelessfl.run.records.RunRecord.mark_diverged`); remove its folder
    to train it anew.
    """
    seen: dict[str, RunSpec] = {}
    for fig in figures:
        for r in fig.runs:
            record = RunRecord(run_folder(root, r))
            if record.summary() is None and record.diverged() is None:
                seen.setdefault(r.key, r)
    return list(seen.values())


def parse_seeds(text: str, option: str = "--seeds") -> list[int]:
    """Seeds written ``0-9``, ``0,1,2`` or both (``0-4,10``), each once (ConfigError if not).

    >>> parse_seeds("0-3,10")
    [0, 1, 2, 3, 10]
    """
    seeds: list[int] = []
    for part in str(text).split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            first, last = (int(lo), int(hi)) if dash and lo.strip() else (int(part), int(part))
        except ValueError:
            raise ConfigError(f"{option} {str(text)[:40]!r}: give integers and ranges separated "
                              "by commas, e.g. 0-9 or 0,1,2") from None
        if last - first >= 1000:  # never build a huge range: check_seeds allows 1000 seeds
            raise ConfigError(f"{option} {part.strip()[:40]!r}: a range holds at most 1000 seeds")
        seeds += list(range(first, last + 1))
    check_seeds(seeds, option)
    return seeds


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
    return axis_label(fig.spec.get("sweep")) or default


def axis_label(sweep: dict[str, Any] | None) -> str:
    """A sweep spec's axis label: its ``label``, else its ``key`` (empty without a sweep)."""
    sweep = sweep or {}
    return str(sweep.get("label") or sweep.get("key") or "")


def series_label(fig: Figure, series: str, value: Any) -> str:
    """A series' name in legends and tables, with its sweep value (``FAdamGC S~=5``)."""
    return series if value is None else f"{series} {sweep_label(fig)}={show_value(value)}"


def run_tasks(run: RunSpec) -> tuple[Any, ...]:
    """The tasks (:class:`~wirelessfl.run.tasks.TaskConfig`) of a multi-task run."""
    from wirelessfl.run.multitask import resolve_multitask

    return resolve_multitask(run.raw).tasks
