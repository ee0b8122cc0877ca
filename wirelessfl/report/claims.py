"""A figure's claim: the paper's finding, ours with numbers, and a verdict, for its report README.

A figure in ``figures.yaml`` may carry a ``claim``::

    claim:
      finding: "HIST needs less uplink per client than HFedAvg to reach the target"
      better: HIST              # a series of the figure
      than: HFedAvg             # another series (or a reference line: a series not swept)
      measure: uplink_mb_per_client  # what is compared (see below)
      lower: true               # lower is better (default); false for accuracies

``measure`` is a metrics-row key read at the first evaluation reaching the target (``target``,
else the figure's ``target``, else each run's ``target_accuracy``; ``round``,
``uplink_mb_per_client``, ``sim_time_s``, ...), or ``final_accuracy`` (the mean of the last
``last`` evaluations, default the figure's ``last`` or 10), ``transition_accuracy``
(dynamic clients: the mean over the figure's transitions of the accuracy after each), or
for multi-task runs
``time_to_target`` / ``all_done`` (simulated time until the mean accuracy, or every task,
reaches its target). A claim without ``better``/``than`` gives its ``finding`` and says why
it is not checked (``why``).

A **closeness** claim ("learns about as well as") names ``close`` (a series, or a list of
series each checked alone) and ``to`` (the reference series) and a margin ``within`` in the
measure's units (percentage points for accuracies)::

    claim:
      finding: "AirComp-HIST learns about as well as OMA-HIST"
      close: AirComp-HIST
      to: OMA-HIST
      within: 1.0               # |gap| < 1 percentage point
      measure: final_accuracy

Each setting is then decided by two one-sided tests (:func:`~wirelessfl.report.verdict.within`):
*holds* when the gap's 90% interval lies inside ``±within``, *does not hold* when it lies
wholly outside, *undecided* otherwise.

The comparison is made in every panel and sweep value that has both series, over seeds: each
side's mean ± sample standard deviation and how many seeds reached the target. A setting's
verdict comes from a two-sided test at the 5% level (:mod:`wirelessfl.report.verdict`): a
paired t-test over seeds when both series ran the same seeds (they share each seed's data
partition and initial model), else Welch's t-test. When some seeds did not reach the target,
a run that stopped short is right-censored at its budget (the measure at its last row), and
the series are compared by the log-rank test; a series "does not hold" only when it was
censored at or beyond the comparator's value (:func:`wirelessfl.report.verdict.censored`).
Beside it: the gap, its 95% interval and p. A series
needs at least 3 seeds for its setting to be decided; the figure's verdict says how many
settings were decided at that level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wirelessfl.report.metrics import (
    diverged,
    final_accuracy,
    group_runs,
    row_value,
    run_finals,
    run_rows,
    time_to_target,
    to_target,
    transition_accuracy,
)
from wirelessfl.report.spec import Figure, RunSpec, checked_text, claim_series, show_value, sweep_label
from wirelessfl.report.tables import LABELS
from wirelessfl.report.verdict import compare, overall, within
from wirelessfl.run.config import ConfigError
from wirelessfl.run.kinds import canonical


@dataclass(frozen=True)
class Verdict:
    """A claim checked on a report: the paper's finding, ours (one line per setting), verdict."""

    finding: str
    ours: tuple[str, ...]
    verdict: str
    #: What the numbers in ``ours`` are (the measure, where it is read, over which seeds).
    measured: str = ""
    #: What the verdict tests, generated from the claim (:func:`checked_text`).
    checked: str = ""
    #: The parts of the finding the verdict does not test (the claim's ``unchecked``).
    unchecked: str = ""


