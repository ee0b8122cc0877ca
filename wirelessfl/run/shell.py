"""The one run loop every kind of run shares.

A run is a :class:`Job` (round-based training, a multi-task simulation, and next the
sessions of dynamic clients); :func:`execute` does everything around it the same way for all:
it opens the run folder (lock, never overwrite, nothing half-written:
:meth:`~wirelessfl.run.records.RunRecord.writing`), restores the job from its checkpoint,
keeps the metric rows the checkpoint had seen (after the job has checked them), shows one
progress bar, appends rows and writes checkpoints as the job produces them, and writes the
summary. The wall clock carries over a resume.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from typing import Any

from tqdm import tqdm

from wirelessfl.run.records import RunRecord


class Output:
    """What a job's :meth:`Job.advance` reports through: rows, progress, checkpoints."""

    def __init__(self, record: RunRecord, bar: tqdm, start: float) -> None:
        self.record, self._bar, self._start = record, bar, start

    def wall(self) -> float:
        """Wall seconds of the run so far (including before a resume)."""
        return time.perf_counter() - self._start

    def row(self, row: dict[str, Any], *, progress: float | None = None, note: str = "") -> None:
        """Append a metrics row (with ``wall_s``), move the progress bar to ``progress``."""
        self.record.append({**row, "wall_s": self.wall()})
        if progress is not None:
            self.tick(progress)
        if note:
            self._bar.set_postfix_str(note)

    def tick(self, progress: float) -> None:
        """Move the progress bar to ``progress`` (a step without a row)."""
        self._bar.n = min(progress, self._bar.total)
        self._bar.refresh()

    def checkpoint(self, payload: dict[str, Any]) -> None:
        """Write a checkpoint (atomically) with the wall clock in it."""
        self.record.save_checkpoint({**payload, "wall_s": self.wall()})


class Job(ABC):
    """One kind of run, driven by :func:`execute`.

    Attributes ``resolved`` (the config written to ``config.yaml``), ``seed``, ``device``,
    ``name``, ``progress_total`` and ``progress_unit`` describe it.
    """

    resolved: dict[str, Any]
    seed: int
    device: str
    name: str
    progress_total: float
    progress_unit: str = "round"
    #: What an interrupted run keeps (said when Ctrl-C stops it).
    kept: str = "completed rounds"
    #: Whether its rows are a curve per round that :func:`wirelessfl.report.plot_runs` draws.
    plottable: bool = False

    @abstractmethod
    def restore(self, ckpt: dict[str, Any]) -> None:
        """Continue from a checkpoint (RunFolderError if it does not fit the config)."""

    @abstractmethod
    def kept_rows(self, record: RunRecord, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows the restored checkpoint had seen (RunFolderError on gaps or duplicates)."""

    @abstractmethod
    def advance(self, out: Output) -> None:
        """Run to the end, reporting rows and checkpoints through ``out``."""

    @abstractmethod
    def summary(self, rows: list[dict[str, Any]], wall: float) -> dict[str, Any]:
        """The run's summary from all its rows."""

    def progress(self) -> float:
        """Where a restored job starts on the progress bar."""
        return 0.0

    @abstractmethod
    def describe(self, summary: dict[str, Any], out: Any, plot: Any = None) -> str:
        """The lines the CLI prints for a finished run (its folder ``out``, its ``plot``)."""


def execute(record: RunRecord, job: Job, *, resume: bool = False,
            quiet: bool = False) -> dict[str, Any]:
    """Run ``job`` into ``record``'s folder (see the module docstring); return the summary."""
    with record.writing(job.resolved, job.seed, job.device, resume=resume) as ckpt:
        wall0 = 0.0
        if ckpt is not None:
            job.restore(ckpt)
            wall0 = float(ckpt.get("wall_s", 0.0))
        if resume:
            record.keep(job.kept_rows(record, record.rows()))
        bar = tqdm(total=job.progress_total, initial=job.progress(), desc=job.name,
                   unit=job.progress_unit, disable=quiet or bool(os.environ.get("CI")),
                   dynamic_ncols=True)
        out = Output(record, bar, time.perf_counter() - wall0)
        try:
            job.advance(out)
        finally:
            bar.close()
        summary = job.summary(record.rows(), out.wall())
        record.write_summary(summary)
        return summary
