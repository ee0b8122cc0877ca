"""The report's tables: one CSV writer, one markdown-table writer, the markdown of each table kind.

Every file is written atomically (a temporary file renamed over the target), through
:func:`wirelessfl.run.records.write_csv` and :func:`wirelessfl.run.records.atomic_write`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from wirelessfl.report.spec import Figure, series_label, sweep_label
from wirelessfl.run.records import atomic_write
from wirelessfl.run.records import write_csv as _write_rows

#: Axis and column names of the metrics a figure can show.
LABELS = {"round": "global round", "uplink_mb_per_client": "uplink per client [MB]",
           "uplink_mb_paper_per_client": "uplink per client [MB, §6.6]",
           "sim_time_s": "simulated latency [s]", "sim_time_min": "simulated run time [min]",
           "epsilon": "privacy spent ε (at the run's δ)"}


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A table as CSV (NaN as an empty cell), written atomically; returns ``path``."""
    _write_rows(path, rows, blank_nan=True)
    return path


def write_text(path: Path, text: str) -> Path:
    """A text file (a markdown table, a README), written atomically; returns ``path``."""
    atomic_write(path, lambda fh: fh.write(text.encode()))
    return path


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table: the header, its rule, then one line per row.

    Examples
    --------
    >>> print(markdown_table(["method", "acc"], [["FedAvg", "0.91"]]), end="")
    | method | acc |
    |---|---|
    | FedAvg | 0.91 |
    """
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(map(str, cells)) + " |\n"

    return line(header) + "|" + "---|" * len(header) + "\n" + "".join(line(r) for r in rows)


def targets_markdown(fig: Figure, rows: list[dict[str, Any]], columns: list[tuple[str, Any]],
              quantity: bool = False) -> str:
    """Metric to each target per setting (rows) and series (columns), beside the paper's."""
    labels = [series_label(fig, s, v) for s, v in columns]
    body = []
    for r in rows:
        cells = []
        for c in labels:
            ours = ("not reached" if r[c] is None else
                    f"{r[c]:.2f}" + (f" ± {r[f'{c} std']:.2f}" if r[f"{c} std"] else ""))
            ref = r[f"{c} paper"]
            theirs = ("" if ref is None else
                      f" (paper {ref:.2f})" if isinstance(ref, (int, float)) else f" (paper {ref})")
            cells.append(f"{ours} [{r[f'{c} reached']}]{theirs}")
        body.append([r["setting"], r["target"], *([r["quantity"]] if quantity else []), *cells])
    what = ", ".join(LABELS.get(m, m) for m in as_list(fig.spec.get("metric")))
    note = (f"\n{what} at the first evaluation reaching the target: mean ± sample std over the "
            "seeds that reached it [reached/seeds]; the paper's value in brackets.\n")
    extra = fig.spec.get("note")
    table = markdown_table(["setting", "target", *(["quantity"] if quantity else []), *labels], body)
    return f"# {fig.title}\n\n{table}{note}" + (f"\n{extra}\n" if extra else "")


def transitions_markdown(fig: Figure, rows: list[dict[str, Any]], keys: list, ks: list[int],
                          series: list[str], cells: dict) -> str:
    """Accuracy after each transition per setting (rows) and transition × series (columns)."""
    swept = any(v is not None for _, v in keys)
    label = sweep_label(fig, "sweep")
    cols = [f"{name} T{k}" for k in ks for name in series]
    body = []
    for r in rows:
        out = []
        for c in cols:
            mean, std, ref = r[c], r[f"{c} std"], r[f"{c} paper"]
            text = "—" if math.isnan(mean) else f"{mean:.2f}" + (
                "" if math.isnan(std) else f" ± {std:.2f}")
            gone = r.get(f"{c} diverged", "0/0")
            if not gone.startswith("0/"):
                text += f" (diverged: {gone.replace('/', ' of ')} seeds)"
            out.append(text + ("" if ref is None else f" ({ref})"))
        body.append([r["setting"], *([r[label]] if swept else []), *out])
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
    table = markdown_table(["setting", *([label] if swept else []), *cols], body)
    return f"# {fig.title}\n\n{table}{note}" + (f"\n{extra}\n" if extra else "")