def check_claim(fig: Figure, root: Path) -> Verdict | None:
    """The figure's claim checked on its runs under ``root`` (None when it has no claim)."""
    claim = fig.spec.get("claim")
    if not claim:
        return None
    finding = str(claim.get("finding", "")).strip()
    margin = claim.get("within")  # a closeness claim: ``close`` within ``margin`` ``to``
    better, than = ((claim.get("close"), claim.get("to")) if margin is not None
                    else (claim.get("better"), claim.get("than")))
    if better is None or than is None:
        return Verdict(finding, (), f"not checked here: {claim.get('why', 'read the table')}")
    on, lower = str(claim.get("measure", "round")), bool(claim.get("lower", True))
    groups = group_runs(fig)
    series = {s for _, s, _ in groups}
    checked = claim_series(better)  # ``close`` may name several series
    for name in (*checked, than):
        if name not in series:
            raise ConfigError(f"figure {fig.name}: its claim names series {name!r}; the figure "
                              f"has {', '.join(sorted(series))}")
    ours, verdicts = [], []
    for (panel, s, value), runs in groups.items():
        if s not in checked:
            continue
        rivals = groups.get((panel, than, value)) or groups.get((panel, than, None))
        if not rivals:
            continue
        mine, theirs = (_values(fig, claim, on, r, root) for r in (runs, rivals))
        pairs = ([r.seed for r in runs], [r.seed for r in rivals])
        budgets = (_budgets(on, runs, root, mine), _budgets(on, rivals, root, theirs))
        got = (compare(mine, theirs, lower, pairs, budgets=budgets) if margin is None
               else within(mine, theirs, float(margin), pairs))
        where = " ".join(x for x in (panel, _at(fig, value)) if x)
        gone = [sum(diverged(root, r) for r in side) for side in (runs, rivals)]
        note = (f" (training diverged in {gone[0]} of {s}'s and {gone[1]} of {than}'s "
                "seeds: no value)") if any(gone) else ""
        ours.append(f"{where + ': ' if where else ''}{s} {_show(mine)} vs {than} "
                    f"{_show(theirs)} → {got.text()}{note}")
        verdicts.append(got)
    seeds = min((len(r) for r in groups.values()), default=0)
    return Verdict(finding, tuple(ours), overall(verdicts, seeds),
                   _measured(fig, claim, on, lower, margin), checked_text(claim),
                   str(claim.get("unchecked", "")))


def _measured(fig: Figure, claim: dict[str, Any], on: str, lower: bool,
              margin: float | None = None) -> str:
    """What a claim's numbers are, for the README: ``global round at the target 70%``."""
    better = (f"close: the gap's 90% interval inside ±{float(margin):g}" if margin is not None
              else f"{'lower' if lower else 'higher'} is better")
    if on == "final_accuracy":
        last = int(claim.get("last", fig.spec.get("last", 10)))
        what = f"final test accuracy [%] (mean of the last {last} evaluations)"
    elif on == "transition_accuracy":
        what = "test accuracy [%] after the session transitions (mean over the transitions)"
    elif on in ("time_to_target", "all_done"):
        what = ("simulated time [s] until every task reaches its target" if on == "all_done"
                else "simulated time [s] until the tasks' mean accuracy reaches the target")
    else:
        targets = {_target(fig, claim, r) for r in fig.runs}
        at = (f"{100 * float(next(iter(targets))):g}%" if len(targets) == 1 and None not in targets
              else "the run's target")
        what = f"{LABELS.get(on, on)} at the first evaluation reaching {at}"
    return (f"{what}; mean ± sample std over the seeds that have it; {better}; the gap "
            "is the first series minus the second")


def _at(fig: Figure, value: Any) -> str:
    return "" if value is None else f"{sweep_label(fig)}={show_value(value)}"


