"""Many runs trained as one computation: their executor calls meet and run stacked.

A figure's runs (its seeds, series and sweep points) each train a few dozen clients a round;
alone, a run leaves most of a GPU idle. Runs of a :class:`Lockstep` group each train in their
own thread with their own server state, sampling, aggregation, link, records and run folder,
but their client engine is one: each run's :meth:`LockstepMember.run` waits until every
active run of the group is waiting too, and then all the waiting calls that can share a
computation (the same local rule and settings, model shapes, local steps, batch size,
precision and training set; learning rates may differ) are trained as **one** call of the
group's batched executor, chunked by its memory budget as a single run's clients are. Each
run gets its own clients' results back, and a run that folds its pseudo-gradients while
training (FedAvg's exact mean) gets exactly its own clients' terms in its fold.

The clients' computations do not depend on which other clients are stacked beside them, so
a run gives its solo numbers to float rounding (stacked GEMMs of other sizes may round
differently; its fold sums its chunks in another grouping): tested to 1e-5 relative on the
final model. A run that ends (its rounds, its target, divergence, an error) leaves the group
and the others go on; every run checkpoints into its own folder, so it resumes alone or in
a group.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from typing_extensions import override

from wirelessfl.engine.batch import ClientBatch, ClientResults
from wirelessfl.engine.client import (
    ClientResult,
    ClientTask,
    ClientUpdate,
    DeltaFold,
    LocalHParams,
    task_lr,
)
from wirelessfl.engine.client_store import take_rows
from wirelessfl.engine.loop import Executor

Params = dict[str, torch.Tensor]


@dataclasses.dataclass
class _Call:
    """One run's waiting executor call (its tasks, or its batch), and where its answer goes."""

    update: ClientUpdate
    data: Any
    tasks: list[ClientTask]
    hp: LocalHParams
    fold: DeltaFold | None
    results: Sequence[ClientResult] | None = None
    error: BaseException | None = None
    batch: ClientBatch | None = None
    order: int = 0  # the member's place in the group: calls are served in this order

    def __len__(self) -> int:
        return len(self.batch) if self.batch is not None else len(self.tasks)


