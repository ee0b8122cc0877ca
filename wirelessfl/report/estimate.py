"""How long a figure set takes on this machine: ``wirelessfl figures PAPER --estimate``.

Each distinct setting of a figure (its panel, series and sweep value; seeds cost the same,
and so do settings that differ only in :data:`COST_NEUTRAL` keys, such as a learning rate
or a Dirichlet α: :func:`cost_key`) is timed on random tensors of its dataset's shapes
(:func:`stand_in`), so the estimate needs no dataset files: the runs of CIFAR-100 or Tiny
ImageNet figures are timed on a machine that does not hold them.

A setting is first probed: one round in which each engine call trains random clients for
:data:`PROBE_CALL_S`, each for at most :data:`PROBE_STEPS` local steps
(:class:`~wirelessfl.engine.sampled.SampledExecutor`, whose eq. (1) scales their seconds to
their own steps and to every client), its evaluation timed apart on :data:`EVAL_SAMPLE`
samples and scaled to the real test set. A setting whose probed round takes
:data:`PROBE_KEEP_S` or more (a ResNet on CIFAR on a CPU) keeps the probe's cost,

    run = start + rounds × training round + evaluations × evaluation;

a shorter one is timed whole, by its rows' clock: a first round of :data:`LONG_ROUND_S` or
more alone, else the rounds after the first (up to ``sample_rounds``, fewer once they have
taken :data:`SAMPLE_S`), at

    run = start + rounds × seconds per round.

A figure's time sums its runs still to do: an upper bound for runs that stop at their
target.

A multi-task run in simulated time (FedAST) is timed by :func:`_time_multitask`: its
simulation runs on stand-ins with sampled training for :data:`MULTI_S` seconds, and the cost
of its simulated time after the first half of that sample is extrapolated to the run's end,

    run = cost(T_end) + (H − T_end) · (cost(T_end) − cost(T_mid)) / (T_end − T_mid),

``H`` its ``max_time``, or :data:`STOP_HORIZON` for a run that stops at its targets (a time
nobody knows ahead), and its ``max_rounds`` where those come first.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wirelessfl.data import datasets
from wirelessfl.data.arrays import ArrayDataset, DatasetSplits
from wirelessfl.engine.evaluate import evaluate
from wirelessfl.engine.sampled import SampledExecutor
from wirelessfl.errors import TrainingDiverged
from wirelessfl.report.data_shapes import SHAPES
from wirelessfl.report.metrics import group_runs
from wirelessfl.report.spec import Figure, RunSpec, flat_settings, missing_runs
from wirelessfl.run.kinds import canonical, open_run
from wirelessfl.run.multitask import build_simulator, resolve_multitask
from wirelessfl.run.records import RunRecord
from wirelessfl.run.shell import execute

#: A setting whose first round takes at least this many seconds is timed by that round alone
#: (its warm-up, a few allocations and lazy initialisations, is then a small part of it);
#: a shorter one by up to ``sample_rounds`` rounds after the first, fewer once they have
#: taken :data:`SAMPLE_S`. HIST's paper-scale settings took 1-13 s a round on 2 CPU cores,
#: its CIFAR-10 ones 64 s.
LONG_ROUND_S, SAMPLE_S = 10.0, 5.0

#: A setting whose probed round (sampled training and a full evaluation) takes at least this
#: many seconds keeps the probe's cost; a shorter one is timed whole.
PROBE_KEEP_S = 10.0

#: Seconds each engine call of a probe trains before it estimates its other clients
#: (:class:`~wirelessfl.engine.sampled.SampledExecutor`).
PROBE_CALL_S = 1.0

#: Local steps a probe's trained client takes at most, its seconds scaled to its own steps
#: (a client's 60 steps of a ResNet-18: 45 s on 2 CPU cores).
PROBE_STEPS = 2

#: A stand-in's training set is capped at this many bytes (Tiny ImageNet's would be 4.9 GB);
#: a round's cost does not depend on it when clients take a fixed number of steps.
MAX_TRAIN_BYTES = 2**30


#: Test samples of a probe's stand-in (:func:`_time_setting`), and the samples an
#: evaluation is timed on apart, then scaled to the real test set's size (GPT-2 small
#: evaluates 100 samples of 128 tokens in about 20 s on 2 CPU cores).
EVAL_RUN, EVAL_SAMPLE = 8, 100


#: Text dataset → (train samples, test samples, classes) of the real sets; a sample is the
#: run's ``data.max_length`` token ids (GLUE's test labels are hidden: its dev set tests).
TEXT_SHAPES: dict[str, tuple[int, int, int]] = {
    "ag_news": (120_000, 7_600, 4),
    "20newsgroups": (11_314, 7_532, 20),
    "sst2": (67_349, 872, 2),
    "qnli": (104_743, 5_463, 2),
    "qqp": (363_846, 40_430, 2),
}

#: Token ids a text stand-in draws from: inside BERT's (30,522) and GPT-2's (50,257)
#: vocabularies.
TEXT_VOCAB = 30_000

#: LEAF Shakespeare (4,226,158 windows of 80 characters over 1,129 roles, split 80/20):
#: (train, test, window, characters).
SHAKESPEARE = (3_380_926, 845_232, 80, 80)


#: Wall seconds a multi-task run's simulation is sampled for (:func:`_time_multitask`).
MULTI_S = 15.0

#: Simulated time a multi-task run that stops at its targets is estimated to: FedAST's
#: finish times in the paper are about 99 and 619 (Fig. 7), Sync-ST's up to 1/(1 − 0.46)
#: times FedAST's (its largest gain, E4), and E2/E3/E9 train for a fixed 1,000.
STOP_HORIZON = 2_000.0


def real_test_size(dataset: str) -> int:
    """Test samples of ``dataset``'s real files (0: not known here)."""
    if dataset in SHAPES:
        return SHAPES[dataset][1]
    if dataset in TEXT_SHAPES:
        return TEXT_SHAPES[dataset][1]
    return SHAKESPEARE[1] if dataset == "shakespeare" else 0