def gains_markdown(fig: Figure, table: list[dict[str, Any]], method: str, baseline: str,
                    label: str) -> str:
    """Time to target of ``method`` and ``baseline`` per setting, and the gain."""
    swept = "sweep" in fig.spec
    body = [[r["panel"], *([r[label]] if swept else []),
             f"{r[f'{method} time']:.1f} [{r[f'{method} reached']}]",
             f"{r[f'{baseline} time']:.1f} [{r[f'{baseline} reached']}]", f"{r['gain_percent']:.1f}%"]
            for r in table]
    what = ("every task has reached its target (for identical copies: the paper's finish time)"
            if fig.spec.get("metric") == "all_done"
            else "the mean accuracy over the tasks first reaches the target")
    grid = {r.raw.get("eval_interval") for r in fig.runs}
    cadence = (f"; every method evaluated every {grid.pop():g} units of simulated time"
               if len(grid) == 1 and None not in grid else "")
    note = (f"\nMean simulated time at which {what}{cadence}, over the seeds that reached it "
            "[reached/seeds]. Paper: "
            f"{fig.spec.get('reference', '')}\n")
    head = markdown_table(["setting", *([label] if swept else []), method, baseline, "gain"], body)
    return f"# {fig.title}\n\n{head}{note}"


def final_markdown(fig: Figure, table: list[dict[str, Any]], last: int) -> str:
    """Series as rows, panel (× sweep value) as columns: accuracy in % mean ± sample std."""
    label = sweep_label(fig, "sweep")
    cols = list(dict.fromkeys((r["panel"], r[label]) for r in table))
    names = [f"{p} {label}={v}".strip() if v else p for p, v in cols]
    cells = {(r["series"], r["panel"], r[label]): r for r in table}
    body = []
    for series in dict.fromkeys(r["series"] for r in table):
        row = []
        for p, v in cols:
            r = cells.get((series, p, v)) or cells.get((series, p, ""))
            row.append("no run here" if r is None else _final_cell(r, fig))
        body.append([series, *row])
    note = (f"\nFinal test accuracy [%]: the mean of each run's last {last} evaluations, "
            "mean ± sample std over seeds (— : no seed has a value).\n")
    if any(r.get("diverged") for r in table):
        note += ("A run whose training diverged (its model became NaN/Inf) has no final "
                 "accuracy: the cell's mean is over the other seeds, and it says how many "
                 "diverged.\n")
    also = as_list(fig.spec.get("also", []))
    if also and any(not _finite(r.get(k)) for r in table for k in also):
        note += (f"A cell lists {', '.join(also)} where its runs measure it (a link that does "
                 "not have it: none).\n")
    extra = fig.spec.get("note")
    out = f"# {fig.title}\n\n" + markdown_table(["method", *names], body)
    return out + note + (f"\n{extra}\n" if extra else "")


def _final_cell(r: dict[str, Any], fig: Figure) -> str:
    """``75.26 ± 0.05; aircomp_mse 9.25``: accuracy [%] and the ``also`` values measured."""
    mean, std = r["final_accuracy_mean"], r["final_accuracy_std"]
    text = "—" if not _finite(mean) else f"{100 * mean:.2f}" + (
        f" ± {100 * std:.2f}" if _finite(std) else "")
    if r.get("diverged"):
        text += f" (diverged: {r['diverged']} of {r['seeds']} seeds)"
    return text + "".join(f"; {k} {r[k]:.3g}" for k in as_list(fig.spec.get("also", []))
                          if _finite(r.get(k)))


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def as_list(x: Any) -> list[Any]:
    """``x`` as a list (a single value becomes a list of one)."""
    return list(x) if isinstance(x, (list, tuple)) else [x]
