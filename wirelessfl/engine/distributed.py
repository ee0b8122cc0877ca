"""Clients across worker processes: one round's clients split over ``torch.distributed`` ranks.

:class:`DistributedExecutor` starts ``workers - 1`` processes beside the calling one (rank 0)
and joins them in a process group: ``gloo`` on CPUs, ``nccl`` when each rank has its own GPU.
Each round the calling process sends every rank its share of the clients (contiguous,
``numpy.array_split`` of the task list); every rank trains its share on the batched engine
(:class:`~wirelessfl.engine.batched.BatchedExecutor`, its threads or GPU its own), and the
results come back to rank 0 in task order. A client's computation depends only on its task
(its seed, data and start), so the numbers are those of one process (tested).

The training set goes to each worker once, when the workers start (or when another dataset
is passed); the local rule (model, hyperparameters) and the round's tasks go every round.
Objects travel between these processes with ``torch.distributed``'s object collectives
(pickle between processes this executor started; nothing is read from a file).

This is how one run outgrows one device or one core group; sweeps of many runs use Ray
(:mod:`wirelessfl.report.ray_executor`). Call :meth:`close` (or use ``with``) to stop the
workers; they also stop when the calling process exits.

Examples
--------
>>> from wirelessfl.engine.distributed import DistributedExecutor
>>> DistributedExecutor(workers=2)           # nothing starts before the first round
DistributedExecutor(workers=2, device='cpu')
"""

from __future__ import annotations

import atexit
import dataclasses
import multiprocessing as mp
import os
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from wirelessfl.data.arrays import ArrayDataset
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import (
    ClientError,
    ClientResult,
    ClientTask,
    ClientUpdate,
    DeltaFold,
    LocalHParams,
)
from wirelessfl.engine.cores import MAX_THREADS, torch_threads, usable_cpus
from wirelessfl.engine.loop import Executor

MAX_WORKERS = 256


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _device_of(device: str, rank: int) -> torch.device:
    """Rank r's device: ``cuda:r`` when the executor runs on GPUs, else the CPU."""
    return torch.device(f"cuda:{rank}") if device.startswith("cuda") else torch.device("cpu")


#: Rank 0 waits for the workers' shares at most this multiple of its own share's time (and
#: at least :data:`MIN_WAIT_S` s); a worker that dies or is stopped (SIGSTOP) is reported
#: within :data:`POLL_S` s.
WAIT_FACTOR, MIN_WAIT_S, POLL_S = 20.0, 60.0, 0.2
#: Resident memory of one worker before it holds any data (the interpreter and PyTorch:
#: about 230 MB measured).
WORKER_BYTES = 300 << 20
#: Seconds the workers have to start and join the group (and the group's own timeout).
JOIN_TIMEOUT_S = 300
#: The store key each worker rank adds 1 to once started; rank 0 polls it (see ``_start``).
READY_KEY = "wirelessfl/ready"
#: What a failed start tells the user to do.
_START_ADVICE = ("the run cannot start: check the machine's memory and processes, or use "
                 "fewer --workers")


def _die_with_parent() -> None:  # pragma: no cover - runs in the worker processes
    """Linux: the kernel kills this process when the one that started it dies (kill -9 too)."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before the call: nothing will signal us
        os._exit(1)


def _state(pid: int | None) -> str:
    """Process ``pid``'s state letter from Linux ``/proc`` ("" where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _stopped(pid: int | None) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP) or a zombie (Linux ``/proc``)."""
    return _state(pid) in ("T", "t", "Z")


def _zombie(pid: int | None) -> bool:
    """Whether process ``pid`` has exited and waits to be reaped."""
    return _state(pid) == "Z"


