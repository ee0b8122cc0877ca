"""Run records: one folder per run.

Contents:

- ``config.yaml`` — the resolved configuration (re-runnable as it is);
- ``meta.json`` — seed, package version, git commit, start time, device;
- ``metrics.jsonl`` — one JSON row per evaluation, appended (and flushed) as it happens:
  ``round``, ``sim_time_s`` (if the algorithm models time), cumulative
  ``uplink_params_per_client`` and ``uplink_mb_per_client``, ``test_accuracy``,
  ``test_loss``, ``train_loss``, plus algorithm extras;
- ``metrics.csv`` — the same rows as a table, rewritten after each row;
- ``checkpoint.pt`` — the state after the last completed round (written atomically);
- ``summary.json`` — final and best accuracy, time/uplink to the target, wall time.

MB are 4-byte parameters / 2^20, as in ``specs/hist.md`` §6.2 and §6.6.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import torch
import yaml

import wirelessfl

BYTES_PER_PARAM = 4
MB = 2**20


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


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


class RunRecord:
    """Reader and writer of one run folder."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._csv_keys: list[str] | None = None  # the CSV's columns, once written here

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

    def create(self, config: dict[str, Any], seed: int, device: str) -> None:
        """Make the folder and write the config and metadata (no metrics yet)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        meta = {"seed": seed, "version": wirelessfl.__version__, "git_commit": git_commit(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "device": device,
                "torch": torch.__version__}
        (self.folder / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        self.metrics_path.write_text("")

    def open(self, config: dict[str, Any], seed: int, device: str, *,
             resume: bool) -> dict[str, Any] | None:
        """Start a run here, or with ``resume`` continue the one here; its last checkpoint.

        A new run needs an empty folder; a resumed one must hold a run of the same resolved
        ``config``. Raises :class:`~wirelessfl.config.ConfigError` (nothing written) otherwise.
        """
        from wirelessfl.config import ConfigError  # config imports the algorithms, not us

        if not resume:
            if self.exists():
                raise ConfigError(f"run folder {self.folder} already holds a run; pass --resume "
                                  "to continue it or --out to choose another folder")
            self.create(config, seed, device)
            return None
        if not self.exists():
            raise ConfigError(f"--resume: {self.folder} holds no run; drop --resume to start one")
        if self.config() != config:
            raise ConfigError(f"--resume: {self.folder} was made with a different config; resume "
                              "with the same preset and --set values (or no preset at all)")
        return self.load_checkpoint()

    def config(self) -> dict[str, Any]:
        """The stored resolved configuration."""
        return yaml.safe_load((self.folder / "config.yaml").read_text())

    def rows(self) -> list[dict[str, Any]]:
        """All metric rows."""
        if not self.metrics_path.is_file():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line]

    def append(self, row: dict[str, Any]) -> None:
        """Append one metrics row, flush it to disk, extend the CSV.

        The CSV gets one more line when the row brings no new column, and is rewritten
        otherwise (so appending stays cheap for runs with thousands of evaluations).
        """
        with open(self.metrics_path, "a") as fh:
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if self._csv_keys is not None and set(row) <= set(self._csv_keys):
            with open(self.folder / "metrics.csv", "a", newline="") as fh:
                csv.DictWriter(fh, fieldnames=self._csv_keys).writerow(_csv_row(row))
        else:
            self._write_csv(self.rows())

    def truncate(self, last_round: int) -> None:
        """Drop rows after ``last_round`` (rows written after the last checkpoint)."""
        self.keep([r for r in self.rows() if r["round"] <= last_round])

    def keep(self, rows: list[dict[str, Any]]) -> None:
        """Replace the metric rows by ``rows`` (the ones a checkpoint had seen)."""
        _atomic_write(self.metrics_path,
                      lambda p: p.write_text("".join(json.dumps(r) + "\n" for r in rows)))
        self._write_csv(rows)

    def _write_csv(self, rows: list[dict[str, Any]]) -> None:
        keys: list[str] = []
        for r in rows:
            keys.extend(k for k in r if k not in keys)

        def write(p: Path) -> None:
            with open(p, "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=keys)
                w.writeheader()
                for r in rows:
                    w.writerow(_csv_row(r))

        _atomic_write(self.folder / "metrics.csv", write)
        self._csv_keys = keys

    def save_checkpoint(self, payload: dict[str, Any]) -> None:
        """Write the checkpoint atomically."""
        _atomic_write(self.checkpoint_path, lambda p: torch.save(payload, p))

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The last checkpoint, or None."""
        if not self.checkpoint_path.is_file():
            return None
        return torch.load(self.checkpoint_path, weights_only=False)

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write ``summary.json``."""
        _atomic_write(self.folder / "summary.json",
                      lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))

    def summary(self) -> dict[str, Any] | None:
        """The stored summary, if the run finished."""
        path = self.folder / "summary.json"
        return json.loads(path.read_text()) if path.is_file() else None


def _csv_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()}


def first_reaching(rows: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    """The first row whose test accuracy is ≥ ``target`` (``specs/hist.md`` §6.6)."""
    return next((r for r in rows if r["test_accuracy"] >= target), None)