def stand_in(dataset: str, test: int | None = None, length: int = 128,
             clients: int = 100) -> str | None:
    """The registered name of random tensors shaped as ``dataset`` (None: no stand-in).

    Images (:data:`SHAPES`): inputs uniform in [0, 1). Text (:data:`TEXT_SHAPES`): ``length``
    token ids below :data:`TEXT_VOCAB`, unpadded. Shakespeare: 80-character windows, split
    naturally into ``clients`` equal clients. Labels are balanced over the classes, everything
    drawn from a fixed seed; the training set keeps the real size up to
    :data:`MAX_TRAIN_BYTES`, the test set the real size or ``test`` samples if fewer.
    """
    natural = False
    if dataset in SHAPES:
        train_n, test_n, shape, classes = SHAPES[dataset]
        top, tag = 0, ""
    elif dataset in TEXT_SHAPES:
        (train_n, test_n, classes), shape = TEXT_SHAPES[dataset], (int(length),)
        top, tag = TEXT_VOCAB, f"_len{int(length)}"
    elif dataset == "shakespeare":
        train_n, test_n, window, classes = SHAKESPEARE
        shape, top, tag, natural = (window,), classes, f"_c{int(clients)}", True
    else:
        return None
    if test is not None and test < test_n:
        test_n, tag = test, f"{tag}_test{test}"
    name = f"estimate_{dataset}{tag}"
    if name not in datasets.USER_DATASETS:
        train_n = min(train_n, MAX_TRAIN_BYTES // (4 * math.prod(shape)))

        def load(_: Path | None) -> DatasetSplits:
            gen = torch.Generator().manual_seed(0)

            def split(n: int) -> ArrayDataset:
                y = torch.arange(n) % classes
                x = (torch.randint(0, top, (n, *shape), generator=gen).float() if top
                     else torch.rand((n, *shape), generator=gen))
                return ArrayDataset(x, y[torch.randperm(n, generator=gen)], classes)
            parts = (tuple(np.array_split(np.arange(train_n), int(clients))) if natural
                     else None)
            return DatasetSplits(name, split(train_n), split(test_n), parts)

        datasets.register_dataset(name, load)
    return name


@dataclass(frozen=True)
class Estimate:
    """A figure's estimated time and what was not estimated.

    Its runs to do (those not counted for an earlier figure), their rounds and seconds;
    ``sampled``: how many of its settings were timed on a sample of each round's clients
    (:class:`~wirelessfl.engine.sampled.SampledExecutor`); ``simulated``: how many are
    multi-task runs in simulated time (no rounds counted; :func:`_time_multitask`).
    """

    figure: str
    runs: int
    rounds: int
    seconds: float
    note: str = ""
    sampled: int = 0
    simulated: int = 0


@dataclass(frozen=True)
class _Cost:
    """A setting's timed cost: ``start + rounds × per_round + evaluations × per_eval``."""

    start: float
    per_round: float
    per_eval: float = 0.0  # 0: each evaluation is in per_round (timed whole)
    sampled: bool = False

    def of(self, cfg: dict[str, Any]) -> float:
        """Seconds of a run of resolved config ``cfg``."""
        n, every = int(cfg["rounds"]), int(cfg.get("eval_every") or 1)
        evals = 1 + n // every + (1 if n % every else 0)  # round 0, every eval_every-th, the last
        return self.start + n * self.per_round + evals * self.per_eval

    def rounds_of(self, cfg: dict[str, Any]) -> int:
        """Rounds of a run of resolved config ``cfg``."""
        return int(cfg["rounds"])


@dataclass(frozen=True)
class _SimCost:
    """A multi-task setting's cost against its simulated time (:func:`_time_multitask`).

    ``points``: (simulated time, cost) read after each aggregation of the sample, the last at
    ``T_end``; ``per_t``: a later unit of simulated time's cost; ``rounds_per_t``:
    aggregations of all tasks per unit of simulated time (for ``max_rounds``); ``tasks``: M.
    """

    points: tuple[tuple[float, float], ...]
    per_t: float
    rounds_per_t: float
    tasks: int
    sampled: bool = True

    def horizon(self, cfg: dict[str, Any]) -> float:
        """Simulated time a run of resolved config ``cfg`` is estimated to (see the module)."""
        h = float(cfg["max_time"])
        if cfg.get("stop_at_target", True):
            h = min(h, STOP_HORIZON)
        if cfg.get("max_rounds") is not None and self.rounds_per_t > 0:
            h = min(h, int(cfg["max_rounds"]) * self.tasks / self.rounds_per_t)
        return h

    def of(self, cfg: dict[str, Any]) -> float:
        """Seconds of a run of resolved config ``cfg``: read from the sample up to ``T_end``."""
        h = self.horizon(cfg)
        t_end, c_end = self.points[-1]
        if h >= t_end:
            return c_end + self.per_t * (h - t_end)
        return next(c for t, c in self.points if t >= h)  # the first aggregation at or after H

    def rounds_of(self, cfg: dict[str, Any]) -> int:
        """Multi-task runs count simulated time, not rounds: 0."""
        return 0


#: Keys whose value does not change what a round computes (rates, Dirichlet α, which
#: samples a client holds, the seed, how many rounds): settings that differ only in them are
#: timed once (:func:`cost_key`).
COST_NEUTRAL = frozenset({
    "seed", "rounds", "name", "target_accuracy", "stop_at_target", "checkpoint_every",
    "data.alpha", "data.overlap", "data.partition", "data.unseen_labels",
    "local.lr", "local.schedule_rounds", "local.schedule_floor", "local.schedule_power",
    "algorithm.server_lr", "algorithm.beta", "algorithm.lam", "algorithm.gamma_min",
    "algorithm.snr_db", "initial_model.scale", "population.rounds_per_session",
    "population.order"})


#: A multi-task run's keys (top level, then each task's) that do not change what a unit of
#: its simulated time computes; the horizon keys are read by :meth:`_SimCost.horizon`.
COST_NEUTRAL_MULTI = frozenset({
    "seed", "name", "description", "max_time", "max_rounds", "stop_at_target",
    "method.server_lr"})
COST_NEUTRAL_TASK = frozenset({"name", "target", "local.lr", "sync_local.lr", "data.alpha"})


def cost_key(run: RunSpec) -> str:
    """The part of ``run``'s resolved config that sets a round's cost (all but :data:`COST_NEUTRAL`).

    A multi-task run's: all but :data:`COST_NEUTRAL_MULTI` and each task's
    :data:`COST_NEUTRAL_TASK`.
    """
    cfg = canonical(run.raw)
    if "tasks" in cfg:
        top = {k: v for k, v in flat_settings({**cfg, "tasks": []}).items()
               if k not in COST_NEUTRAL_MULTI}
        tasks = [{k: v for k, v in flat_settings(t).items() if k not in COST_NEUTRAL_TASK}
                 for t in cfg["tasks"]]
        return json.dumps([top, tasks], sort_keys=True, default=str)
    kept = {k: v for k, v in flat_settings(cfg).items() if k not in COST_NEUTRAL}
    return json.dumps(kept, sort_keys=True, default=str)


def estimate(figures: list[Figure], root: Path, *, sample_rounds: int = 2,
             log: Callable[[str], None] = print, isolate: bool = False) -> list[Estimate]:
    """Time a sample of every figure's settings and estimate its runs still to do.

    Settings of equal :func:`cost_key` (e.g. other learning rates or Dirichlet α) are timed
    once, also across figures. With ``isolate`` (the command line's), settings are timed in
    a worker process (:class:`Isolated`): a setting whose round does not fit this machine's
    memory is reported as such instead of ending the estimate, and the memory of a large one
    goes back to the system.
    """
    if isolate:
        with Isolated(sample_rounds) as timer:
            return _estimate(figures, root, lambda run: timer(run, log))
    return _estimate(figures, root, lambda run: _warm_then_time(run, sample_rounds, log))


def _warm_then_time(run: RunSpec, sample_rounds: int,
                    log: Callable[[str], None]) -> _Cost | str:
    """:func:`_time_setting`, after this process's warm-up on the first setting it times.

    A process's first round pays for its start: imports, PyTorch's kernels and allocator,
    the data's first placement. Timed with the first setting, it made that setting look 30×
    slower than the others on a loaded machine (27.7 s a round against 0.5-1.0 s). So the
    first setting a process times is probed once untimed before it is timed.
    """
    global _WARM
    if not _WARM and "tasks" not in run.raw:  # (a multi-task run times its own simulation)
        with tempfile.TemporaryDirectory(prefix="wirelessfl-warmup-") as tmp:
            probe_setting(run, Path(tmp) / "warm")  # (its cost, or why none, is discarded)
        _WARM = True
    return _time_setting(run, sample_rounds, log)


#: Whether this process has warmed up (:func:`_warm_then_time`).
_WARM = False


def _estimate(figures: list[Figure], root: Path,
              time_setting: Callable[[RunSpec], _Cost | str]) -> list[Estimate]:
    todo = {r.key for r in missing_runs(figures, root)}  # a run two figures share counts once
    timed: dict[str, _Cost | str] = {}  # a cost key's timing, or why not
    out = []
    for fig in figures:
        runs = list({r.key: r for r in fig.runs if r.key in todo}.values())
        total, rounds, notes, sampled, simulated = 0.0, 0, set(), set(), set()
        for group in group_runs(fig).values():
            mine = list({r.key: r for r in group if r.key in todo}.values())
            todo -= {r.key for r in mine}
            if not mine:
                continue
            key = cost_key(mine[0])
            if key not in timed:
                timed[key] = time_setting(mine[0])
            cost = timed[key]
            if isinstance(cost, str):
                notes.add(cost)
                continue
            if cost.sampled:
                sampled.add(key)
            if isinstance(cost, _SimCost):
                simulated.add(key)
            for r in mine:
                cfg = canonical(r.raw)
                total, rounds = total + cost.of(cfg), rounds + cost.rounds_of(cfg)
        out.append(Estimate(fig.name, len(runs), rounds, total, "; ".join(sorted(notes)),
                            len(sampled), len(simulated)))
    return out


#: A worker that holds more than this share of the machine's memory after a setting is
#: replaced by a fresh one (freed tensors stay in the allocator's arenas otherwise: three
#: paper-scale RA-Fed settings in one process held 17 GB, and a fourth was killed).
RESTART_SHARE = 0.25


class Isolated:
    """Times settings in one spawned worker process at a time (``estimate(isolate=True)``).

    The worker loads the command's plug-ins and uses every core. A worker that dies while it
    times a setting (the system's out-of-memory killer) makes that setting a note, and the
    next setting gets a new worker; so does one that holds more than :data:`RESTART_SHARE`
    of the memory afterwards. Ctrl-C or an error stops the worker (``with`` block).

    Parameters
    ----------
    sample_rounds : int
        As :func:`estimate`'s.
    work : callable
        What the worker runs for a setting: ``work(run, sample_rounds)`` returns the cost,
        the log lines and the worker's resident bytes (default: :func:`_time_in_worker`).
    """

    def __init__(self, sample_rounds: int, work: Callable[..., tuple] | None = None) -> None:
        self.sample_rounds, self.work = sample_rounds, work or _time_in_worker
        self.pool: Any = None

    def __enter__(self) -> Isolated:
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        self.close(now=kind is not None)

    def close(self, now: bool = False) -> None:
        """Let the idle worker end; ``now``: stop it (terminated, then killed if it does not end)."""
        if self.pool is not None:
            from wirelessfl.report.local import _stop_pool

            pool, self.pool = self.pool, None
            if now:
                _stop_pool(pool)
            else:
                pool.shutdown(wait=True)

    def __call__(self, run: RunSpec, log: Callable[[str], None]) -> _Cost | str:
        """``run``'s setting timed in the worker (one started if none is running)."""
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        from wirelessfl.report.local import _ignore_interrupts, _interrupts_ignored

        if self.pool is None:
            with _interrupts_ignored():
                self.pool = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"),
                                                initializer=_ignore_interrupts)
                future = self.pool.submit(self.work, run, self.sample_rounds)
        else:
            future = self.pool.submit(self.work, run, self.sample_rounds)
        try:
            cost, lines, rss = future.result()
        except BrokenProcessPool:
            self.close(now=True)
            return (f"{run.label}: its timing process died (out of memory on this machine, "
                    f"{_memory_total() / 2**30:.0f} GB)")
        for line in lines:
            log(line)
        if rss > RESTART_SHARE * _memory_total():
            self.close()
        return cost