def _serve(rank: int, world: int, port: int, device: str, threads: int,
           max_batch: int | None, compile: str = "off", replay: str = "auto",  # noqa: A002
           low_rank: str = "auto",
           worker_init: Callable[[], Any] | None = None) -> None:  # pragma: no cover - workers
    """A worker: join the group, then train each round's share until told to stop.

    ``worker_init`` runs first (the command's plug-ins, whose classes the rounds' tasks hold).
    """
    import torch.distributed as dist

    _die_with_parent()
    if worker_init is not None:
        worker_init()
    torch.set_num_threads(threads)  # for the worker's life
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if device.startswith("cuda"):
        torch.cuda.set_device(rank)  # NCCL's object collectives use the current device
    store = dist.TCPStore("127.0.0.1", port, world, is_master=False,
                          timeout=timedelta(seconds=JOIN_TIMEOUT_S))
    store.add(READY_KEY, 1)  # rank 0 joins the group only once every rank has said so
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo", store=store,
                            rank=rank, world_size=world, timeout=timedelta(seconds=JOIN_TIMEOUT_S))
    executor = BatchedExecutor(_device_of(device, rank), max_batch=max_batch, compile=compile,
                               replay=replay, low_rank=low_rank)
    data = None
    try:
        while True:
            box: list[Any] = [None]
            dist.broadcast_object_list(box, src=0)
            kind, payload = box[0]
            if kind == "stop":
                break
            if kind == "data":
                data = payload
                continue
            update, shares, hp, folds = payload
            fold = folds[rank] if folds else None
            try:
                out: Any = ("ok", (executor.run(update, data, shares[rank], hp, fold), fold))
            except Exception as exc:  # noqa: BLE001 - reported to rank 0, which raises it
                out = ("error", f"{type(exc).__name__}: {exc}"[:500] + " | "
                       + traceback.format_exc(limit=2)[-300:])
            dist.gather_object(out, None, dst=0)
    except KeyboardInterrupt:
        pass  # a terminal's Ctrl-C reaches the whole group: rank 0 stops the run and says so
    finally:
        dist.destroy_process_group()