def _values(fig: Figure, claim: dict[str, Any], on: str, runs: list[RunSpec],
            root: Path) -> np.ndarray:
    """``measure`` per seed (NaN where the run did not reach its target)."""
    out = []
    for r in runs:
        rows = run_rows(root, r)
        if on in ("time_to_target", "all_done"):
            out.append(time_to_target(r, rows, "all_done" if on == "all_done" else "mean_accuracy"))
        elif on == "final_accuracy" and "tasks" in r.raw:
            out.append(run_finals(r, rows, False)["mean"]["accuracy"])
        elif on == "final_accuracy":  # a diverged run has none
            out.append(math.nan if diverged(root, r) else
                       final_accuracy(rows, int(claim.get("last", fig.spec.get("last", 10)))))
        elif on == "transition_accuracy" and diverged(root, r):
            out.append(math.nan)
        elif on == "transition_accuracy":  # the mean over the figure's transitions
            pilot = canonical(r.raw)["initial_model"]["pilot_sessions"]
            window = int(fig.spec.get("window", 10))
            out.append(float(np.mean([transition_accuracy(rows, pilot + 1 + k, window)
                                      for k in fig.spec.get("transitions", [1, 2, 3])])))
        else:
            target = _target(fig, claim, r)
            out.append(math.nan if target is None else to_target(rows, float(target), on))
    # accuracies in %, as the tables print them (the gap then in percentage points)
    return np.array(out, dtype=float) * (100.0 if on in PERCENT else 1.0)


def _budgets(on: str, runs: list[RunSpec], root: Path, values: np.ndarray) -> np.ndarray:
    """Where a run did not reach the target: ``on`` at its last row (its budget).

    That is the value it was censored at; NaN where it reached the target, diverged, or
    ``on`` is no resource read at the target (accuracies, FedAST's time to the target).
    """
    out = np.full(len(runs), math.nan)
    if on in PERCENT or on in ("time_to_target", "all_done"):
        return out
    for i, r in enumerate(runs):
        if math.isnan(values[i]) and not diverged(root, r):
            rows = run_rows(root, r)
            if rows:
                out[i] = row_value(rows[-1], on)
    return out


#: Columns of a figure's per-seed CSV read from each run's last row (when it has them).
LAST_ROW = ("round", "test_accuracy", "uplink_mb_per_client", "sim_time_s")


def per_seed_rows(fig: Figure, root: Path) -> list[dict[str, Any]]:
    """One row per run of ``fig`` (``*-seeds.csv``: every verdict can be recomputed from it).

    Where it sits (panel, series, sweep value, seed, run key), its last row's
    :data:`LAST_ROW`, and, with a claim, its measure and the budget it was censored at.
    """
    claim = fig.spec.get("claim") or {}
    on = str(claim.get("measure", "")) if claim.get("better") or claim.get("close") else ""
    out = []
    for r in fig.runs:
        rows = run_rows(root, r) if not diverged(root, r) else []
        last = rows[-1] if rows else {}
        row: dict[str, Any] = {"panel": r.panel, "series": r.series,
                               "value": show_value(r.value) if r.value is not None else "",
                               "seed": r.seed, "run": r.key}
        row.update({k: last.get(k, "") for k in LAST_ROW})
        row["diverged"] = int(diverged(root, r))
        if on:
            value = _values(fig, claim, on, [r], root)
            row[f"claim_{on}"] = float(value[0])
            row["censored_at"] = float(_budgets(on, [r], root, value)[0])
        out.append(row)
    return out


#: Measures that are accuracies: shown in %, in the verdict lines as in the tables.
PERCENT = frozenset({"final_accuracy", "transition_accuracy"})


def _target(fig: Figure, claim: dict[str, Any], run: RunSpec) -> float | None:
    """The accuracy a claim's row value is read at, for ``run``.

    The claim's ``target``; else a table's highest target (of the run's panel); else the
    figure's ``target``; else the run's ``target_accuracy`` (None: it has none).
    """
    if "target" in claim:
        return claim["target"]
    targets = fig.spec.get("targets")
    if targets:
        return max(targets.get(run.panel, [math.nan]) if isinstance(targets, dict) else targets)
    return fig.spec.get("target", run.raw.get("target_accuracy"))


def _show(values: np.ndarray) -> str:
    """``3.12 ± 0.40 (3/3 seeds)``: mean and sample std of the seeds that have a value."""
    done = values[np.isfinite(values)]
    count = f"{done.size}/{values.size} seed{'s' * (values.size != 1)}"
    if not done.size:
        return f"not reached ({count})"
    spread = f" ± {np.std(done, ddof=1):.3g}" if done.size > 1 else ""
    return f"{np.mean(done):.4g}{spread} ({count})"