def _memory_total() -> int:
    """The machine's physical memory in bytes (16 GiB where the system cannot say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX
        return 16 << 30


def _time_in_worker(run: RunSpec, sample_rounds: int) -> tuple[_Cost | str, list[str], int]:
    """In an :class:`Isolated` worker: the setting's cost, its log lines, the worker's bytes."""
    import resource

    from wirelessfl.report.local import _worker_setup

    if not getattr(_time_in_worker, "ready", False):
        _worker_setup(os.cpu_count() or 1)
        _time_in_worker.ready = True  # type: ignore[attr-defined]
    lines: list[str] = []
    cost = _warm_then_time(run, sample_rounds, lines.append)
    try:  # resident now; else the peak (kB on Linux, bytes on macOS: an upper bound either way)
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return cost, lines, rss


def _stand_in_data(data: dict[str, Any], test: int | None, *, length: int,
                   clients: int) -> dict[str, Any] | None:
    """A data config on a stand-in of its dataset (``test`` test samples), or None if none.

    The stand-in has the real data's shapes and sizes (:func:`stand_in`); what reads a user's
    files (its folder, tokenizer, normalization statistics) is reset to the defaults.
    """
    name = stand_in(data["dataset"], test, length=length, clients=clients)
    if name is None:
        return None
    return {**data, "dataset": name, "data_dir": None, "normalization": "auto",
            "tokenizer": None}


def _stand_in_config(run: RunSpec, test: int | None = None) -> dict[str, Any] | str:
    """``run``'s config on a stand-in of its data (a test set of ``test`` samples), or why not.

    A ``pretrained`` weights file is left out, and GPT-2 is built from its default config
    (GPT-2 small) instead of a user's folder: their numbers do not change the time.
    """
    cfg = canonical(run.raw)
    data, model = dict(run.raw.get("data") or {}), dict(cfg.get("model") or {})
    raw = dict(run.raw)
    if data.get("dataset", "synthetic") != "synthetic":
        d = cfg["data"]
        swapped = _stand_in_data(data, test, length=int(d["max_length"]),
                                 clients=int(d["num_clients"]))
        if swapped is None:
            return f"{data['dataset']}: no stand-in"
        data = swapped
        options = dict(model.get("options") or {})
        if "pretrained" in options or "model_dir" in options:
            options.pop("pretrained", None)
            if options.pop("model_dir", None) is not None and model.get("name") == "gpt2_lora":
                options["config"] = {"eos_token_id": 50256}  # GPT-2 small's defaults
            raw["model"] = {**model, "options": options}
    return {**raw, "data": data, "stop_at_target": False, "name": "estimate"}


def _time_setting(run: RunSpec, sample_rounds: int,
                  log: Callable[[str], None]) -> _Cost | str:
    """``run``'s setting's cost on a stand-in of its data, or why it is not timed.

    First a probe: one round in which each engine call trains clients for
    :data:`PROBE_CALL_S` and estimates the rest
    (:class:`~wirelessfl.engine.sampled.SampledExecutor`), with a test set of
    :data:`EVAL_RUN` samples, evaluation timed apart on :data:`EVAL_SAMPLE`. A setting whose
    probed round takes :data:`PROBE_KEEP_S` or more keeps the probe's cost (eq. (1) of
    :mod:`wirelessfl.engine.sampled`); a shorter one is timed whole, as it runs
    (:func:`_time_whole`). A multi-task run: :func:`_time_multitask`.
    """
    if "tasks" in run.raw:
        return _time_multitask(run, log)
    with tempfile.TemporaryDirectory(prefix="wirelessfl-estimate-") as tmp:
        probe = probe_setting(run, Path(tmp) / "probe")
        if isinstance(probe, str):
            return probe
        if probe.per_round + probe.per_eval >= PROBE_KEEP_S:
            log(f"  timed {run.label} on a sample of its clients: {probe.per_round:.3g} s a "
                f"round, {probe.per_eval:.3g} s an evaluation, {probe.start:.3g} s to start")
            return probe
        return time_whole_setting(run, sample_rounds, Path(tmp), log)


def probe_setting(run: RunSpec, folder: Path) -> _Cost | str:
    """The probe's cost of ``run``'s setting (:func:`_probe` on its stand-in), or why none.

    One round; two for alternating client groups (sessions of one round: one must end).
    """
    probe_raw = _stand_in_config(run, EVAL_RUN)
    if isinstance(probe_raw, str):
        return probe_raw
    rounds = 2 if (canonical(run.raw).get("population") or {}).get("kind") == "alternating" else 1
    real_test = real_test_size(str((run.raw.get("data") or {}).get("dataset", "")))
    try:
        return _probe({**_sessions_inside(probe_raw, rounds), "rounds": rounds}, folder,
                      real_test)
    except TrainingDiverged as exc:  # one setting's sample: the others are still timed
        return f"{run.label}: its timed sample diverged ({str(exc).splitlines()[0][:80]})"


def time_whole_setting(run: RunSpec, sample_rounds: int, folder: Path,
                       log: Callable[[str], None]) -> _Cost | str:
    """``run``'s setting timed whole on its stand-in (:func:`_time_whole`), or why not."""
    whole = _stand_in_config(run)
    if isinstance(whole, str):
        return whole
    return _time_whole(run, _sessions_inside(whole, 1 + sample_rounds), sample_rounds, folder,
                       log)


