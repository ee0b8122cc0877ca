"""The local executor: a figure's runs one after another, or each in a worker process.

Every run is seeded by its config alone, so the numbers do not depend on the executor, the
number of processes or the order (the Ray executor, :mod:`wirelessfl.report.ray_executor`,
runs :func:`run_in_process` as its task).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from channels.validation import as_int
from wirelessfl.errors import TrainingDiverged
from wirelessfl.report.spec import RunSpec, run_folder
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord


def run_name(run: RunSpec) -> str:
    """A run's config name: its label, made folder-safe (a label may hold "30/40 dB")."""
    return run.label.replace(" · ", " ").replace("/", "-").replace("\\", "-").lstrip(".- ")[:128]


def run_one(run: RunSpec, root: Path, *, index: str = "[1/1]", quiet: bool = False,
            log: Callable[[str], None] = print) -> None:
    """Train (or resume) one run into its folder under ``root``.

    A run whose data cannot be loaded (e.g. CIFAR-10 without ``--data-dir``), whose folder
    another process is writing, or that diverges is skipped with its one-line reason.
    """
    folder = run_folder(root, run)
    log(f"{index} {run.label} -> {folder}")
    try:
        job = open_run({**run.raw, "name": run_name(run)})
        run_job(job, folder, resume=RunRecord(folder).exists(), quiet=quiet)
    except (ValueError, TrainingDiverged) as exc:  # e.g. locked by another process
        log(f"  skipped: {str(exc).splitlines()[0]}")


def execute_local(runs: list[RunSpec], root: Path, *, quiet: bool = False,
                  log: Callable[[str], None] = print, jobs: int = 1) -> None:
    """Train every run, ``jobs`` at a time (each in its own process when ``jobs`` > 1)."""
    as_int("jobs", jobs, lo=1, hi=os.cpu_count() or 1)
    if jobs > 1 and len(runs) > 1:
        _execute_parallel(runs, root, jobs, log)
        return
    for i, r in enumerate(runs, 1):
        run_one(r, root, index=f"[{i}/{len(runs)}]", quiet=quiet, log=log)


def run_in_process(run: RunSpec, root: Path, threads: int, index: str) -> str:
    """One run in a worker process (PyTorch limited to ``threads``); returns its log lines.

    ``OMP_NUM_THREADS`` is set too, so a run's ``threads: auto`` keeps the worker's share.
    """
    import torch

    from wirelessfl.run import plugins

    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    plugins.load_from_env()  # the command's --plugin modules, in this worker too
    lines: list[str] = []
    run_one(run, root, index=index, quiet=True, log=lines.append)
    return "\n".join(lines)


def _execute_parallel(runs: list[RunSpec], root: Path, jobs: int,
                      log: Callable[[str], None]) -> None:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    jobs = min(jobs, len(runs))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(run_in_process, r, root, threads, f"[{i}/{len(runs)}]")
                   for i, r in enumerate(runs, 1)]
        for fut in as_completed(futures):
            log(fut.result())
