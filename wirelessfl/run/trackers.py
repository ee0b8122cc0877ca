"""Run trackers: the rows a run folder holds, also sent to TensorBoard, MLflow or W&B.

``wirelessfl run ... --tracker tensorboard --tracker mlflow`` (or ``trackers=[...]`` of
:func:`wirelessfl.run_job`). The run folder stays the source of truth; a tracker receives
each metrics row as it is appended (numbers only; multi-task rows as ``TASK/metric``), the
resolved config once, and the run's end. Everything is written inside the run folder unless
the user points a tracker elsewhere:

- ``tensorboard``: event files in ``RUN/tensorboard/`` (``tensorboard --logdir RUN``);
- ``mlflow``: the run in ``$MLFLOW_TRACKING_URI`` if set, else in ``RUN/mlflow.db``
  (``mlflow ui --backend-store-uri sqlite:///RUN/mlflow.db``); a resumed run continues
  the same MLflow run (its id is kept in ``RUN/mlflow_run_id``);
- ``wandb``: Weights & Biases, offline in ``RUN/wandb/`` unless ``$WANDB_MODE`` says
  otherwise (``wandb sync`` uploads it).

Each needs its library (``pip install -e '.[track]'``; W&B: ``pip install wandb``); a missing
one is refused with one line before the run starts.
"""

from __future__ import annotations

import logging
import math
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import yaml
from typing_extensions import override

from wirelessfl.errors import ConfigError, short
from wirelessfl.run.safe_io import atomic_write, refuse_link

TRACKERS = ("tensorboard", "mlflow", "wandb")


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row, multi-task ones as ``TASK/metric``."""
    prefix = f"{row['task']}/" if isinstance(row.get("task"), str) else ""
    return {f"{prefix}{k}": float(v) for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and k not in ("round",)}


def step_of(row: dict[str, Any], index: int) -> int:
    """The row's step: its round, else its position."""
    r = row.get("round")
    return r if isinstance(r, int) and not isinstance(r, bool) else index


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = str(v)[:500]
    return out


def _own_folder(path: Path) -> Path:
    """``path``, a tracker's folder inside the run folder, made if missing.

    Refused if it is a link (nothing is written through one), not a folder, or not writable.
    """
    refuse_link(path)  # the project's one link check (nothing is written through one)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{path} exists and is not a folder: remove it")
    path.mkdir(exist_ok=True)
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{path} is not writable: fix its permissions or remove it")
    return path


def _own_file(path: Path) -> Path:
    """``path``, a tracker's file inside the run folder (it may not exist yet).

    Refused if it is a link or a folder.
    """
    refuse_link(path)  # the project's one link check (nothing is written through one)
    if path.exists() and not path.is_file():
        raise ConfigError(f"{path} exists and is not a file: remove it")
    return path


#: Seconds an MLflow tracking server has to answer, and its retries, unless the environment
#: sets them (MLflow's own defaults, 120 s and 7 retries with back-off, hung a run for
#: minutes on an unreachable server).
MLFLOW_TIMEOUT_S, MLFLOW_RETRIES = 10, 0


#: Seconds a tracking server's address has to accept a connection.
CONNECT_TIMEOUT_S = 3.0


def _answers(uri: str) -> None:
    """Refuse an ``http(s)://`` tracking URI whose host accepts no connection in seconds.

    Within :data:`CONNECT_TIMEOUT_S` (an unreachable server cost a run its timeout and
    MLflow's import: 26.5 s against 10.2 s without a tracker). Other schemes pass.
    """
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname or "", port), timeout=CONNECT_TIMEOUT_S):
            pass
    except (OSError, ValueError) as exc:
        raise ConfigError(f"MLFLOW_TRACKING_URI {parts.scheme}://{parts.netloc} does not answer "
                          f"within {CONNECT_TIMEOUT_S:g} s ({type(exc).__name__})") from None


class Tracker(ABC):
    """One tracker: opened with the run, fed every row, closed at its end.

    ``open`` raising anything (its library, a bad setting, a link where it writes) leaves the
    run going without it, with one line saying why
    (:func:`open_trackers`).
    """

    name: str

    @abstractmethod
    def open(self, folder: Path, run_name: str, config: dict[str, Any], resume: bool) -> None:
        """Start (or, on resume, continue) the tracker's run."""

    @abstractmethod
    def log(self, row: dict[str, Any], step: int) -> None:
        """One metrics row."""

    @abstractmethod
    def close(self, finished: bool) -> None:
        """End the tracker's run (``finished``: the run completed)."""


class TensorBoard(Tracker):
    """Scalars to ``RUN/tensorboard/`` with :class:`torch.utils.tensorboard.SummaryWriter`."""

    name = "tensorboard"

    @override
    def open(self, folder: Path, run_name: str, config: dict[str, Any], resume: bool) -> None:
        from torch.utils.tensorboard import SummaryWriter

        logdir = _own_folder(folder / "tensorboard")
        probe = logdir / ".write-check"   # its writer thread would fail later, with a traceback
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0))
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(f"{logdir} cannot be written ({exc.strerror})") from None
        self.writer = SummaryWriter(log_dir=str(logdir))
        if not resume:
            self.writer.add_text("config", "```\n" + yaml.safe_dump(config, sort_keys=False) + "```")

    @override
    def log(self, row: dict[str, Any], step: int) -> None:
        for k, v in scalars(row).items():
            self.writer.add_scalar(k, v, step)

    @override
    def close(self, finished: bool) -> None:
        self.writer.close()