def _probe(raw: dict[str, Any], folder: Path, real_test: int) -> _Cost:
    """One round of ``raw`` with sampled training; its evaluations timed apart.

    The run evaluates on the stand-in's few test samples; an evaluation is timed on
    :data:`EVAL_SAMPLE` training samples and scaled to ``real_test`` (0: the run's own test
    set).
    """
    made: list[SampledExecutor] = []

    def wrap(inner: Any) -> SampledExecutor:
        made.append(SampledExecutor(inner, PROBE_CALL_S, steps=PROBE_STEPS))
        return made[0]

    job = open_run(raw, executor_wrap=wrap)
    exp = job.exp  # type: ignore[attr-defined]
    params, test, train = exp.initial_state().params, exp.splits.test, exp.splits.train

    small = _eval_seconds(exp.model, params, test, exp.device)  # an evaluation inside the run
    m = min(EVAL_SAMPLE, len(train))
    rate = _eval_seconds(exp.model, params, ArrayDataset(train.x[:m], train.y[:m],
                                                         train.num_classes), exp.device) / max(1, m)
    passes = 2 if exp.config.population.dynamic else 1  # and the active labels' test set (§4.3)
    t0 = time.perf_counter()
    record = RunRecord(folder)
    execute(record, job, quiet=True, estimate=False)
    total = time.perf_counter() - t0
    walls = {int(row["round"]): float(row["wall_s"]) for row in record.rows()}
    sampler = made[0]
    correction = sampler.extrapolated - sampler.seconds  # eq. (1): the clients not trained
    last = max(walls, default=0)
    after = walls.get(last, total) - walls.get(0, 0.0)  # the wall of every round after round 0
    evals = passes * small * sum(1 for r in walls if r > 0)
    per_round = max(0.0, (after + correction - evals) / max(1, last))
    start = max(0.0, total - after - passes * small)  # round 0's evaluation: in per_eval
    per_eval = passes * rate * (real_test or len(test))
    return _Cost(start, per_round, per_eval, sampled=sampler.asked > sampler.trained)


