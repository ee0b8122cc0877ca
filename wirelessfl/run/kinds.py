"""The one place that decides what kind of run a config describes, and opens it.

Two kinds of run exist, each behind the :class:`RunKind` interface:

- **rounds** (:mod:`wirelessfl.run.rounds`): one model trained round by round by a
  registered round-based algorithm (every paper but FedAST); a dynamic population makes it
  a run of sessions (dynamic clients), still round by round;
- **multitask** (:mod:`wirelessfl.run.multitask`): several tasks on one client pool in
  simulated time (FedAST, Sync-ST, centralized), recognised by a ``tasks`` list.

Each kind resolves a raw mapping (YAML, ``--set`` applied) into its typed config, writes it
back as a plain mapping, and opens a :class:`~wirelessfl.run.shell.Job` that
:func:`~wirelessfl.run.shell.execute` runs into a run folder (the summary is the job's).
The CLI (``run``, ``retime``), figures and sweeps all go through :func:`open_run`,
:func:`resolve_config` and :func:`canonical`, so none of them asks which kind it holds.

Examples
--------
>>> kind_of({"rounds": 3}).name, kind_of({"tasks": ["fmnist_lenet5"]}).name
('rounds', 'multitask')
>>> canonical({"rounds": 3})["algorithm"]["name"]
'fedavg'
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from typing_extensions import override

from wirelessfl.run import config as single
from wirelessfl.run import multitask
from wirelessfl.run.records import RunRecord, first_reaching
from wirelessfl.run.shell import Job, execute
from wirelessfl.run.trackers import make_trackers


class RunKind(ABC):
    """A kind of run: how its config is recognised, resolved, written back and opened.

    Its capabilities are class attributes, read by the command line instead of its name:
    ``retimable`` (``wirelessfl retime`` can clock a finished run again under another link:
    its rows carry per-round costs) and ``deterministic`` (``--deterministic`` applies:
    PyTorch's deterministic algorithms around a run in one process).
    """

    name: str
    retimable: bool = False
    deterministic: bool = False

    @abstractmethod
    def matches(self, raw: dict[str, Any]) -> bool:
        """Whether the raw mapping describes a run of this kind."""

    @abstractmethod
    def resolve(self, raw: dict[str, Any]) -> Any:
        """The typed config (every key and type checked; ``ConfigError`` otherwise)."""

    @abstractmethod
    def to_dict(self, cfg: Any) -> dict[str, Any]:
        """The typed config as a plain mapping (round-trips through :meth:`resolve`)."""

    @abstractmethod
    def open(self, cfg: Any, *, checkpoint_every_s: float, lockstep: Any = None,
             executor_wrap: Any = None) -> Job:
        """The run, built and validated (data, model, algorithm), before anything is written.

        ``lockstep``: a :class:`~wirelessfl.engine.lockstep.Lockstep` group the run trains in
        (a kind whose runs cannot join one refuses it); ``executor_wrap``: what wraps its
        client engine (``--estimate``'s sampled training; refused likewise).
        """

    def cut_at_target(self, cfg: Any, rows: list[dict[str, Any]]
                      ) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
        """Rows and summary of ``cfg``, a run stopping at its target, cut from its twin's ``rows``.

        The twin is the same run made without stopping. None (the default) where this kind
        cannot tell them from those rows, so such a run trains
        (:mod:`~wirelessfl.report.archive`).
        """
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Rounds(RunKind):
    """Round-based runs (:class:`~wirelessfl.run.config.RunConfig`)."""

    name = "rounds"
    retimable = True
    deterministic = True

    @override
    def matches(self, raw: dict[str, Any]) -> bool:
        return not multitask.is_multitask(raw)

    @override
    def resolve(self, raw: dict[str, Any]) -> single.RunConfig:
        return single.resolve(raw)

    @override
    def to_dict(self, cfg: single.RunConfig) -> dict[str, Any]:
        return single.to_dict(cfg)

    @override
    def open(self, cfg: single.RunConfig, *, checkpoint_every_s: float,
             lockstep: Any = None, executor_wrap: Any = None) -> Job:
        from wirelessfl.run.rounds import RoundsJob, prepare

        return RoundsJob(prepare(cfg, lockstep=lockstep, executor_wrap=executor_wrap))

    @override
    def cut_at_target(self, cfg: single.RunConfig, rows: list[dict[str, Any]]
                      ) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
        """The twin's rows up to the first reaching the target, and their summary.

        Nothing a round draws or computes depends on whether the run will stop at its target
        (:meth:`~wirelessfl.run.rounds.RoundsJob.advance` only ends the loop), so the run
        that stops has the twin's rows up to the first that reaches the target (all of them
        when none does), and the summary of those rows, at the wall time of the last.
        """
        from wirelessfl.run.rounds import summarize

        if not cfg.stop_at_target or cfg.target_accuracy is None or not rows:
            return None
        hit = first_reaching(rows, cfg.target_accuracy)
        kept = rows if hit is None else rows[:rows.index(hit) + 1]
        return kept, summarize(cfg, kept, float(kept[-1].get("wall_s") or 0.0))


class MultiTask(RunKind):
    """Multi-task runs in simulated time (:class:`~wirelessfl.run.multitask.MultiTaskConfig`)."""

    name = "multitask"

    @override
    def matches(self, raw: dict[str, Any]) -> bool:
        return multitask.is_multitask(raw)

    @override
    def resolve(self, raw: dict[str, Any]) -> multitask.MultiTaskConfig:
        return multitask.resolve_multitask(raw)

    @override
    def to_dict(self, cfg: multitask.MultiTaskConfig) -> dict[str, Any]:
        return multitask.multitask_to_dict(cfg)

    @override
    def open(self, cfg: multitask.MultiTaskConfig, *, checkpoint_every_s: float,
             lockstep: Any = None, executor_wrap: Any = None) -> Job:
        if lockstep is not None:
            raise single.ConfigError("a multi-task run cannot train in a lockstep group; "
                                     "run it alone (--batch-runs 1)")
        if executor_wrap is not None:
            raise single.ConfigError("a multi-task run's client engines cannot be wrapped "
                                     "(its tasks build their own)")
        return multitask.SimulationJob(cfg, checkpoint_every_s)


#: Every kind, the first that matches wins.
KINDS: tuple[RunKind, ...] = (MultiTask(), Rounds())


def kind_of(config: dict[str, Any] | single.RunConfig | multitask.MultiTaskConfig) -> RunKind:
    """The kind of a raw mapping or of a typed config."""
    if isinstance(config, single.RunConfig):
        return KINDS[1]
    if isinstance(config, multitask.MultiTaskConfig):
        return KINDS[0]
    if not isinstance(config, dict):
        raise single.ConfigError(f"a config must be a mapping, got {type(config).__name__}")
    return next(k for k in KINDS if k.matches(config))


def resolve_config(raw: dict[str, Any]) -> single.RunConfig | multitask.MultiTaskConfig:
    """The typed config of a raw mapping of any kind."""
    return kind_of(raw).resolve(raw)


def canonical(raw: dict[str, Any]) -> dict[str, Any]:
    """The resolved config of a raw mapping of any kind, as a plain mapping."""
    kind = kind_of(raw)
    return kind.to_dict(kind.resolve(raw))


def open_run(config: dict[str, Any] | single.RunConfig | multitask.MultiTaskConfig, *,
             checkpoint_every_s: float = 60.0, lockstep: Any = None,
             executor_wrap: Any = None) -> Job:
    """The run a config describes, built and checked, ready for :func:`run_job`.

    Parameters
    ----------
    config : mapping or typed config
        A raw mapping (a preset or YAML file with overrides applied) or a resolved config.
    checkpoint_every_s : float
        Multi-task runs: write a snapshot after a round once this many wall seconds have
        passed (0: every round). Round-based runs checkpoint every ``checkpoint_every`` rounds.
    lockstep : Lockstep, optional
        A group of runs trained as one computation
        (:class:`~wirelessfl.engine.lockstep.Lockstep`); this run joins it.
    executor_wrap : callable, optional
        Wraps the run's client engine (an :class:`~wirelessfl.engine.loop.Executor` in, one
        out): ``--estimate`` trains a sample of each round's clients
        (:class:`~wirelessfl.engine.sampled.SampledExecutor`).

    Raises
    ------
    ValueError
        A :class:`~wirelessfl.errors.ConfigError` or a data error, for any bad input;
        nothing is written.
    """
    kind = kind_of(config)
    cfg = config if not isinstance(config, dict) else kind.resolve(config)
    return kind.open(cfg, checkpoint_every_s=checkpoint_every_s, lockstep=lockstep,
                     executor_wrap=executor_wrap)


def run_job(job: Job, out: str | Path, *, resume: bool = False, quiet: bool = False,
            trackers: list[str] | None = None) -> dict[str, Any]:
    """Run ``job`` into run folder ``out`` (locked, never overwritten); return its summary.

    Without ``resume``, ``out`` must not exist or be empty; with it, ``out`` must hold a run
    of the same resolved config, which continues from its checkpoint and ends with the
    numbers of an uninterrupted run. ``trackers`` names run trackers (``tensorboard``,
    ``mlflow``, ``wandb``: :mod:`wirelessfl.run.trackers`) that also receive the rows.
    """
    return execute(RunRecord(out), job, resume=resume, quiet=quiet,
                   trackers=make_trackers(trackers))
