"""Run records: one folder per run.

Contents:

- ``config.yaml`` — the resolved configuration (re-runnable as it is);
- ``meta.json`` — seed, package version, git commit, start time, device;
- ``metrics.jsonl`` — one JSON row per evaluation, appended (and flushed) as it happens:
  ``round``, ``sim_time_s`` (if the algorithm models time), cumulative
  ``uplink_params_per_client`` and ``uplink_mb_per_client``, ``test_accuracy``,
  ``test_loss``, ``train_loss``, plus algorithm extras;
- ``metrics.csv`` — the same rows as a table, rewritten after each row;
- ``checkpoint.pt`` — the state after the last completed round (written atomically, read
  back with ``torch.load(weights_only=True)``: a checkpoint cannot carry code);
- ``summary.json`` — final and best accuracy, time/uplink to the target, wall time;
- ``.lock`` — held (``flock``) by the run writing the folder, so two runs never write one;
  removed when the run ends cleanly (kept after Ctrl-C or a failure, harmlessly).

A new run needs a folder that does not exist or is empty: nothing a run did not create is
ever overwritten. A resumed run must find its own ``config.yaml`` and metric rows that run
without gaps or duplicates up to its checkpoint (:meth:`RunRecord.check_rows`).

MB are 4-byte parameters / 2^20, as in ``docs/papers/hist.md`` §6.2 and §6.6.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import math
import os
import platform
import shutil
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

import wirelessfl
from wirelessfl.errors import ConfigError, RunFolderError, parse_json, parse_yaml
from wirelessfl.openmp import cpu_info
from wirelessfl.run import plugins
from wirelessfl.run.key_schema import as_made
from wirelessfl.run.safe_io import atomic_write, open_append, open_new, refuse_link

__all__ = ["RunRecord", "atomic_write", "load_plain", "params_to_mb", "write_csv"]

#: Metric names of rows written before, and the names they are read as.
RENAMED = {"aircomp_mse_mean": "aircomp_mse"}  # HIST's, one name with FedAvg's and RA-Fed's

BYTES_PER_PARAM = 4
MB = 2**20


DAMAGED = ("is damaged (truncated or edited): it cannot be read, resumed, plotted or re-timed; "
           "start the run again with another --out")


def parse_rows(text: str, where: str) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` text, each metric by today's name (:data:`RENAMED`).

    The one reader of metric lines, for a run folder and for a run in an archive; a damaged
    line is a :class:`~wirelessfl.errors.RunFolderError` naming ``where`` and the line.
    """
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        try:
            row = parse_json(line, where)
        except ConfigError:
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("round"), int):
            raise RunFolderError(f"{where} line {n} {DAMAGED}")
        for old, new in RENAMED.items():  # metrics renamed since: read by today's name
            if old in row and new not in row:
                row[new] = row.pop(old)
        rows.append(row)
    return rows


def params_to_mb(num_params: float) -> float:
    """Size in MB of ``num_params`` float32 parameters (2^20 bytes per MB)."""
    return num_params * BYTES_PER_PARAM / MB