class _Enough(Exception):
    """A multi-task sample has run for :data:`MULTI_S` (raised between two aggregations)."""


def _time_multitask(run: RunSpec, log: Callable[[str], None]) -> _SimCost | str:
    """A multi-task setting's cost against simulated time, or why it is not timed.

    Its tasks' data are stand-ins with :data:`EVAL_RUN` test samples; its engine trains each
    call's requests as a probe does (:class:`~wirelessfl.engine.sampled.SampledExecutor`);
    evaluations are counted and costed apart, each task's timed on :data:`EVAL_SAMPLE`
    samples and scaled to its real test set (or ``test_samples``). The simulation runs for
    :data:`MULTI_S` seconds or to its end (targets never stop it); the cost is read after
    every aggregation, and its slope over the second half of the simulated time sampled is
    what a later unit of time costs (the first half holds round 0 and the first requests).
    A method without a clock (centralized training: epochs on the pooled data) runs whole.
    """
    cfg = canonical(run.raw)
    tasks = []
    for t in cfg["tasks"]:
        d = t["data"]
        if d["dataset"] == "synthetic":  # made, not read: the run's own
            tasks.append(t)
            continue
        swapped = _stand_in_data(d, EVAL_RUN, length=int(d["max_length"]),
                                 clients=int(cfg["pool"]["clients"]))
        if swapped is None:
            return f"{d['dataset']}: no stand-in"
        tasks.append({**t, "data": swapped})
    sim, envs = build_simulator(resolve_multitask(
        {**cfg, "tasks": tasks, "test_samples": None, "name": "estimate"}))
    sampler = sim.executor = SampledExecutor(sim.executor, PROBE_CALL_S, steps=PROBE_STEPS)
    per_eval = {}
    for task, env in zip(cfg["tasks"], envs, strict=True):  # the simulator keeps their order
        real = real_test_size(task["data"]["dataset"])
        real = min(real or len(env.splits.test), int(cfg.get("test_samples") or 2**62))
        train, m = env.splits.train, min(EVAL_SAMPLE, len(env.splits.train))
        sample = ArrayDataset(train.x[:m], train.y[:m], train.num_classes)
        per_eval[env.name] = _eval_seconds(env.model, env.init_params, sample,
                                           env.device) / max(1, m) * real
    spent = {"evals": 0.0, "wall": 0.0}  # evaluations' cost (scaled), their wall here
    points: list[tuple[float, float, int]] = [(0.0, 0.0, 0)]  # (simulated time, cost, rounds)
    t0 = time.perf_counter()

    def cost() -> float:
        wall = time.perf_counter() - t0
        return (wall - spent["wall"] - sampler.seconds + sampler.extrapolated + spent["evals"])

    def on_eval(task: Any, st: Any, now: float) -> bool:
        t1 = time.perf_counter()
        task.evaluate(st.params)
        spent["wall"] += time.perf_counter() - t1
        spent["evals"] += per_eval[task.name]
        return False  # a target never stops the sample

    clocked = hasattr(sim, "time")  # centralized training has no clock: run whole (sampled)

    def on_checkpoint() -> None:
        points.append((float(getattr(sim, "time", 0.0)), cost(),
                       sum(s.round for s in sim.states)))
        if clocked and time.perf_counter() - t0 >= MULTI_S:
            raise _Enough

    try:
        end = sim.run(on_eval, max_time=float(cfg["max_time"]),
                      eval_every=int(cfg["eval_every"]), max_rounds=cfg.get("max_rounds"),
                      on_checkpoint=on_checkpoint,
                      **({} if cfg.get("eval_interval") is None
                         else {"eval_interval": float(cfg["eval_interval"])}))
    except _Enough:
        end = None
    except TrainingDiverged as exc:
        return f"{run.label}: its timed sample diverged ({str(exc).splitlines()[0][:80]})"
    if end is not None:  # the whole simulation ran: its cost at its end time
        points.append((float(end), cost(), sum(s.round for s in sim.states)))
    t_end, c_end, r_end = points[-1]
    mid = next(p for p in points if p[0] >= t_end / 2)
    if t_end - mid[0] <= 0:  # one aggregation after a long start: the slope from 0
        mid = points[0]
    slope = t_end > 0 and end is None  # a sample cut short: later time costs as its second half
    per_t = (c_end - mid[1]) / (t_end - mid[0]) if slope else 0.0
    rounds_per_t = (r_end - mid[2]) / (t_end - mid[0]) if slope else 0.0
    log(f"  timed {run.label} on a sample of its requests: {per_t * 1000:.3g} s per 1,000 of "
        f"simulated time (t = {t_end:.4g} sampled in {c_end:.3g} s), "
        f"{max(per_eval.values()):.3g} s an evaluation")
    return _SimCost(tuple((t, c) for t, c, _ in points), per_t, rounds_per_t, len(envs),
                    sampled=sampler.asked > sampler.trained)