class MLflow(Tracker):
    """Params and metrics to an MLflow run (``$MLFLOW_TRACKING_URI`` or ``RUN/mlflow.db``)."""

    name = "mlflow"

    @override
    def open(self, folder: Path, run_name: str, config: dict[str, Any], resume: bool) -> None:
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri:  # a server that does not answer: known in seconds, before MLflow's import
            _answers(uri)
        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # no table-creation chatter
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(MLFLOW_TIMEOUT_S))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(MLFLOW_RETRIES))
        if not uri:  # the run folder's own database: never written through a link
            uri = f"sqlite:///{_own_file(folder.resolve() / 'mlflow.db')}"
        self.client = MlflowClient(tracking_uri=uri)
        id_file = _own_file(folder / "mlflow_run_id")
        if resume and id_file.is_file():
            self.run_id = id_file.read_text(errors="replace").strip()
            if not (self.run_id.isalnum() and len(self.run_id) <= 64):
                raise ConfigError(f"{id_file} does not hold an MLflow run id: remove it to start "
                                  "a new MLflow run")
            self.client.update_run(self.run_id, status="RUNNING")
            return
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "wirelessfl")
        if not name or len(name) > 500:
            raise ConfigError("MLFLOW_EXPERIMENT_NAME must be 1 to 500 characters, got "
                              f"{len(name)}")
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
        run = self.client.create_run(exp_id, run_name=run_name, tags={"run_folder": str(folder)})
        self.run_id = run.info.run_id
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in _flat(config).items()]
        for i in range(0, len(params), 100):
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        atomic_write(id_file, lambda fh: fh.write(self.run_id.encode()))

    @override
    def log(self, row: dict[str, Any], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in scalars(row).items()]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    @override
    def close(self, finished: bool) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED" if finished else "KILLED")


class WandB(Tracker):
    """Rows to a Weights & Biases run, offline in ``RUN/wandb/`` unless ``$WANDB_MODE`` is set."""

    name = "wandb"

    @override
    def open(self, folder: Path, run_name: str, config: dict[str, Any], resume: bool) -> None:
        import wandb

        id_file = _own_file(folder / "wandb_run_id")
        _own_folder(folder / "wandb")
        run_id = (id_file.read_text(errors="replace").strip() if resume and id_file.is_file()
                  else wandb.util.generate_id())
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "wirelessfl"), name=run_name,
                              id=run_id, resume="allow", dir=str(folder), config=config,
                              mode=os.environ.get("WANDB_MODE", "offline"))
        if not id_file.is_file():
            atomic_write(id_file, lambda fh: fh.write(run_id.encode()))

    @override
    def log(self, row: dict[str, Any], step: int) -> None:
        self.run.log(scalars(row), step=step)

    @override
    def close(self, finished: bool) -> None:
        self.run.finish(exit_code=0 if finished else 1)


_CLASSES = {"tensorboard": (TensorBoard, "tensorboard"), "mlflow": (MLflow, "mlflow"),
            "wandb": (WandB, "wandb")}


def make_trackers(names: list[str] | tuple[str, ...] | None) -> list[Tracker]:
    """Trackers by name, each library checked now (ConfigError of one line if missing)."""
    import importlib.util

    out: list[Tracker] = []
    for n in names or ():
        if n not in _CLASSES:
            raise ConfigError(f"unknown tracker {short(n)}; choose from {', '.join(TRACKERS)}")
        cls, module = _CLASSES[n]
        if importlib.util.find_spec(module) is None:
            extra = "pip install wandb" if n == "wandb" else "pip install -e '.[track]'"
            raise ConfigError(f"--tracker {n} needs the {module} package: {extra}")
        if any(isinstance(t, cls) for t in out):
            raise ConfigError(f"--tracker {n} is given twice")
        out.append(cls())
    return out


def open_trackers(trackers: list[Tracker], folder: Path, run_name: str, config: dict[str, Any],
                  resume: bool) -> list[Tracker]:
    """The trackers that opened; each that failed is named on stderr in one line, with why.

    The run folder is the record, so a tracker that cannot start (an unreachable or bad
    ``MLFLOW_TRACKING_URI``, a damaged id file, a link planted where it writes) leaves the
    run going without it.
    """
    import sys

    opened = []
    for t in trackers:
        try:
            t.open(folder, run_name, config, resume)
            opened.append(t)
        except Exception as exc:  # noqa: BLE001 - any failure of a tracker's library or setting
            why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            print(f"wirelessfl: note: tracker {t.name} did not start ({why}); the run goes on "
                  "without it (its rows are in the run folder)", file=sys.stderr)
    return opened