class Lockstep:
    """A group of runs whose client training meets in one executor call per step.

    Parameters
    ----------
    executor : Executor
        The group's engine (a :class:`~wirelessfl.engine.batched.BatchedExecutor`).
    members : int
        How many runs take part; each gets a :meth:`member` executor and :meth:`leave`-s
        when it ends, whatever the reason.
    """

    def __init__(self, executor: Executor, members: int) -> None:
        if members < 1:
            raise ValueError(f"a lockstep group needs at least one run, got {members}")
        self.executor = executor
        self.active = members
        self._cv = threading.Condition()
        self._pending: list[_Call] = []
        self._data: dict[Any, Any] = {}
        #: Held while a run is built: model initialisation draws from PyTorch's global
        #: generator, which threads would otherwise interleave.
        self.building = threading.Lock()
        self.calls = 0  # combined executor calls made (for the group's report)
        self.merged = 0  # run calls they served
        self._members = 0
        #: Set by :meth:`stop`: every call from then on raises it (the group is ending).
        self.stopping: BaseException | None = None

    def member(self) -> LockstepMember:
        """The executor one run of the group trains with (the next place in the group's order)."""
        with self._cv:
            self._members += 1
            return LockstepMember(self, self._members - 1)

    def leave(self) -> None:
        """A run has ended: the others no longer wait for it."""
        with self._cv:
            self.active -= 1
            self._serve_if_ready()

    def shared(self, key: Any, load: Callable[[], Any]) -> Any:
        """One object per ``key`` for the whole group (a training set loaded and placed once)."""
        with self._cv:
            if key not in self._data:
                self._data[key] = load()
            return self._data[key]

    def stop(self, reason: BaseException) -> None:
        """End the group: waiting calls and every later one raise ``reason`` in their runs.

        For Ctrl-C or SIGTERM in the process that holds the group: the runs' threads then
        unwind as a run alone would (each folder left resumable at its last checkpoint), so
        that no thread is still inside PyTorch when the interpreter exits. An engine call
        already training finishes first (the lock is held while it trains).
        """
        with self._cv:
            self.stopping = reason
            for c in self._pending:
                if c.results is None and c.error is None:
                    c.error = reason
            self._pending = []
            self._cv.notify_all()

    def submit(self, call: _Call) -> Sequence[ClientResult]:
        """Wait for the group, train with it, return this call's results."""
        with self._cv:
            if self.stopping is not None:
                raise self.stopping
            self._pending.append(call)
            self._serve_if_ready()
            while call.results is None and call.error is None:
                self._cv.wait()
        if call.error is not None:
            raise call.error
        return call.results  # type: ignore[return-value]

    def _serve_if_ready(self) -> None:
        """With the lock held: once every active run waits, train all waiting calls."""
        if not self._pending or len(self._pending) < self.active:
            return
        # In the members' order, whichever thread came first: a merged call's rows, and the
        # update (model) it is trained with, are then the same every round, so the engine's
        # step replay keeps its recording (it is keyed by the model).
        pending, self._pending = sorted(self._pending, key=lambda c: c.order), []
        try:
            groups: dict[Any, list[_Call]] = {}
            for c in pending:
                groups.setdefault(share_key(c.update, c.data, c.hp, c.fold), []).append(c)
            for calls in groups.values():
                try:
                    self._train(calls)
                except BaseException as exc:  # every run of the call sees the error
                    for c in calls:
                        c.error = exc
        except BaseException as exc:  # no waiting run is left without an answer
            for c in pending:
                if c.results is None and c.error is None:
                    c.error = exc
        finally:
            self._cv.notify_all()

    def _train(self, calls: list[_Call]) -> None:
        """One executor call for ``calls``; each gets its own results (and fold terms).

        Calls that come as batches (a round's path) are trained as one
        :class:`~wirelessfl.engine.batch.ClientBatch` per step size and shapes of their starts
        (the runs' clients one after another, no object per client: the engine gives a batch
        of one shape its results as stacks, and each run a view of them; merged with other
        shapes, as HIST's submodels at other N, every client's result would be an object the
        run stacks again); per-client calls as one list of tasks.
        """
        self.calls += 1
        self.merged += len(calls)
        first = calls[0]
        if all(c.batch is not None for c in calls):
            shared: dict[tuple, list[_Call]] = {}
            for c in calls:
                lr = c.hp.lr if c.batch.lr is None else c.batch.lr
                shared.setdefault((lr, _start_shapes(c.batch)), []).append(c)
            for (lr, _), group in shared.items():
                self._share(group, ClientBatch.concat([c.batch for c in group], lr=lr))
            return
        tasks = [t if t.lr is not None else dataclasses.replace(t, lr=task_lr(t, c.hp))
                 for c in calls for t in (c.batch.tasks() if c.batch is not None else c.tasks)]
        folds = [c.fold for c in calls]
        fold = None if folds[0] is None else _Folds(folds, [len(c) for c in calls])
        results = self.executor.run(first.update, first.data, tasks, first.hp, fold)
        lo = 0
        for c in calls:
            c.results, lo = results[lo:lo + len(c)], lo + len(c)

    def _share(self, calls: list[_Call], batch: ClientBatch) -> None:
        """Train the calls' merged ``batch``; each call gets its rows (and its fold's terms)."""
        first = calls[0]
        folds = [c.fold for c in calls]
        fold = None if folds[0] is None else _Folds(folds, [len(c) for c in calls])
        results = ClientResults.from_list(
            self.executor.run_batch(first.update, first.data, batch, first.hp, fold))
        lo = 0
        for c in calls:
            c.results, lo = results.take(slice(lo, lo + len(c))), lo + len(c)


class LockstepMember(Executor):
    """One run's executor in a :class:`Lockstep` group: its calls are trained with the group's."""

    def __init__(self, group: Lockstep, order: int = 0) -> None:
        self.group = group
        self.order = order
        self.device = getattr(group.executor, "device", torch.device("cpu"))

    def __repr__(self) -> str:
        return f"LockstepMember({self.group.executor!r})"

    @override
    def run(self, update: ClientUpdate, data: Any, tasks: Sequence[ClientTask],
            hp: LocalHParams, fold: DeltaFold | None = None) -> list[ClientResult]:
        if not tasks:
            return []
        return list(self.group.submit(_Call(update, data, list(tasks), hp, fold,
                                            order=self.order)))

    @override
    def run_batch(self, update: ClientUpdate, data: Any, batch: ClientBatch,
                  hp: LocalHParams, fold: DeltaFold | None = None) -> ClientResults:
        if not len(batch):
            return ClientResults.from_list([])
        got = self.group.submit(_Call(update, data, [], hp, fold, batch=batch, order=self.order))
        return ClientResults.from_list(got)