#: An evaluation shorter than this is timed :data:`EVAL_REPEATS` times and the least kept
#: (a timing process that shares its cores with another one reads it several times slower).
EVAL_REPEAT_S, EVAL_REPEATS = 1.0, 3


def _eval_seconds(model: Any, params: Any, data: ArrayDataset, device: Any) -> float:
    """Seconds of one evaluation of ``data`` after a warm-up one: the least of a few if short."""
    evaluate(model, params, data, device=device)  # warm-up
    best = math.inf
    for _ in range(EVAL_REPEATS):
        t0 = time.perf_counter()
        evaluate(model, params, data, device=device)
        best = min(best, time.perf_counter() - t0)
        if best >= EVAL_REPEAT_S:
            break
    return best


def _time_whole(run: RunSpec, base: dict[str, Any], sample_rounds: int, tmp: Path,
                log: Callable[[str], None]) -> _Cost | str:
    """(start, seconds per round) of ``run``'s setting run as it is, on a stand-in of its data."""
    sample = _Sample()
    try:
        total = _timed_job({**base, "rounds": 1 + sample_rounds}, tmp / "0", sample)
    except TrainingDiverged as exc:  # one setting's sample: the others are still timed
        return f"{run.label}: its timed sample diverged ({str(exc).splitlines()[0][:80]})"
    walls = sample.walls
    last = max(walls, default=0)
    if 0 in walls and 1 in walls and last == 1:  # a long first round, timed alone
        per_round = walls[1] - walls[0]
        start = max(0.0, total - per_round)
    elif 1 in walls and last >= 2:  # rounds 2 .. last after the warm-up round
        per_round = max(0.0, (walls[last] - walls[1]) / (last - 1))
        start = max(0.0, total - last * per_round)
        steps = [walls[r] - walls[r - 1] for r in range(2, last + 1) if r - 1 in walls and r in walls]
        if len(steps) >= 2:  # the steady rounds' spread, so a reader sees how sure it is
            log(f"  timed {run.label}: {per_round:.3g} s a round (steady rounds "
                f"{min(steps):.3g}-{max(steps):.3g} s), {start:.3g} s to start")
            return _Cost(start, per_round)
    else:  # rows not every round (eval_every > 1): a 1-round run beside it
        try:
            first = _timed_job({**base, "rounds": 1}, tmp / "1", None)
        except TrainingDiverged as exc:
            return f"{run.label}: its timed sample diverged ({str(exc).splitlines()[0][:80]})"
        per_round = max(0.0, (total - first) / sample_rounds)
        start = max(0.0, first - per_round)
    log(f"  timed {run.label}: {per_round:.3g} s a round, {start:.3g} s to start")
    return _Cost(start, per_round)