class DistributedExecutor(Executor):
    """A round's clients over ``workers`` processes of one ``torch.distributed`` group.

    Parameters
    ----------
    workers : int
        Processes, this one included (2 to 256).
    device : str
        ``cpu`` (gloo; each rank gets ``threads`` threads) or ``cuda`` (NCCL; rank r on
        ``cuda:r``, so at most as many workers as GPUs).
    threads : int or None
        CPU threads per rank; None = the usable CPUs divided by ``workers``.
    max_batch, compile, replay, low_rank
        Passed to each rank's batched engine
        (:class:`~wirelessfl.engine.batched.BatchedExecutor`).
    worker_init : callable or None
        A module-level function each worker rank calls first (a run passes the loading of
        its command's plug-ins, :func:`wirelessfl.run.plugins.load_in_worker`).
    """

    def __init__(self, workers: int = 2, device: str = "cpu", threads: int | None = None,
                 max_batch: int | None = None, compile: str = "off",  # noqa: A002
                 replay: str = "auto", low_rank: str = "auto",
                 worker_init: Callable[[], Any] | None = None) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) \
                or not 2 <= workers <= MAX_WORKERS:
            raise ValueError(f"workers must be an integer in [2, {MAX_WORKERS}], got {workers!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or not 1 <= threads <= MAX_THREADS):
            raise ValueError(f"threads must be None or an integer in [1, {MAX_THREADS}], got "
                             f"{threads!r}")
        device = str(device)
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {device!r}")
        if device == "cuda" and workers > torch.cuda.device_count():
            raise ValueError(f"{workers} workers on cuda need {workers} GPUs; this machine has "
                             f"{torch.cuda.device_count()}")
        self.workers, self.device = workers, device
        self.threads = threads or max(1, usable_cpus() // workers)
        self.local = BatchedExecutor(_device_of(device, 0), max_batch=max_batch, compile=compile,
                                     replay=replay, low_rank=low_rank)
        self.max_batch, self.compile, self.replay = max_batch, compile, replay
        self.low_rank, self.worker_init = low_rank, worker_init
        self._procs: list[Any] = []
        self._data_id: int | None = None

    def __repr__(self) -> str:
        return f"DistributedExecutor(workers={self.workers}, device='{self.device}')"

    def __enter__(self) -> DistributedExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            raise RuntimeError("this process already belongs to a torch.distributed group; "
                               "DistributedExecutor starts its own (run it in a fresh process)")
        port, ctx = _free_port(), mp.get_context("spawn")
        self._procs = [ctx.Process(target=_serve, daemon=True,
                                   args=(r, self.workers, port, self.device, self.threads,
                                         self.max_batch, self.compile, self.replay,
                                         self.low_rank, self.worker_init))
                       for r in range(1, self.workers)]
        for p in self._procs:
            p.start()
        if self.device == "cuda":
            torch.cuda.set_device(0)
        timeout = timedelta(seconds=JOIN_TIMEOUT_S)
        try:
            # The store's server runs in this process and does not wait for the workers; this
            # thread polls how many have started, so a worker that dies or stops before the
            # join is named within POLL_S and no thread is left blocked in a rendezvous (one
            # that returned during the interpreter's shutdown aborted the process).
            store = dist.TCPStore("127.0.0.1", port, self.workers, is_master=True,
                                  timeout=timeout, wait_for_workers=False)
            self._await_ready(store)
            # Every rank is at its own join: the rendezvous takes milliseconds, still watched.
            self._watched("join", lambda: dist.init_process_group(
                "nccl" if self.device == "cuda" else "gloo", store=store, rank=0,
                world_size=self.workers, timeout=timeout), JOIN_TIMEOUT_S, then=_START_ADVICE,
                settle=0.5)
        except ClientError:
            raise
        except Exception as exc:  # noqa: BLE001 - anything else the join raised
            self._abandon()
            raise ClientError(f"distributed workers did not join within {JOIN_TIMEOUT_S} s "
                              f"({type(exc).__name__}); check the machine's memory and "
                              "processes, or use fewer --workers") from None
        atexit.register(self.close)

    def close(self) -> None:
        """Stop the workers and leave the process group (idempotent)."""
        if not self._procs:
            return
        import torch.distributed as dist

        if any(not p.is_alive() or _stopped(p.pid) for p in self._procs):
            self._abandon()  # a dead or stopped peer would never take the stop message
            return
        try:
            if dist.is_initialized():
                self._watched("stop", lambda: dist.broadcast_object_list([("stop", None)], src=0),
                              10.0)
                dist.destroy_process_group()
        except ClientError:
            pass  # _watched has killed the workers
        finally:
            for p in self._procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
            self._procs, self._data_id = [], None

    def _watched(self, what: str, call: Any, limit: float,
                 then: str = "the round cannot finish: resume the run (--resume)",
                 settle: float = 10.0) -> None:
        """``call()`` (a collective) on a helper thread while the workers are watched.

        A worker that dies or is stopped is reported within :data:`POLL_S`; a collective not
        done within ``limit`` seconds is reported then. Either way the workers are killed
        and the round fails with one line naming the worker and ``then`` (a run then stops,
        resumable from its checkpoint); nothing waits on a peer that will never answer. The
        group's join is watched the same way, once :meth:`_await_ready` has seen every rank
        start: a helper left in a collective fails as soon as the killed peers' sockets close,
        while one left in a rendezvous would wait out the store's timeout.
        """
        import threading

        failure: list[BaseException] = []

        def body() -> None:
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - reported by the watching thread
                failure.append(exc)

        helper = threading.Thread(target=body, daemon=True, name=f"wirelessfl-{what}")
        helper.start()
        problem = self._watch(lambda: helper.join(POLL_S), lambda: not helper.is_alive(),
                              what, limit)
        if problem is None and failure:
            time.sleep(POLL_S)  # a peer's socket closes a moment before its process is reaped
            problem = self._lost_worker() or (
                f"distributed {what} failed ({type(failure[0]).__name__}: "
                f"{str(failure[0]).splitlines()[0][:120] if str(failure[0]) else ''})")
        if problem is not None:
            self._abandon(helper, settle)
            raise ClientError(f"{problem}; {then}")

    def _lost_worker(self) -> str | None:
        """The first worker that died or is stopped, described; None if all are running."""
        for r, p in enumerate(self._procs, start=1):
            stopped = _stopped(p.pid)  # read first: a worker that exits in between is a zombie,
            if not p.is_alive() or _zombie(p.pid):  # which is_alive reaps: named as dead
                p.join(timeout=1.0)  # a zombie's exit code (is_alive can miss it under load)
                return f"distributed worker rank {r} (pid {p.pid}) died (exit code {p.exitcode})"
            if stopped:
                return f"distributed worker rank {r} (pid {p.pid}) is stopped"
        return None

    def _watch(self, pause: Callable[[], Any], done: Callable[[], bool], what: str,
               limit: float) -> str | None:
        """Call ``pause()`` (about :data:`POLL_S` s) until ``done()``; None, or the problem.

        The problem is the first worker that died or is stopped, or ``limit`` seconds passed.
        """
        t0 = time.perf_counter()
        while True:
            pause()
            problem = self._lost_worker()
            if problem is not None or done():
                return problem
            if time.perf_counter() - t0 > limit:
                return f"distributed workers did not answer within {limit:.0f} s ({what})"

    def _await_ready(self, store: Any) -> None:
        """Wait until every worker rank has added itself to :data:`READY_KEY` of ``store``.

        Polled from this thread every :data:`POLL_S` s (:meth:`_watch`): a worker that dies
        or is stopped first is named (the workers are then killed), as is a start slower
        than :data:`JOIN_TIMEOUT_S`.
        """
        problem = self._watch(lambda: time.sleep(POLL_S),
                              lambda: store.add(READY_KEY, 0) >= self.workers - 1, "start",
                              JOIN_TIMEOUT_S)
        if problem is not None:
            self._abandon()
            raise ClientError(f"{problem}; {_START_ADVICE}")

    def _abandon(self, helper: Any = None, settle: float = 10.0) -> None:
        """Kill the workers and drop the process group without talking to them.

        ``helper`` is a thread still in a collective: it is given ``settle`` seconds to fail
        once the peers' sockets close (a join waiting for a dead peer never does).
        """
        import torch.distributed as dist

        for p in self._procs:
            if p.is_alive():
                p.kill()
        for p in self._procs:
            p.join(timeout=5)
        self._procs, self._data_id = [], None
        if helper is not None:  # its collective fails once the peers' sockets close
            helper.join(timeout=settle)
        try:
            if dist.is_initialized() and (helper is None or not helper.is_alive()):
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the group is gone with its peers
            pass

    # ------------------------------------------------------------------ rounds
    def run(self, update: ClientUpdate, data: ArrayDataset, tasks: Sequence[ClientTask],
            hp: LocalHParams, fold: DeltaFold | None = None) -> list[ClientResult]:
        """Train the tasks over the ranks (rank 0 here); results in task order.

        With a ``fold`` each rank folds its share and only the ranks' sums travel back,
        added in rank order.
        """
        import torch.distributed as dist

        if fold is not None:
            fold.check(tasks)
        if not tasks:
            return []
        if not self._procs:
            self._start()
        if self._data_id != id(data):
            box = [("data", data.placed("cpu", "auto"))]
            self._watched("data upload", lambda: dist.broadcast_object_list(box, src=0),
                          MIN_WAIT_S + data.nbytes / 50e6)
            self._data_id = id(data)
        parts = np.array_split(np.arange(len(tasks)), self.workers)
        shares = [list(tasks[i] for i in part) for part in parts]
        ends = np.cumsum([0] + [len(p) for p in parts])
        folds = None if fold is None else [fold.share(int(lo), int(hi))
                                           for lo, hi in zip(ends[:-1], ends[1:])]
        box = [("run", (update, shares, hp, folds))]
        self._watched("round's tasks", lambda: dist.broadcast_object_list(box, src=0), MIN_WAIT_S)
        own_fold = folds[0] if folds else None
        mine: Any
        started = time.perf_counter()
        try:
            with torch_threads(self.threads):  # rank 0's share of the cores, as every rank's
                mine = ("ok", (self.local.run(update, data, shares[0], hp, own_fold), own_fold))
        except Exception as exc:  # noqa: BLE001 - the workers are waiting to be gathered
            mine = ("error", f"{type(exc).__name__}: {exc}"[:500])
        gathered: list[Any] = [None] * self.workers
        own_s = time.perf_counter() - started
        self._watched("results", lambda: dist.gather_object(mine, gathered, dst=0),
                      max(MIN_WAIT_S, WAIT_FACTOR * own_s))
        errors = [f"rank {r}: {msg}" for r, (kind, msg) in enumerate(gathered) if kind == "error"]
        if errors:
            raise ClientError("distributed clients failed: " + "; ".join(errors))
        out = [r for _, (results, _) in gathered for r in results]
        if fold is not None:
            for _, (_, share) in gathered:
                fold.merge(share)
            if fold.states is not None:  # the workers' states written here, in task order
                fold.take_states(np.arange(len(out)), [r.state for r in out])
                out = [dataclasses.replace(r, state=None) for r in out]
        return out