#: Attribute types a rule's own settings may have to be compared across runs.
_PLAIN = (int, float, str, bool, type(None), tuple)


def share_key(update: ClientUpdate, data: Any, hp: LocalHParams, fold: DeltaFold | None) -> Any:
    """What calls must have in common to train as one: rule, settings, data, shapes, fold.

    The local rule's class and its plain settings (FedProx's μ, ...; a rule holding anything
    else shares with no other run), the local hyperparameters but the learning rate (each
    task carries its own), the training set's tensors, and whether the call folds.
    """
    own = []
    for name, value in sorted(vars(update).items()):
        if name in ("model", "hp"):
            continue
        if not isinstance(value, _PLAIN):
            return ("alone", id(update))
        own.append((name, value))
    shapes = tuple((k, tuple(p.shape), p.dtype) for k, p in update.model.named_parameters())
    x, y = getattr(data, "x", None), getattr(data, "y", None)
    where = (x.data_ptr(), tuple(x.shape), y.data_ptr()) if x is not None else id(data)
    local = tuple((f.name, repr(getattr(hp, f.name))) for f in dataclasses.fields(hp)
                  if f.name != "lr")
    return (type(update), type(update.model), shapes, tuple(own), local, where,
            None if fold is None else fold.states is None)


class _Folds(DeltaFold):
    """The folds of several runs' calls as one: each chunk's terms go to their own run's fold."""

    def __init__(self, folds: list[DeltaFold], sizes: list[int]) -> None:  # noqa: D107
        self.folds, self.bounds = folds, np.cumsum([0, *sizes])
        self.weights = np.concatenate([f.weights for f in folds])
        self.folded = 0
        self.states = None  # each member's own (take_states)

    def _split(self, positions: Sequence[int]) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(member, its positions in ``positions``, its own task positions)."""
        pos = np.asarray(positions, dtype=np.int64)
        owner = np.searchsorted(self.bounds, pos, side="right") - 1
        return [(m, np.flatnonzero(owner == m), pos[owner == m] - self.bounds[m])
                for m in np.unique(owner)]

    @override
    def check(self, tasks: Sequence[ClientTask]) -> None:
        for m, f in enumerate(self.folds):
            f.check(tasks[self.bounds[m]:self.bounds[m + 1]])

    @override
    def share(self, lo: int, hi: int) -> DeltaFold:
        raise NotImplementedError("lockstep groups run on the batched engine, not distributed")

    @override
    def add(self, positions: Sequence[int], deltas: Params) -> None:
        for m, rows, own in self._split(positions):
            self.folds[m].add(own, {k: _rows_of(d, rows) for k, d in deltas.items()})
        self.folded += len(positions)

    @override
    def take_states(self, positions: Sequence[int] | np.ndarray, states: Any) -> Any:
        if self.folds[0].states is None:  # (the members agree: share_key)
            return states
        for m, rows, own in self._split(positions):
            self.folds[m].take_states(own, take_rows(states, rows))
        return None

    @override
    def add_results(self, positions: Sequence[int],
                    results: Sequence[ClientResult]) -> list[ClientResult]:
        out: list[ClientResult | None] = [None] * len(results)
        for m, rows, own in self._split(positions):
            for i, r in zip(rows, self.folds[m].add_results(own, [results[i] for i in rows])):
                out[i] = r
        self.folded += len(results)
        return out  # type: ignore[return-value]


def _rows_of(stack: Any, rows: np.ndarray) -> Any:
    """The clients at ``rows`` of a stacked Δ: a view where they lie together, else a copy.

    A member's clients are consecutive in a merged call, so its share is a view.
    """
    if isinstance(stack, torch.Tensor) and len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return stack.narrow(0, int(rows[0]), len(rows))
    return stack.index_select(0, torch.as_tensor(rows, device=stack.device))


def _start_shapes(batch: ClientBatch) -> tuple:
    """The parameter shapes of a batch's starts (each distinct set once, sorted)."""
    return tuple(sorted({tuple((k, tuple(v.shape)) for k, v in s.items()) for s in batch.starts}))
