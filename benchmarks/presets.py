"""Every shipped preset for a few rounds on each device, side by side: does it run, does it learn,
and does the GPU give the CPU's numbers?

    PYTHONPATH=. python benchmarks/presets.py --out DIR [--devices cpu cuda] [--rounds 3]
    python benchmarks/presets.py --out DIR --devices cpu --quick     # two presets, one round

Each preset runs through the command line (``wirelessfl run NAME --set rounds=R --set
device=D``, in this process, into a fresh run folder under ``DIR/runs``), so every kind of run
(rounds, FedAST's simulations, dynamic-client sessions) is covered as a user would run it.
Round-based presets run ``R`` rounds; a FedAST preset ``max_rounds = R`` server updates of
each task, each evaluated (accuracies are then the mean over its tasks).

CPU runs go to a pool of processes (``--cpu-workers``, threads split between them) while the
GPU runs go one after another in this process, so the table costs about as long as its slower
side. Per preset and device: the final test accuracy, the accuracy after round 0, the wall
seconds, and the error line of a run that failed; per preset: the CPU/GPU gap and whether the
run learned (final accuracy above the initial model's by at least :data:`LEARNS_BY`).

Writes ``DIR/presets.json`` and ``DIR/presets.md``. ``benchmarks/gpu_suite.py`` runs it as its
first part.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import io
import json
import multiprocessing as mp
import os
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

#: A run "learns" when its final accuracy beats the initial model's by this much (chance,
#: :data:`CHANCE`, where a run evaluates no round 0: FedAST's simulations).
LEARNS_BY = 0.05
#: Chance accuracy of the shipped presets (all 10-class: Fashion-MNIST, Synthetic(1, 1)).
CHANCE = 0.1
#: The presets of ``--quick``: the smallest round-based one and the one this table fixed.
QUICK = ("quickstart", "heterofl_fmnist")


def _overrides(name: str, rounds: int, device: str) -> list[str]:
    from wirelessfl.run.config import load_raw

    raw = load_raw(name)
    sets = [f"device={device}"]
    if "tasks" in raw:  # FedAST: R server updates of each task, each evaluated
        sets += [f"max_rounds={rounds}", "eval_every=1"]
    else:
        sets.append(f"rounds={rounds}")
    session = (raw.get("population") or {}).get("rounds_per_session")
    if session is not None and session >= rounds:  # sessions: one ends within the R rounds
        sets.append(f"population.rounds_per_session={max(1, rounds - 1)}")
    return sets


def run_preset(name: str, device: str, rounds: int, out_root: str, data_dir: str | None = None) -> dict:
    """One preset on one device: its summary numbers, or the one-line error of a failed run."""
    from wirelessfl.cli import main
    from wirelessfl.run.records import RunRecord

    out = Path(out_root) / f"{name}-{device}"
    argv = ["run", name, "--out", str(out), "--quiet"]
    for s in _overrides(name, rounds, device):
        argv += ["--set", s]
    if data_dir:  # a multi-task preset (FedAST) gives it to every task
        argv += ["--set", f"data.data_dir={data_dir}"]
    err = io.StringIO()
    t = time.perf_counter()
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            rc = main(argv)
    except Exception as exc:  # noqa: BLE001 - a traceback is a finding: record it, go on
        return {"preset": name, "device": device, "ok": False,
                "error": f"traceback: {type(exc).__name__}: {str(exc)[:200]}"}
    row = {"preset": name, "device": device, "ok": rc == 0,
           "seconds": round(time.perf_counter() - t, 2)}
    if rc != 0:
        row["error"] = (err.getvalue().strip().splitlines() or [f"exit {rc}"])[-1][:300]
        return row
    rows = [r for r in RunRecord(out).rows() if r.get("test_accuracy") is not None]
    tasks: dict = {}  # one curve per task (FedAST), else one
    for r in rows:
        tasks.setdefault(r.get("task"), []).append(r)
    if not tasks:
        return {**row, "rounds": 0, "initial_accuracy": None, "final_accuracy": None}
    row["rounds"] = max(c[-1].get("round", 0) for c in tasks.values())
    for key, at in (("initial_accuracy", 0), ("final_accuracy", -1), ("final_loss", -1)):
        field = "test_loss" if key == "final_loss" else "test_accuracy"
        vals = [c[at].get(field) for c in tasks.values()]
        row[key] = float(sum(vals) / len(vals)) if None not in vals else None
    if any(c[0].get("round", 0) != 0 for c in tasks.values()):  # no round-0 evaluation
        row["initial_accuracy"] = CHANCE
    return row


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def table(names: list[str], devices: list[str], rounds: int, out_root: str, cpu_workers: int = 1,
          data_dir: str | None = None, on_row=None, budget_s: float | None = None) -> dict:
    """Every preset on every device; CPU runs in a process pool beside the GPU runs.

    ``budget_s``: runs not started within it are recorded as skipped (the pool's queued
    CPU runs are cancelled).
    """
    started = time.perf_counter()
    rows: list[dict] = []
    cpu_jobs = []
    pool = None
    if "cpu" in devices and cpu_workers > 1:
        threads = max(1, (os.cpu_count() or 2) // cpu_workers)
        pool = cf.ProcessPoolExecutor(cpu_workers, mp_context=mp.get_context("spawn"),
                                      initializer=_init_worker, initargs=(threads,))
        cpu_jobs = [pool.submit(run_preset, n, "cpu", rounds, out_root, data_dir) for n in names]
    try:
        for device in devices:
            if device == "cpu" and pool is not None:
                continue
            for n in names:
                if budget_s is not None and time.perf_counter() - started > budget_s:
                    rows.append({"preset": n, "device": device, "ok": False,
                                 "error": f"skipped: time budget {budget_s:.0f}s spent"})
                    continue
                rows.append(run_preset(n, device, rounds, out_root, data_dir))
                if on_row:
                    on_row({"rows": rows})
        for n, job in zip(names, cpu_jobs):
            left = None if budget_s is None else max(1.0, budget_s - (time.perf_counter() - started))
            try:
                rows.append(job.result(timeout=left))
            except cf.TimeoutError:
                job.cancel()
                rows.append({"preset": n, "device": "cpu", "ok": False,
                             "error": f"skipped: time budget {budget_s:.0f}s spent"})
            except Exception as exc:  # noqa: BLE001 - a crashed worker is a finding too
                rows.append({"preset": n, "device": "cpu", "ok": False,
                             "error": f"worker: {type(exc).__name__}: {str(exc)[:200]}"})
    finally:
        if pool is not None:
            running = [j for j in cpu_jobs if not j.done()]
            if running:  # past the budget: stop the workers rather than wait for them
                for proc in list(getattr(pool, "_processes", {}).values()):
                    proc.terminate()
            pool.shutdown(wait=not running, cancel_futures=True)
    return {"rounds": rounds, "devices": devices, "learns_by": LEARNS_BY, "rows": rows,
            "presets": _compare(names, devices, rows)}


def _compare(names: list[str], devices: list[str], rows: list[dict]) -> list[dict]:
    by = {(r["preset"], r["device"]): r for r in rows}
    out = []
    for n in names:
        got = [by.get((n, d), {}) for d in devices]
        acc = [g.get("final_accuracy") for g in got]
        entry = {"preset": n, "runs": all(g.get("ok") for g in got),
                 **{f"{d}_accuracy": a for d, a in zip(devices, acc)}}
        init = next((g.get("initial_accuracy") for g in got if g.get("initial_accuracy") is not None),
                    None)
        if None not in acc and init is not None:
            entry["learns"] = all(a >= init + LEARNS_BY for a in acc)
        if len(devices) > 1 and None not in acc:
            entry["gap"] = max(acc) - min(acc)
        errors = [f"{d}: {g['error']}" for d, g in zip(devices, got) if g.get("error")]
        if errors:
            entry["errors"] = errors
        out.append(entry)
    return out


def markdown(result: dict) -> str:
    devices = result["devices"]
    lines = [f"# Presets, {result['rounds']} rounds (FedAST: {result['rounds']} updates per task)", "",
             "| preset | " + " | ".join(f"{d} accuracy" for d in devices)
             + " | gap | learns | note |",
             "|---|" + "---|" * (len(devices) + 3)]
    for e in result["presets"]:
        accs = [e.get(f"{d}_accuracy") for d in devices]
        cells = [f"{a:.4f}" if a is not None else "—" for a in accs]
        gap = f"{e['gap']:.1e}" if "gap" in e else "—"
        learns = {True: "yes", False: "**no**"}.get(e.get("learns"), "—")
        note = "; ".join(e.get("errors", []))[:160]
        lines.append(f"| {e['preset']} | " + " | ".join(cells) + f" | {gap} | {learns} | {note} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import torch

    from wirelessfl.run.config import list_presets

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--devices", nargs="+",
                   default=["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", nargs="+", help="these presets only")
    p.add_argument("--cpu-workers", type=int, default=1)
    p.add_argument("--data-dir", help="folder with the Fashion-MNIST IDX files")
    p.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK)}, one round")
    args = p.parse_args(argv)
    names = list(QUICK) if args.quick else (args.only or list(list_presets()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = table(names, args.devices, 1 if args.quick else args.rounds, str(out / "runs"),
                   args.cpu_workers, args.data_dir)
    (out / "presets.json").write_text(json.dumps(result, default=str))
    (out / "presets.md").write_text(markdown(result))
    print(markdown(result))
    return 0 if all(e["runs"] for e in result["presets"]) else 1


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.exit(main())