def _sessions_inside(raw: dict[str, Any], rounds: int) -> dict[str, Any]:
    """``raw`` with its dynamic population's sessions and events inside the ``rounds`` timed.

    A run of alternating client groups whose sessions last longer than the timed rounds would
    be refused (no session would end); its timed sample gets sessions of L rounds, L small
    enough that the sample holds more sessions than the initial-model rule's pilot sessions,
    so session starts (and the rule acting at them) are inside the timing: an upper bound for
    the real sessions, which start less often. Events after the timed rounds are dropped.
    """
    cfg = canonical(raw)
    pop = cfg.get("population") or {}
    if pop.get("kind") == "alternating":
        pilot = int((cfg.get("initial_model") or {}).get("pilot_sessions") or 0) \
            if (cfg.get("initial_model") or {}).get("rule", "none") != "none" else 0
        length = max(1, min(int(pop["rounds_per_session"]), (rounds - 1) // (pilot + 1)))
        return {**raw, "population": {**(raw.get("population") or {}),
                                      "rounds_per_session": length}}
    if pop.get("kind") == "events":
        events = [e for e in (raw.get("population") or {}).get("events", [])
                  if not (isinstance(e, dict) and isinstance(e.get("round"), int)
                          and e["round"] >= rounds)]
        return {**raw, "population": {**(raw.get("population") or {}), "events": events}}
    return raw


class _Sample:
    """When a setting's timed run has sampled enough rounds: its rows' clock by round.

    A first round of :data:`LONG_ROUND_S` or more is its own sample; after a shorter one the
    run goes on to its last round, or until the rounds after the first have taken
    :data:`SAMPLE_S`.
    """

    def __init__(self) -> None:  # noqa: D107
        self.walls: dict[int, float] = {}

    def __call__(self, row: dict[str, Any]) -> bool:
        r, walls = int(row["round"]), self.walls
        walls[r] = float(row["wall_s"])
        if r == 1:
            return 0 in walls and walls[1] - walls[0] >= LONG_ROUND_S
        return r >= 2 and 1 in walls and walls[r] - walls[1] >= SAMPLE_S


def _timed_job(raw: dict[str, Any], folder: Path, until: _Sample | None) -> float:
    """Run ``raw`` into ``folder`` (ending once ``until`` says so); its seconds."""
    job = open_run(raw)
    t0 = time.perf_counter()
    execute(RunRecord(folder), job, quiet=True, estimate=False, until=until)
    return time.perf_counter() - t0


def _hours(seconds: float) -> str:
    """Hours in 8 characters: two decimals, or three significant digits below 0.1 h."""
    h = seconds / 3600
    return f"{h:8.2f}" if h >= 0.1 or h == 0 else f"{h:8.3g}"


def estimate_table(rows: list[Estimate], device: str, startup: float = 0.0) -> str:
    """The estimate as text: a line per figure and the total in hours.

    ``startup``: the seconds this command took to start (interpreter, imports), which the
    real command pays too: a line of its own, counted in the total.
    """
    lines = [f"{'figure':14s} {'runs':>5s} {'rounds':>7s} {'hours':>8s}  (on {device})"]
    for e in rows:
        said = []
        if e.sampled:
            said.append(f"{e.sampled} setting{'s' * (e.sampled != 1)} from a sample of "
                        + ("their requests" if e.simulated else "each round's clients"))
        if e.simulated:
            said.append(f"simulated time to max_time, or t = {STOP_HORIZON:,.0f} where runs "
                        "stop at their targets")
        if e.note:
            said.append(f"not all estimated: {e.note}")
        lines.append(f"{e.figure:14s} {e.runs:5d} {e.rounds:7d} {_hours(e.seconds)}"
                     + "".join(f"  {x}" for x in said))
    total = sum(e.seconds for e in rows) + startup
    if startup > 0:
        lines.append(f"{'start-up':14s} {'':5s} {'':7s} {_hours(startup)}  (the command's own "
                     f"start, {startup:.1f} s as measured here: imports and PyTorch)")
    lines.append(f"{'total':14s} {sum(e.runs for e in rows):5d} "
                 f"{sum(e.rounds for e in rows):7d} {_hours(total)}  "
                 f"(runs x rounds x seconds per round, timed; an upper bound where runs stop "
                 f"at their target)")
    return "\n".join(lines)


def describe_device(raw: dict[str, Any]) -> str:
    """The device the runs would use, in words (``cuda``: the GPU's name)."""
    device = str(raw.get("device", "auto"))
    if device in ("auto", "cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "CPU" if device in ("auto", "cpu") else device
