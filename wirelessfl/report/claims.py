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

The comparison is made in every panel and sweep value that has both series, over seeds: each
side's mean ± sample standard deviation and how many seeds reached the target. A setting's
verdict is *holds* when ``better`` is better on the mean, by more than twice the standard
error of the difference of the means (the seeds' 95% interval), with every seed of both sides
counted (or reached the target in more seeds and is not worse); *does not hold* when it is
worse by that much (or reached it in fewer seeds and is not better); otherwise *undecided*,
with the reason. One seed never decides: with a single seed the verdict says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wirelessfl.report.metrics import (
    final_accuracy,
    group_runs,
    run_finals,
    run_rows,
    time_to_target,
    to_target,
    transition_accuracy,
)
from wirelessfl.report.spec import Figure, RunSpec, show_value, sweep_label
from wirelessfl.report.tables import LABELS
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


def check_claim(fig: Figure, root: Path) -> Verdict | None:
    """The figure's claim checked on its runs under ``root`` (None when it has no claim)."""
    claim = fig.spec.get("claim")
    if not claim:
        return None
    finding = str(claim.get("finding", "")).strip()
    better, than = claim.get("better"), claim.get("than")
    if better is None or than is None:
        return Verdict(finding, (), f"not checked here: {claim.get('why', 'read the table')}")
    on, lower = str(claim.get("measure", "round")), bool(claim.get("lower", True))
    groups = group_runs(fig)
    series = {s for _, s, _ in groups}
    for name in (better, than):
        if name not in series:
            raise ConfigError(f"figure {fig.name}: its claim names series {name!r}; the figure "
                              f"has {', '.join(sorted(series))}")
    ours, verdicts = [], []
    for (panel, s, value), runs in groups.items():
        if s != better:
            continue
        rivals = groups.get((panel, than, value)) or groups.get((panel, than, None))
        if not rivals:
            continue
        mine, theirs = (_values(fig, claim, on, r, root) for r in (runs, rivals))
        verdict = _verdict(mine, theirs, lower)
        where = " ".join(x for x in (panel, _at(fig, value)) if x)
        ours.append(f"{where + ': ' if where else ''}{better} {_show(mine)} vs {than} "
                    f"{_show(theirs)} → {verdict}")
        verdicts.append(verdict)
    return Verdict(finding, tuple(ours), _overall(verdicts, len({r.seed for r in fig.runs})),
                   _measured(fig, claim, on, lower))


def _measured(fig: Figure, claim: dict[str, Any], on: str, lower: bool) -> str:
    """What a claim's numbers are, for the README: ``global round at the target 70%``."""
    better = "lower" if lower else "higher"
    if on == "final_accuracy":
        last = int(claim.get("last", fig.spec.get("last", 10)))
        what = f"final test accuracy (mean of the last {last} evaluations)"
    elif on == "transition_accuracy":
        what = "test accuracy after the session transitions (mean over the transitions)"
    elif on in ("time_to_target", "all_done"):
        what = ("simulated time [s] until every task reaches its target" if on == "all_done"
                else "simulated time [s] until the tasks' mean accuracy reaches the target")
    else:
        targets = {_target(fig, claim, r) for r in fig.runs}
        at = (f"{100 * float(next(iter(targets))):g}%" if len(targets) == 1 and None not in targets
              else "the run's target")
        what = f"{LABELS.get(on, on)} at the first evaluation reaching {at}"
    return f"{what}; mean ± sample std over the seeds that have it; {better} is better"


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
        elif on == "final_accuracy":
            out.append(final_accuracy(rows, int(claim.get("last", fig.spec.get("last", 10)))))
        elif on == "transition_accuracy":  # the mean over the figure's transitions
            pilot = canonical(r.raw)["initial_model"]["pilot_sessions"]
            window = int(fig.spec.get("window", 10))
            out.append(float(np.mean([transition_accuracy(rows, pilot + 1 + k, window)
                                      for k in fig.spec.get("transitions", [1, 2, 3])])))
        else:
            target = _target(fig, claim, r)
            out.append(math.nan if target is None else to_target(rows, float(target), on))
    return np.array(out, dtype=float)


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


def _verdict(mine: np.ndarray, theirs: np.ndarray, lower: bool) -> str:
    """One setting's verdict (see the module docstring)."""
    m, t = np.isfinite(mine), np.isfinite(theirs)
    if not m.any() and not t.any():
        return "undecided (neither side reached the target)"
    if not m.any() or not t.any():  # one side never reached it
        return "holds" if m.any() else "does not hold"
    better = (float(np.mean(mine[m])) < float(np.mean(theirs[t]))) == lower
    if float(np.mean(mine[m])) == float(np.mean(theirs[t])):
        return "undecided (equal means)"
    if m.sum() == t.sum() == m.size:
        gap, se = abs(float(np.mean(mine) - np.mean(theirs))), _se(mine, theirs)
        if se is not None and gap < 2 * se:  # inside the seeds' 95% interval of the gap
            return f"undecided (the gap, {gap:.3g}, is within the seed spread, 2 se = {2 * se:.3g})"
        return "holds" if better else "does not hold"
    if (m.sum() >= t.sum()) == better:  # the counts and the means agree
        return "holds" if better else "does not hold"
    return (f"undecided (better on the mean of the seeds that reached the target, "
            f"{int(m.sum())}/{m.size} against {int(t.sum())}/{t.size})" if better else
            f"undecided (reached the target in more seeds, {int(m.sum())}/{m.size} against "
            f"{int(t.sum())}/{t.size}, worse on their mean)")


def _se(a: np.ndarray, b: np.ndarray) -> float | None:
    """Standard error of the difference of two means (None with fewer than two seeds a side)."""
    if a.size < 2 or b.size < 2:
        return None
    return float(np.sqrt(np.var(a, ddof=1) / a.size + np.var(b, ddof=1) / b.size))


def _overall(verdicts: list[str], seeds: int) -> str:
    """The figure's verdict over its settings; one seed is never decided."""
    if not verdicts:
        return "undecided (no setting has both series)"
    n = len(verdicts)
    held = sum(v == "holds" for v in verdicts)
    failed = sum(v == "does not hold" for v in verdicts)
    if held == n:
        out = "holds" if n == 1 else f"holds in all {n} settings"
    elif failed == n:
        out = "does not hold" if n == 1 else f"does not hold in any of the {n} settings"
    elif held == failed == 0:
        out = "undecided" if n == 1 else f"undecided in all {n} settings"
    else:
        parts = [f"holds in {held}" if held else "", f"does not hold in {failed}" if failed else "",
                 f"undecided in {n - held - failed}" if n - held - failed else ""]
        out = ("mixed: " if held and failed else "") + ", ".join(
            p for p in parts if p) + f" of {n} settings"
    if seeds == 1:
        out += " (one seed: indicative only, not decided)"
    return out
