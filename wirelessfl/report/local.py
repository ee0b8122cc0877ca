"""The local executor: a figure's runs in lockstep groups, one after another, or in workers.

Runs that can share a client engine call (:func:`lockstep_groups`: round-based runs of one
dataset, model, local rule and local settings) train together as a
:class:`~wirelessfl.engine.lockstep.Lockstep` group, each in its own thread with its own run
folder; the others train alone. Every run is seeded by its config alone, so the numbers do
not depend on the executor, the grouping, the number of processes or the order (to float
rounding in a group; the Ray executor, :mod:`wirelessfl.report.ray_executor`, runs
:func:`run_in_process` on single runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from channels.validation import as_float, as_int
from wirelessfl.errors import ConfigError, TrainingDiverged, short
from wirelessfl.report.spec import RunSpec, run_folder
from wirelessfl.run.heap import spawning_workers
from wirelessfl.run.kinds import canonical, open_run, run_job
from wirelessfl.run.records import RunRecord
from wirelessfl.run.shell import Output, execute


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
    except TrainingDiverged as exc:  # recorded in its folder: a figure draws it as diverged
        log(f"  diverged (recorded; not trained again): {str(exc).splitlines()[0]}")
    except ValueError as exc:  # e.g. locked by another process
        log(f"  skipped: {str(exc).splitlines()[0]}")


def execute_local(runs: list[RunSpec], root: Path, *, quiet: bool = False,
                  log: Callable[[str], None] = print, jobs: int = 1,
                  batch_runs: int | None = None) -> None:
    """Train every run, in lockstep groups where runs can share their client engine.

    Groups hold at most ``batch_runs`` runs (None: as memory allows, :func:`auto_batch_runs`;
    1: every run alone); ``jobs`` groups train at a time (each in its own process when
    ``jobs`` > 1).
    """
    as_int("jobs", jobs, lo=1, hi=os.cpu_count() or 1)
    if batch_runs is not None:
        as_int("batch_runs", batch_runs, lo=1, hi=10_000)
    groups = lockstep_groups(runs, batch_runs)
    if jobs > 1 and len(groups) > 1:
        _execute_parallel(groups, root, jobs, log)
        return
    done = 0
    for g in groups:
        index = f"[{done + 1}/{len(runs)}]" if len(g) == 1 else \
            f"[{done + 1}-{done + len(g)}/{len(runs)}]"
        run_group(g, root, index=index, quiet=quiet, log=log)
        done += len(g)


def share_signature(run: RunSpec) -> tuple | None:
    """What runs of one lockstep group share (None: the run trains alone).

    Round-based runs on the batched engine (``engine: auto|batched``) of one file dataset
    (or one registered from a user's code), model, algorithm, local settings but the
    learning rate, device, compile/replay modes and ``deterministic`` (a process-wide PyTorch
    setting each run's thread would otherwise flip while the others train). Seeds, partitions,
    learning rates, algorithm settings, cells and links may differ.
    Multi-task runs in simulated time (FedAST) train alone: their clients' work is driven by
    each run's own event clock, not by rounds.
    """
    if "tasks" in run.raw:
        return None
    from wirelessfl.run.rounds import shared_dataset

    cfg = canonical(run.raw)
    data, local = cfg["data"], {k: v for k, v in cfg["local"].items() if k != "lr"}
    if cfg["engine"] not in ("auto", "batched") or not shared_dataset(data["dataset"]):
        return None
    return (data["dataset"], data["data_dir"], data["normalization"], data["placement"],
            json.dumps(cfg["model"], sort_keys=True, default=str),
            json.dumps(local, sort_keys=True, default=str), cfg["algorithm"]["name"],
            cfg["device"], cfg["compile"], cfg["replay"], cfg["low_rank"], cfg["max_batch"],
            str(cfg["threads"]), bool(cfg["deterministic"]))


def lockstep_groups(runs: list[RunSpec], batch_runs: int | None) -> list[list[RunSpec]]:
    """``runs`` in lockstep groups (order kept within a group); a run that cannot share alone.

    Runs that can share but are more than ``batch_runs`` go into as few groups as that
    allows, of equal work: dealt by their work (:func:`run_work`), longest first, to the
    group with the least work so far (a figure's long series would otherwise fill one group
    and its short ones another, which ``--jobs 2`` then finishes one long group after the
    other's end).
    """
    buckets: dict[Any, list[RunSpec]] = {}
    for r in runs:
        sig = share_signature(r) if batch_runs != 1 else None
        buckets.setdefault(sig if sig is not None else ("alone", r.key), []).append(r)
    out = []
    for members in buckets.values():
        cap = batch_runs or auto_batch_runs(members[0])
        out += _balanced(members, cap)
    return out


def _balanced(members: list[RunSpec], cap: int) -> list[list[RunSpec]]:
    """``members`` in ⌈n / cap⌉ groups of at most ``cap`` runs and about equal work.

    A run's work is its rounds times its algorithm's
    :meth:`~wirelessfl.algorithms.base.FederatedAlgorithm.round_work`; runs are dealt longest
    first to the group with the least work so far.
    """
    count = -(-len(members) // cap)
    if count == 1:
        return [members]
    work = [run_work(r) for r in members]
    groups: list[list[int]] = [[] for _ in range(count)]
    load = [0.0] * count
    for i in sorted(range(len(members)), key=lambda i: -work[i]):
        g = min((g for g in range(count) if len(groups[g]) < cap), key=lambda g: load[g])
        groups[g].append(i)
        load[g] += work[i]
    return [[members[i] for i in sorted(g)] for g in groups]


def run_work(run: RunSpec) -> float:
    """A round-based run's work, to balance lockstep groups: rounds × the round's work."""
    from wirelessfl.registry import get

    cfg = canonical(run.raw)
    name = cfg["algorithm"]["name"]
    _, algorithm = get(name)
    try:
        work = algorithm.round_work(cfg["algorithm"])
    except Exception as exc:  # a plug-in's hook: its error in one line, naming it
        raise ConfigError(f"algorithm {short(name)}: its round_work hook raised "
                          f"{type(exc).__name__}: {short(str(exc))}; fix the plug-in (it "
                          "returns a round's work against a default round's 1.0)") from None
    try:  # a plug-in's answer, checked: NaN or a negative work would deal every run to one group
        work = as_float("round_work", work, lo=0.0, lo_open=True)
    except ValueError:
        raise ConfigError(f"algorithm {short(name)}: round_work returned {short(work)}; it "
                          "must return a finite number > 0 (a round's work against a "
                          "default round's 1.0)") from None
    return int(cfg["rounds"]) * work


def check_hooks(runs: list[RunSpec]) -> None:
    """Every planning hook of the runs' algorithms answers well (a ConfigError otherwise).

    Called before a report or sweep folder is claimed, so a plug-in whose hook raises or
    returns a bad value leaves no folder behind: ``round_work`` (:func:`run_work`) once per
    algorithm and settings. Round-based runs only (a multi-task run plans its own way).
    """
    from wirelessfl.registry import ENTRIES

    seen: set[str] = set()
    for run in runs:
        if "tasks" in run.raw:
            continue
        cfg = canonical(run.raw)
        entry = ENTRIES.get(cfg["algorithm"]["name"])
        if entry is not None and entry[0] != "rounds":  # (a simulation plans its own way)
            continue
        what = json.dumps(cfg["algorithm"], sort_keys=True, default=str)
        if what not in seen:
            seen.add(what)
            run_work(run)


def auto_batch_runs(run: RunSpec) -> int:
    """How many runs like ``run`` one group holds by default: on a GPU, at most 64.

    Half of the GPU's free memory over a run's stacked clients (parameters, gradient, start
    and optimiser state: 8 copies of the model each). On a CPU, 1: runs train alone unless
    ``--batch-runs`` asks for groups. Measured on 2 CPU cores (HIST's quick figures, FCNN),
    one group of 26 of the 58 runs took 10 min, where ``--jobs 2`` trains all 58 in 13: a
    group's runs share one process, so their server side (sampling, masks, aggregation,
    evaluation) runs one after another under Python's lock, while two processes use both
    cores for everything; stacking more clients saves the engine little on a CPU.
    """
    import torch

    from wirelessfl.models import build_model
    from wirelessfl.report.data_shapes import SHAPES

    cfg = canonical(run.raw)
    if not (torch.cuda.is_available() and cfg["device"] in ("auto", "cuda")):
        return 1
    shape, classes = (SHAPES[cfg["data"]["dataset"]][2:] if cfg["data"]["dataset"] in SHAPES
                      else ((1, 28, 28), 10))
    try:
        model = build_model(cfg["model"]["name"], shape, classes, seed=0, **cfg["model"]["options"])
        d = sum(p.numel() for p in model.parameters())
    except (ValueError, TypeError, OSError):
        return 8
    clients = cfg["algorithm"].get("clients_per_round") or cfg["data"]["num_clients"]
    per_run = 8 * 4 * d * clients
    budget = torch.cuda.mem_get_info()[0] // 2
    return int(max(1, min(64, budget // max(per_run, 1))))


def run_group(runs: list[RunSpec], root: Path, *, index: str = "[1/1]", quiet: bool = False,
              log: Callable[[str], None] = print) -> None:
    """Train (or resume) ``runs`` as one lockstep group, each into its own folder.

    One thread per run; a run that cannot start or finish is skipped with its reason (as
    :func:`run_one`) and leaves the group, and any other error of a run is raised once the
    others have finished. With one run, it is :func:`run_one`. One progress bar counts the
    group's rounds.
    """
    if len(runs) == 1:
        run_one(runs[0], root, index=index, quiet=quiet, log=log)
        return
    import threading

    from tqdm import tqdm

    from wirelessfl.engine.executors import make_executor, resolve_device
    from wirelessfl.engine.lockstep import Lockstep
    from wirelessfl.run.config import resolve

    cfg = resolve({**runs[0].raw, "name": "group"})
    group = Lockstep(make_executor("batched", resolve_device(cfg.device), cfg.max_batch,
                                   compile=cfg.compile, replay=cfg.replay,
                                   low_rank=cfg.low_rank), len(runs))
    log(f"{index} a lockstep group of {len(runs)} runs: {runs[0].label} ...")
    lines: list[str] = []
    errors: list[BaseException] = []

    def train(run: RunSpec) -> None:
        folder = run_folder(root, run)
        try:
            with group.building:  # one run at a time: model init uses the global generator
                job = open_run({**run.raw, "name": run_name(run)}, lockstep=group)
            execute(RunRecord(folder), job, resume=RunRecord(folder).exists(), quiet=True,
                    estimate=False, govern=False)
        except TrainingDiverged as exc:
            lines.append(f"  diverged (recorded; not trained again) {run.label}: "
                         f"{str(exc).splitlines()[0]}")
        except ValueError as exc:
            lines.append(f"  skipped {run.label}: {str(exc).splitlines()[0]}")
        except BaseException as exc:  # raised again below, as a run alone would raise it
            errors.append(exc)
        finally:
            group.leave()

    threads = [threading.Thread(target=train, args=(r,), daemon=True) for r in runs]
    total = sum(int(canonical(r.raw)["rounds"]) for r in runs)
    start, told = time.perf_counter(), False
    with tqdm(total=total, desc=f"{len(runs)} runs", unit="round", disable=quiet,
              dynamic_ncols=True) as bar:
        for t in threads:
            t.start()
        files = [RunRecord(run_folder(root, r)).metrics_path for r in runs]
        begun = _rounds_done(files)  # resumed rounds do not time the group
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=1.0 / len(threads))
                bar.update(max(0, _rounds_done(files) - bar.n))
                took = time.perf_counter() - start
                if quiet and not told and took > Output.ESTIMATE_FROM_S and bar.n > begun:
                    told = True  # one line, as a single run's --quiet estimate
                    left = took / (bar.n - begun) * (total - bar.n)
                    log(f"  {len(runs)} runs: about {left / 60:.1f} min left ({bar.n} of "
                        f"{total} rounds)")
        except BaseException as exc:  # Ctrl-C, SIGTERM: the runs unwind before it goes on
            _stop_group(group, threads, exc)
            raise
        bar.update(max(0, _rounds_done(files) - bar.n))
    for line in lines:
        log(line)
    if errors:  # the other runs have finished; their folders are complete
        raise errors[0]
    replay = getattr(group.executor, "replay", None)
    replayed = "" if replay is None else f"; {replay.replayed} local steps replayed"
    log(f"  {len(runs)} runs: {group.calls} engine calls served {group.merged} run calls"
        f"{replayed}")


def _stop_group(group: Any, threads: list[Any], reason: BaseException) -> None:
    """Stop a lockstep group and wait for its runs' threads to unwind (a few seconds at most).

    A daemon thread still inside PyTorch when the interpreter exits aborts it ("terminate
    called without an active exception", SIGABRT), so the group ends first: each run raises
    ``reason`` at its next engine call and leaves its folder resumable. A second signal while
    they unwind is ignored here; the threads still end at their next call.
    """
    group.stop(reason)
    while any(t.is_alive() for t in threads):
        try:
            for t in threads:
                t.join(timeout=0.5)
        except BaseException:  # noqa: S110 - a repeated Ctrl-C: keep waiting for the runs
            group.stop(reason)


def _rounds_done(files: list[Path]) -> int:
    """Rounds the group's runs have recorded: the round of each ``metrics.jsonl``'s last row.

    Read from the end of each file (its last few kilobytes, more only for a longer row), so
    polling a group whose runs have written hundreds of rows costs what it did at their
    start and takes the interpreter's lock from the training threads for microseconds, not
    for a parse of every row. A line still being written is skipped.
    """
    return sum(_last_round(path) for path in files)


def _last_round(path: Path) -> int:
    """The ``round`` of the last complete row of a ``metrics.jsonl`` (0 without one)."""
    if not path.is_file():  # not yet written (or not a file: nothing to read, nothing to wait on)
        return 0
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            tail = 4 << 10
            while True:
                fh.seek(max(0, size - tail))
                lines = fh.read().splitlines()
                whole = size <= tail
                for line in reversed(lines if whole else lines[1:]):  # [0] may be cut
                    try:
                        return int(json.loads(line)["round"])
                    except (ValueError, KeyError, TypeError):
                        continue
                if whole:
                    return 0
                tail *= 4
    except OSError:
        return 0


def run_in_process(run: RunSpec, root: Path, threads: int, index: str) -> str:
    """One run in a worker process (PyTorch limited to ``threads``); returns its log lines.

    ``OMP_NUM_THREADS`` is set too, so a run's ``threads: auto`` keeps the worker's share.
    """
    _worker_setup(threads)
    lines: list[str] = []
    run_one(run, root, index=index, quiet=True, log=lines.append)
    return "\n".join(lines)


def _worker_setup(threads: int) -> None:
    """A worker's first step: its share of threads, and the plug-ins its parent loaded.

    The installed packages' plug-ins (entry points) and the command's ``--plugin`` ones, as
    the parent command loaded them (:mod:`wirelessfl.run.plugins`).
    """
    import torch

    from wirelessfl.run import plugins

    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    plugins.load_in_worker()


def group_in_process(runs: list[RunSpec], root: Path, threads: int, index: str) -> str:
    """A lockstep group (or one run) in a pool worker; returns its log lines.

    A worker stopped by its parent (SIGTERM, :func:`_ignore_interrupts`) exits as soon as its
    runs have unwound (their checkpoints kept, their locks released): the pool would
    otherwise keep it waiting for a next task until its parent killed it.
    """
    try:
        if len(runs) == 1:
            return run_in_process(runs[0], root, threads, index)
        _worker_setup(threads)
        lines: list[str] = []
        run_group(runs, root, index=index, quiet=True, log=lines.append)
        return "\n".join(lines)
    finally:
        if _STOPPED:  # as a worker's normal end does: its finalizers (semaphores), then out
            from multiprocessing import util

            with contextlib.suppress(Exception):
                util._exit_function()
            os._exit(_STOPPED[0])


#: In a pool worker, the exit status once its parent stopped it (set by its SIGTERM handler).
_STOPPED: list[int] = []


def _ignore_interrupts() -> None:
    """A worker's signals: Ctrl-C ignored (its parent stops it), SIGTERM ends it cleanly.

    The parent stops its workers with SIGTERM (:func:`_stop_pool`): it raises ``SystemExit``
    wherever the worker is, so a run in progress ends as after a kill (its last checkpoint
    kept, its lock released) and an idle worker exits, with no traceback and its own
    resources (semaphores) released; a worker that does not end is killed after 10 s.
    """
    import signal
    import sys

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough (the group's and the
        _STOPPED.append(128 + signum)                  # parent's may both come)
        sys.exit(128 + signum)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, stop)


@contextlib.contextmanager
def _interrupts_ignored():
    """Ctrl-C ignored while worker processes start, so they start with it ignored too.

    A spawned worker inherits an ignored SIGINT, not a handler: without this, a Ctrl-C
    while it imports would print its traceback. Off the main thread, nothing changes.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _stop_pool(pool: Any) -> None:
    """Stop a process pool now: no queued task starts, its workers terminated, its queues closed.

    (``ProcessPoolExecutor.shutdown`` alone waits for the running tasks.)
    """
    import gc

    workers = list((getattr(pool, "_processes", None) or {}).values())  # started so far
    manager = getattr(pool, "_executor_manager_thread", None)
    queues = [getattr(pool, q, None) for q in ("_call_queue", "_result_queue")]
    pool.shutdown(wait=False, cancel_futures=True)  # no queued group starts
    for w in workers:
        w.terminate()  # SIGTERM: the worker ends cleanly (_ignore_interrupts)
    try:
        for w in workers:
            w.join(10)
            if w.is_alive():  # a run that does not stop: killed
                w.kill()
                w.join(5)
    except KeyboardInterrupt:  # a second Ctrl-C: every worker killed at once
        for w in workers:
            w.kill()
        for w in workers:
            w.join(5)
        raise
    if manager is not None:  # it sees the workers gone and closes its side
        manager.join(10)
    for q in queues:
        if q is not None:
            q.close()
    del queues, workers, manager
    gc.collect()  # their locks' finalizers release the named semaphores


def _execute_parallel(groups: list[list[RunSpec]], root: Path, jobs: int,
                      log: Callable[[str], None]) -> None:
    """The groups in ``jobs`` worker processes; Ctrl-C or SIGTERM stops them all at once.

    The workers start with :data:`wirelessfl.run.heap.REUSE` (freed tensors reused, not
    mapped afresh; unless the environment sets ``MALLOC_`` variables itself).

    On an interrupt the queued groups are cancelled and the workers terminated (no run goes
    on); the runs keep their last checkpoints and the same command resumes the rest. A
    worker that dies ends the command (a broken pool), as a group's error does once the
    others have finished.
    """
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    jobs = min(jobs, len(groups))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    total, done = sum(len(g) for g in groups), 0
    pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"),
                               initializer=_ignore_interrupts)
    errors, pending = [], {}
    try:
        # the workers start at the submits, with a heap that reuses large tensors
        with _interrupts_ignored(), spawning_workers():
            for g in groups:
                index = (f"[{done + 1}/{total}]" if len(g) == 1
                         else f"[{done + 1}-{done + len(g)}/{total}]")
                pending[pool.submit(group_in_process, g, root, threads, index)] = len(g)
                done += len(g)
        while pending:
            ready, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in ready:
                pending.pop(fut)
                try:
                    log(fut.result())
                except Exception as exc:  # raised once the others have finished
                    errors.append(exc)
    except BaseException:  # the command says what is kept and how to resume
        _stop_pool(pool)
        raise
    pool.shutdown()
    if errors:
        raise errors[0]
