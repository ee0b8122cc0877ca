"""The one run loop every kind of run shares.

A run is a :class:`Job` (round-based training, including the sessions of dynamic clients,
or a multi-task simulation); :func:`execute` does everything around it the same way for all:
it opens the run folder (lock, never overwrite, nothing half-written:
:meth:`~wirelessfl.run.records.RunRecord.writing`), restores the job from its checkpoint,
keeps the metric rows the checkpoint had seen (after the job has checked them), shows one
progress bar, appends rows and writes checkpoints as the job produces them, and writes the
summary. The wall clock carries over a resume.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from wirelessfl.errors import TrainingDiverged
from wirelessfl.run.records import RunRecord
from wirelessfl.run.threads import MAX_THREADS, ThreadGovernor, torch_threads
from wirelessfl.run.trackers import Tracker, open_trackers, step_of


class Output:
    """What a job's :meth:`Job.advance` reports through: rows, progress, checkpoints."""

    #: A run expected to last at least this many wall seconds says so in one line when its
    #: progress bar is off (``--quiet``), after its first timed step.
    ESTIMATE_FROM_S = 60.0

    def __init__(self, record: RunRecord, bar: tqdm, start: float,
                 trackers: Sequence[Tracker] = (), governor: ThreadGovernor | None = None, *,
                 estimate: tuple[str, str] | None = None,
                 until: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.record, self._bar, self._start, self.governor = record, bar, start, governor
        #: Set once ``until`` has returned True for a row: a round-based job ends after it.
        self.stopped, self._until = False, until
        self.trackers, self._rows = list(trackers), len(record.rows()) if trackers else 0
        # (wall clock, progress) where this process began: the estimate's origin (None: done);
        # ``estimate`` is (the run's name, its progress unit) when the bar is off
        self._origin = (time.perf_counter(), bar.n) if estimate else None
        self._timed_first = False  # the estimate is of the steps after the first
        self._label = estimate or ("run", "step")

    def wall(self) -> float:
        """Wall seconds of the run so far (including before a resume)."""
        return time.perf_counter() - self._start

    def row(self, row: dict[str, Any], *, progress: float | None = None, note: str = "") -> None:
        """Append a metrics row (with ``wall_s``), move the progress bar to ``progress``."""
        row = {**row, "wall_s": self.wall()}
        self.record.append(row)
        for t in list(self.trackers):  # the folder is the record; a tracker failing is a note
            try:
                t.log(row, step_of(row, self._rows))
            except Exception as exc:  # noqa: BLE001 - any failure of a tracker's library
                print(f"wirelessfl: note: tracker {t.name} failed ({type(exc).__name__}: "
                      f"{str(exc)[:100]}); it is off for the rest of the run", file=sys.stderr)
                self.trackers.remove(t)
        self._rows += 1
        if self._until is not None and not self.stopped:
            self.stopped = bool(self._until(row))
        if progress is not None:
            self.tick(progress)
        if note:
            self._bar.set_postfix_str(note)

    @property
    def threads(self) -> int | None:
        """PyTorch's thread count for the next step (None: not governed here)."""
        return None if self.governor is None else self.governor.count

    def tick(self, progress: float) -> None:
        """Move the progress bar to ``progress`` (a step without a row).

        Between steps is where ``threads: auto`` is decided again
        (:class:`~wirelessfl.run.threads.ThreadGovernor`): before the step's checkpoint, so
        the checkpoint holds the count the next step computes with.
        """
        if self.governor is not None:
            self.governor.between(progress)
        total = self._bar.total
        self._bar.n = progress if total is None else min(progress, total)
        self._bar.refresh()
        if self._origin is not None and total and progress > self._origin[1]:
            if not self._timed_first:  # the first step holds the start-up: time from its end
                self._timed_first = True
                if progress < total:
                    self._origin = (time.perf_counter(), progress)
                    return
            self._say_estimate(progress, total)

    def _say_estimate(self, progress: float, total: float) -> None:
        """One line on stderr with the time left, once, when the bar is off and it is long.

        Timed over the second step (the first, with the imports, compilation and the data's
        first upload, made a 40 s run say 22 min).
        """
        t0, p0 = self._origin
        self._origin = None
        per = (time.perf_counter() - t0) / (progress - p0)
        left = per * max(0.0, total - progress)
        if left + per * (progress - p0) >= self.ESTIMATE_FROM_S:
            name, unit = self._label
            print(f"wirelessfl: {name}: about {_duration(left)} left "
                  f"({per:.3g} s a {unit}, {progress:g} of {total:g}); no progress bar "
                  "(--quiet, or a worker of --jobs)",
                  file=sys.stderr)

    def checkpoint(self, payload: dict[str, Any]) -> None:
        """Write a checkpoint (atomically) with the wall clock and thread count in it."""
        gov = self.governor
        self.record.save_checkpoint({**payload, "wall_s": self.wall(), "threads": self.threads,
                                     "thread_changes": [] if gov is None else gov.changes})


class Job(ABC):
    """One kind of run, driven by :func:`execute`.

    Attributes ``resolved`` (the config written to ``config.yaml``), ``seed``, ``device``,
    ``name``, ``progress_total`` and ``progress_unit`` describe it.
    """

    resolved: dict[str, Any]
    seed: int
    device: str
    name: str
    progress_total: float | None  # None: the end is not known ahead (a count, no ETA)
    progress_unit: str = "round"
    #: What an interrupted run keeps (said when Ctrl-C stops it).
    kept: str = "completed rounds"
    #: Whether its rows are a curve per round that :func:`wirelessfl.report.plot_runs` draws.
    plottable: bool = False

    @abstractmethod
    def key_of(self, config: dict[str, Any]) -> Any:
        """The run key view of a plain config of this kind (ValueError if it does not resolve).

        Two configs are one run when their views are equal: a resumed folder's
        ``config.yaml`` against the config asked for.
        """

    def open_folder(self, folder: Path) -> None:
        """The run's folder, before anything is restored or trained (for files it keeps there)."""
        return None

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
            quiet: bool = False, trackers: Sequence[Tracker] = (),
            estimate: bool = True, govern: bool = True,
            until: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """Run ``job`` into ``record``'s folder (see the module docstring); return the summary.

    ``trackers`` (:mod:`wirelessfl.run.trackers`) receive every row as it is appended. With
    ``quiet`` a one-line time estimate is printed after the first timed round unless
    ``estimate`` is false (a run of a lockstep group, whose group prints one).
    PyTorch computes with the config's ``threads`` (:mod:`wirelessfl.run.threads`): the
    count chosen at the start is written to ``meta.json``; ``auto`` is decided again between
    rounds (:class:`~wirelessfl.run.threads.ThreadGovernor`) unless ``govern`` is false (the
    runs of a lockstep group, threads of one process, keep their first count); every
    checkpoint holds the count and its changes, and a resumed run starts from them.
    ``until`` is called with every row as it is appended (``wall_s`` included); once it
    returns True a round-based job ends after that round, short of its config's rounds (a
    sample: :mod:`wirelessfl.report.estimate` times rounds this way), and no ``summary.json``
    is written (the folder does not look like a finished run: a resume goes on).
    """
    governor = ThreadGovernor(job.resolved.get("threads", "auto"),
                              job.resolved.get("engine", "auto"), fixed=not govern)
    with record.writing(job.resolved, job.seed, job.device, resume=resume,
                        threads=governor.count, key=job.key_of) as ckpt, \
            contextlib.ExitStack() as stack:
        wall0 = 0.0
        job.open_folder(record.folder)
        if ckpt is not None:
            job.restore(ckpt)
            wall0 = float(ckpt.get("wall_s", 0.0))
            kept = ckpt.get("threads")
            if isinstance(kept, int) and not isinstance(kept, bool) and 1 <= kept <= MAX_THREADS:
                changes = ckpt.get("thread_changes") or []
                governor.restore(kept, changes if isinstance(changes, list) else [])
        stack.enter_context(torch_threads(governor.count))
        if resume:
            record.keep(job.kept_rows(record, record.rows()))
        bar = tqdm(total=job.progress_total, initial=job.progress(), desc=job.name,
                   unit=job.progress_unit, disable=quiet or bool(os.environ.get("CI")),
                   dynamic_ncols=True)
        trackers = open_trackers(list(trackers), record.folder, job.name, job.resolved, resume)
        out = Output(record, bar, time.perf_counter() - wall0, trackers, governor,
                     estimate=(job.name, job.progress_unit) if quiet and estimate else None,
                     until=until)
        finished = False
        try:
            job.advance(out)
            finished = True
        except TrainingDiverged as exc:  # its rows so far stay; a figure draws it as diverged
            record.mark_diverged(str(exc))
            raise
        finally:
            bar.close()
            for t in out.trackers:
                try:
                    t.close(finished)
                except Exception as exc:  # noqa: BLE001 - the run's record is already complete
                    print(f"wirelessfl: note: tracker {t.name} did not close cleanly "
                          f"({type(exc).__name__}: {str(exc)[:100]})", file=sys.stderr)
        summary = job.summary(record.rows(), out.wall())
        if not out.stopped:  # a sample cut short by ``until`` is not a finished run
            record.write_summary(summary)
        return summary


def _duration(seconds: float) -> str:
    """``42 s``, ``3.5 min`` or ``2.1 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