def git_commit() -> str | None:
    """Commit of the source tree the package runs from, if it is a git checkout."""
    root = Path(wirelessfl.__file__).resolve().parents[1]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def load_plain(path: str | Path, what: str) -> Any:
    """A file written by :func:`torch.save`, read with ``weights_only=True`` onto the CPU.

    Only tensors and plain containers load (never code); tensors saved on a GPU map to the
    CPU. A damaged or foreign file is a :class:`~wirelessfl.errors.RunFolderError`.
    """
    try:
        with warnings.catch_warnings():  # a foreign pickle's protocol warning is not for users
            warnings.simplefilter("ignore")
            return _fresh(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as exc:  # noqa: BLE001 - any failure of an untrusted file is one error
        raise RunFolderError(f"{what} {path} cannot be read safely ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:120] if str(exc) else ''}); it is "
                             "damaged or was not written by wirelessfl") from None


def _fresh(obj: Any) -> Any:
    """Each tensor of a loaded object copied into its own allocation.

    Loaded tensors can share one storage at arbitrary offsets; vectorised CPU kernels
    (AVX-512) may then sum in another order than for the freshly allocated tensors of an
    uninterrupted run, and a resumed run would differ in the last bits.
    """
    if isinstance(obj, torch.Tensor):
        return obj.clone(memory_format=torch.contiguous_format)
    if isinstance(obj, dict):
        return {k: _fresh(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_fresh(v) for v in obj)
    return obj


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), else the machine type.

    Recorded in each run's ``meta.json``: float kernels differ by instruction set, so two
    machines can round the same run differently and a chaotic run then diverges.
    """
    return cpu_info("model name") or platform.machine()


class RunRecord:
    """Reader and writer of one run folder.

    :meth:`open` takes the folder's lock for the life of the run (:meth:`close` frees it);
    a second run on the same folder is refused while the first holds it.
    """

    LOCK = ".lock"

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._csv_keys: list[str] | None = None  # the CSV's columns, once written here
        self._lock_fh = None
        self._created_folder = False
        self._created_lock = False  # this record made the lock file (a refused resume removes it)

    @property
    def metrics_path(self) -> Path:
        """``metrics.jsonl``."""
        return self.folder / "metrics.jsonl"

    @property
    def checkpoint_path(self) -> Path:
        """``checkpoint.pt``."""
        return self.folder / "checkpoint.pt"

    def exists(self) -> bool:
        """Whether the folder holds a run."""
        return (self.folder / "config.yaml").is_file()

    # ------------------------------------------------------------------ lock and ownership
    FILES = ("config.yaml", "meta.json", "metrics.jsonl", "metrics.csv", "summary.json",
             "diverged.json",
             "checkpoint.pt", "accuracy.png", LOCK)

    def _lock(self, resume: bool = False) -> None:
        """Lock the folder; refused before anything is written there when it is not ours.

        A link as the folder or at any of a run's file names is refused; with ``resume`` a
        folder without a run is refused before the lock file is made.
        """
        if self.folder.exists() and not self.folder.is_dir():
            raise RunFolderError(f"run folder {self.folder} is a file, not a folder; choose "
                                 "another --out")
        refuse_link(self.folder)
        if self.folder.is_dir():
            for name in self.FILES:
                if (self.folder / name).is_symlink():
                    raise RunFolderError(f"{self.folder / name} is a link, which the run would "
                                         "read or write through; remove it (nothing was changed)")
                if (self.folder / name).is_dir():
                    raise RunFolderError(f"{self.folder / name} is a folder where the run "
                                         f"writes its {name}; remove it (nothing was changed)")
            if resume and not self.exists():
                raise RunFolderError(f"--resume: {self.folder} holds no run (no config.yaml); "
                                     "nothing was changed there. Start the run in a new folder "
                                     "with --out")
            if not resume and not self.exists() and self._foreign():
                raise RunFolderError(
                    f"--out {self.folder} is not empty ({', '.join(self._foreign()[:3])}, "
                    "...) and holds no run; choose a new or empty folder")
        if not self.folder.exists():
            self.folder.mkdir(parents=True)
            self._created_folder = True
        for _ in range(10):  # a run ending cleanly removes the lock file: lock the one there
            self._created_lock = not (self.folder / self.LOCK).exists()
            fh = open_append(self.folder / self.LOCK)  # held until close()
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                raise RunFolderError(f"run folder {self.folder} is being written by another "
                                     "run (it holds the folder's lock); wait for it or choose "
                                     "another --out") from None
            try:
                same = os.stat(self.folder / self.LOCK).st_ino == os.fstat(fh.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._lock_fh = fh
                return
            fh.close()  # locked a file a finished run had just removed: take the new one
        raise RunFolderError(f"run folder {self.folder}: its lock file keeps changing; another "
                             "process is starting and ending runs there - choose another --out")

    def close(self, *, remove: bool = False) -> None:
        """Free the folder's lock (``remove``: and delete the lock file, the run done cleanly).

        The file is removed while still locked; a run that opened it meanwhile sees that its
        file is gone once it gets the lock, and locks the new one (:meth:`_lock`).
        """
        if self._lock_fh is not None:
            if remove:
                (self.folder / self.LOCK).unlink(missing_ok=True)
            self._lock_fh.close()
            self._lock_fh = None

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _foreign(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir() if p.name != self.LOCK)

    def discard(self) -> None:
        """Remove a run that failed before its first round (only what this run created)."""
        self.close()
        for name in ("config.yaml", "meta.json", "metrics.jsonl", "metrics.csv",
                     "checkpoint.pt", "summary.json", "diverged.json", self.LOCK):
            (self.folder / name).unlink(missing_ok=True)
        if self._created_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------------ open
    def create(self, config: dict[str, Any], seed: int, device: str,
               threads: int | None = None) -> None:
        """Write the config and metadata of a new run (no metrics yet)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        meta = {"seed": seed, "version": wirelessfl.__version__, "git_commit": git_commit(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "device": device,
                "torch": torch.__version__, "threads": threads or torch.get_num_threads(),
                "cpu": cpu_model()}
        if device.startswith("cuda") and torch.cuda.is_available():
            meta["gpu"] = torch.cuda.get_device_name(torch.device(device))
        if plugins.loaded():  # what a resume must load again (--plugin)
            meta["plugins"] = plugins.loaded()
        if plugins.entry_points_loaded():  # installed plug-ins, with their packages' versions
            meta["entry_points"] = plugins.entry_points_loaded()
        for name, text in (("config.yaml", yaml.safe_dump(config, sort_keys=False)),
                           ("meta.json", json.dumps(meta, indent=2) + "\n"),
                           ("metrics.jsonl", "")):
            with open_new(self.folder / name) as fh:
                fh.write(text)

    def open(self, config: dict[str, Any], seed: int, device: str, *,
             resume: bool, threads: int | None = None,
             key: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any] | None:
        """Lock the folder and start a run there, or with ``resume`` continue the one there.

        A new run needs a folder that does not exist or is empty; a resumed one must hold a
        run of the same resolved ``config``: equal under ``key`` (the run kind's
        :func:`~wirelessfl.run.configtypes.key_view` of a resolved config, so options added
        since, at their defaults, do not count; None: equal as mappings). Returns the last
        checkpoint (None if none).
        Raises :class:`~wirelessfl.errors.RunFolderError` (nothing written) otherwise.
        """
        if resume and not self.folder.is_dir():
            raise RunFolderError(f"--resume: {self.folder} does not exist; start a new run "
                                 "without --resume")
        self._lock(resume)
        try:
            if not resume:
                if self.exists():
                    raise RunFolderError(f"run folder {self.folder} already holds a run; pass "
                                         "--resume to continue it or --out to choose another")
                if self._foreign():
                    raise RunFolderError(
                        f"--out {self.folder} is not empty ({', '.join(self._foreign()[:3])}, "
                        "...) and holds no run; choose a new or empty folder")
                self.create(config, seed, device, threads)
                return None
            if not self.exists():
                raise RunFolderError(f"--resume: {self.folder} holds no run (no config.yaml); "
                                     "nothing was changed there. Start the run in a new folder "
                                     "with --out")
            if not self._same(self.config(), config, key):
                raise RunFolderError(f"--resume: {self.folder} was made with a different config; "
                                     "resume with the same preset and --set values (or none)")
            self.check_meta(seed)
            return self.load_checkpoint()
        except BaseException:  # refused: the folder is left as it was, lock file included
            self.close(remove=self._created_lock)
            raise

    @staticmethod
    def _same(stored: dict[str, Any], config: dict[str, Any],
              key: Callable[[dict[str, Any]], Any] | None) -> bool:
        """Whether a folder's stored config and ``config`` describe one run (under ``key``)."""
        if key is None:
            return stored == config
        try:
            return bool(key(stored) == key(config))
        except ValueError:  # a stored config this version cannot read: not the same run
            return False

    @contextlib.contextmanager
    def writing(self, config: dict[str, Any], seed: int, device: str, *,
                resume: bool, threads: int | None = None,
                key: Callable[[dict[str, Any]], Any] | None = None
                ) -> Iterator[dict[str, Any] | None]:
        """:meth:`open` for the life of a ``with`` block, which gets the checkpoint.

        The lock is freed at the end; a new run that fails before its first checkpoint is
        removed (:meth:`discard`), so nothing half-written stays; Ctrl-C keeps it (resumable).
        """
        ckpt = self.open(config, seed, device, resume=resume, threads=threads, key=key)
        try:
            yield ckpt
        except KeyboardInterrupt:
            raise
        except BaseException:
            if not resume and not self.checkpoint_path.is_file():
                self.discard()
            elif resume:  # a refused or failed resume leaves no lock file it made
                self.close(remove=self._created_lock)
            raise
        else:
            self.close(remove=True)  # ended cleanly: no empty .lock stays behind
        finally:
            self.close()

    def _meta(self) -> Any:
        """``meta.json`` parsed (OSError, UnicodeDecodeError or ValueError when it cannot be)."""
        path = self.folder / "meta.json"
        return parse_json(path.read_text(), str(path))

    def plugins(self) -> list[str]:
        """The plug-ins the run was made with (``meta.json``; none when not recorded)."""
        try:
            meta = self._meta()
        except (OSError, UnicodeDecodeError, ValueError):
            return []
        found = meta.get("plugins") if isinstance(meta, dict) else None
        return [s for s in found if isinstance(s, str)] if isinstance(found, list) else []

    def check_meta(self, seed: int) -> None:
        """``meta.json`` read back: a JSON object with this run's seed (else RunFolderError)."""
        path = self.folder / "meta.json"
        try:
            meta = self._meta()
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise RunFolderError(f"{path} is damaged or missing ({str(exc)[:80]}); the run "
                                 "folder was changed after the run wrote it - restore it or "
                                 "start again with another --out") from None
        if not isinstance(meta, dict) or meta.get("seed") != seed:
            raise RunFolderError(f"{path} does not describe this run (seed {seed}); the run "
                                 "folder was changed after the run wrote it - restore it or "
                                 "start again with another --out")

    # ------------------------------------------------------------------ rows
    def config(self) -> dict[str, Any]:
        """The stored resolved configuration."""
        path = self.folder / "config.yaml"
        self._not_a_link(path)
        if not path.is_file():
            raise RunFolderError(f"{self.folder} holds no run (no config.yaml); pass a preset or "
                                 "YAML file, or --out of an existing run folder")
        try:
            raw = parse_yaml(path.read_text(), str(path))
        except UnicodeDecodeError as exc:
            raise RunFolderError(f"{path} is damaged ({type(exc).__name__})") from None
        except ConfigError as exc:
            raise RunFolderError(f"{exc} (the run folder is damaged)") from None
        if not isinstance(raw, dict):
            raise RunFolderError(f"{path} is damaged (not a mapping)")
        return as_made(raw)  # a folder written before a changed default: the value it ran with

    @staticmethod
    def _not_a_link(path: Path) -> None:
        """A run's file that is a link is read through by nothing here: one line saying so."""
        if path.is_symlink():
            raise RunFolderError(f"{path} is a link, which would be read through; a run folder's "
                                 "files are its own: copy the run folder, not links to it")

    def rows(self) -> list[dict[str, Any]]:
        """All metric rows; a damaged line is a :class:`~wirelessfl.errors.RunFolderError`."""
        self._not_a_link(self.metrics_path)
        if not self.metrics_path.is_file():
            return []
        try:
            text = self.metrics_path.read_text()
        except UnicodeDecodeError:
            raise RunFolderError(f"{self.metrics_path} {DAMAGED}") from None
        return parse_rows(text, str(self.metrics_path))

    def check_rows(self, rows: list[dict[str, Any]], expected: list[Any], key) -> None:
        """Refuse rows whose ``key(row)`` sequence is not ``expected`` (gaps, duplicates)."""
        got = [key(r) for r in rows]
        if got != expected:
            missing = [e for e in expected if e not in got][:3]
            dup = sorted({g for g in got if got.count(g) > 1}, key=str)[:3]
            what = (f"missing {missing}" if missing else f"duplicated {dup}" if dup
                    else f"out of order or extra: {got[:5]}")
            raise RunFolderError(f"--resume: {self.metrics_path} does not match the checkpoint "
                                 f"({what}); the folder is damaged: start the run again with "
                                 "another --out")

    def append(self, row: dict[str, Any]) -> None:
        """Append one metrics row, flush it to disk, extend the CSV.

        JSON has no NaN or Infinity: a non-finite number is written as null.

        The CSV gets one more line when the row brings no new column, and is rewritten
        otherwise (so appending stays cheap for runs with thousands of evaluations).
        """
        with open_append(self.metrics_path) as fh:
            fh.write(row_line(row))
            fh.flush()
            os.fsync(fh.fileno())
        if self._csv_keys is not None and set(row) <= set(self._csv_keys):
            with open_append(self.folder / "metrics.csv") as fh:
                csv.DictWriter(fh, fieldnames=self._csv_keys).writerow(_csv_row(row))
        else:
            self._write_csv(self.rows())

    def keep(self, rows: list[dict[str, Any]]) -> None:
        """Replace the metric rows by ``rows`` (the ones a checkpoint had seen)."""
        atomic_write(self.metrics_path,
                     lambda fh: fh.write("".join(map(row_line, rows)).encode()))
        self._write_csv(rows)

    def _write_csv(self, rows: list[dict[str, Any]]) -> None:
        self._csv_keys = write_csv(self.folder / "metrics.csv", rows)

    def save_checkpoint(self, payload: dict[str, Any]) -> None:
        """Write the checkpoint atomically, as plain data (numpy values become Python/torch)."""
        payload = _plain(payload)
        atomic_write(self.checkpoint_path, lambda fh: torch.save(payload, fh))

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The last checkpoint, or None."""
        if not self.checkpoint_path.is_file():
            return None
        ckpt = load_plain(self.checkpoint_path, "checkpoint")
        if not isinstance(ckpt, dict):
            raise RunFolderError(f"checkpoint {self.checkpoint_path} is damaged (not a mapping)")
        return ckpt

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write ``summary.json`` (a finished run: any record of an earlier divergence goes)."""
        self._replace_file("summary.json", lambda fh: fh.write(summary_text(summary).encode()))
        gone = self.folder / "diverged.json"
        if gone.is_dir() and not gone.is_symlink():
            raise RunFolderError(f"{gone} is a folder where the run keeps its divergence record; "
                                 "remove it and resume the run")
        gone.unlink(missing_ok=True)

    def mark_diverged(self, reason: str) -> None:
        """Record that training diverged after the last row (``diverged.json``: round, reason).

        A figure draws such a run as diverged instead of waiting for it; rerunning it from
        its last checkpoint diverges again (the same numbers), so it is not retrained.
        """
        rows = self.rows()
        record = {"round": int(rows[-1].get("round", 0)) + 1 if rows else 1,
                  "reason": str(reason).splitlines()[0][:500] if str(reason) else "diverged"}
        self._replace_file("diverged.json",
                           lambda fh: fh.write((json.dumps(record, indent=2) + "\n").encode()))

    def _replace_file(self, name: str, write: Any) -> None:
        """:func:`atomic_write` of the folder's ``name``; a folder or link planted there is one line."""
        path = self.folder / name
        if path.is_symlink() or path.is_dir():
            raise RunFolderError(f"{path} is a {'link' if path.is_symlink() else 'folder'} where "
                                 f"the run writes its {name}; remove it and resume the run")
        atomic_write(path, write)

    def diverged(self) -> dict[str, Any] | None:
        """The divergence record (the round whose training diverged, why), if the run diverged."""
        return self._json("diverged.json")

    def summary(self) -> dict[str, Any] | None:
        """The stored summary, if the run finished."""
        return self._json("summary.json")

    def _json(self, name: str) -> dict[str, Any] | None:
        """The folder's JSON object ``name``; None if missing, a link, damaged or not an object."""
        path = self.folder / name
        if not path.is_file() or path.is_symlink():
            return None
        try:
            got = parse_json(path.read_text(), str(path))
        except (ConfigError, UnicodeDecodeError):
            return None
        return got if isinstance(got, dict) else None


def row_line(row: dict[str, Any]) -> str:
    """One line of ``metrics.jsonl``: the row as JSON, a non-finite number as null."""
    return json.dumps(_finite_json(row), allow_nan=False) + "\n"


def summary_text(summary: dict[str, Any]) -> str:
    """The text of ``summary.json``: indented JSON, a non-finite number as null."""
    return json.dumps(_finite_json(summary), indent=2, allow_nan=False) + "\n"


def _finite_json(value: Any) -> Any:
    """``value`` with non-finite floats as None (JSON has no NaN or Infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and arrays as tensors (weights_only-safe)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value).copy())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _csv_row(row: dict[str, Any], blank_nan: bool = False) -> dict[str, Any]:
    """A row's cells as CSV takes them: lists and mappings as JSON, NaN blank if asked."""
    return {k: json.dumps(v) if isinstance(v, (list, dict)) else
            "" if blank_nan and isinstance(v, float) and math.isnan(v) else v
            for k, v in row.items()}


def write_csv(path: Path, rows: list[dict[str, Any]], *, blank_nan: bool = False) -> list[str]:
    """Write ``rows`` as a CSV file atomically (the union of their keys as columns, in order).

    Lists and mappings are written as JSON; with ``blank_nan`` a NaN is an empty cell (the
    report's tables) instead of ``nan`` (a run's ``metrics.csv``). Returns the columns.
    """
    keys = list(dict.fromkeys(k for r in rows for k in r))

    def write(fh: Any) -> None:
        text = io.StringIO(newline="")
        w = csv.DictWriter(text, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow(_csv_row(r, blank_nan))
        fh.write(text.getvalue().encode())

    atomic_write(path, write)
    return keys


def first_reaching(rows: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    """The first row whose test accuracy is ≥ ``target`` (``docs/papers/hist.md`` §6.6)."""
    return next((r for r in rows if is_number(r.get("test_accuracy")) and r["test_accuracy"] >= target),
                None)


def is_number(x: object) -> bool:
    """Whether ``x`` is a JSON number (an int or float, not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)
