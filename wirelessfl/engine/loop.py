"""The executor contract (:class:`Executor`) and the reference engine, the loop.

An executor trains clients with a :class:`~wirelessfl.engine.local_sgd.ClientUpdate`.
:meth:`Executor.run` is the per-client contract (tasks in, one result per task out);
:meth:`Executor.run_batch` the round's path (a :class:`~wirelessfl.engine.batch.ClientBatch`
in, :class:`~wirelessfl.engine.batch.ClientResults` out). :class:`LoopExecutor` runs clients
one after another, the reference every other engine equals; the stacked engine is
:class:`~wirelessfl.engine.batched.BatchedExecutor`, the process-parallel one
:class:`~wirelessfl.engine.distributed.DistributedExecutor`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch

from wirelessfl.data.arrays import ArrayDataset
from wirelessfl.engine import device_guard
from wirelessfl.engine.batch import ClientBatch, ClientResults
from wirelessfl.engine.client import (
    FOLD_BYTES,
    FOLD_TREES,
    ClientError,
    ClientResult,
    ClientTask,
    ClientUpdate,
    DeltaFold,
    LocalHParams,
    float32_arithmetic,
    forked_rng,
    on_device,
    tree_bytes,
)
from wirelessfl.engine.schedule import batch_schedule


class Executor(ABC):
    """Runs a :class:`ClientUpdate` over many clients.

    Contract: :meth:`run` returns one :class:`ClientResult` per task, in task order, equal
    (to float tolerance) to what :class:`LoopExecutor` returns. A client with no data takes
    no step and returns a zero pseudo-gradient. Errors are re-raised as :class:`ClientError`.
    With a :class:`DeltaFold` the pseudo-gradients go into it as clients finish and the
    results come back without them.
    """

    @abstractmethod
    def run(self, update: ClientUpdate, data: ArrayDataset, tasks: Sequence[ClientTask],
            hp: LocalHParams, fold: DeltaFold | None = None) -> list[ClientResult]:
        """Train every task's client and return their results."""

    def run_batch(self, update: ClientUpdate, data: ArrayDataset, batch: ClientBatch,
                  hp: LocalHParams, fold: DeltaFold | None = None) -> ClientResults:
        """Train a :class:`~wirelessfl.engine.batch.ClientBatch`; its results as arrays.

        The round's path. Here, through the per-client contract (:meth:`run` on the batch's
        tasks); an engine that trains clients stacked (the batched one) overrides it and
        builds no per-client object.
        """
        return ClientResults.from_list(self.run(update, data, batch.tasks(), hp, fold))


class LoopExecutor(Executor):
    """The reference: clients one after another, each under its own seeded RNG."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)

    def __repr__(self) -> str:
        return f"LoopExecutor(device='{self.device}')"

    def _run_one(self, update: ClientUpdate, data: ArrayDataset, task: ClientTask,
                 hp: LocalHParams) -> ClientResult:
        schedule = batch_schedule(len(task.indices), hp, task.seed)
        # every step's sample indices in one upload; each step takes a view (no copy, no wait)
        ends = np.cumsum([len(pos) for pos in schedule], dtype=np.int64)
        order = torch.as_tensor(np.asarray(task.indices, dtype=np.int64)[
            np.concatenate(schedule).astype(np.int64)] if schedule else np.zeros(0, np.int64),
            device=data.x.device)
        stage = "client_init"
        try:
            with forked_rng(self.device), float32_arithmetic(hp.precision):
                torch.manual_seed(task.seed)
                carry = update.client_init(task)
                stage = "client_step"
                for end, pos in zip(ends, schedule):
                    b = order[end - len(pos):end]
                    carry = update.client_step(carry, *data.batch(b, self.device))
                stage = "client_final"
                res = update.client_final(task, carry)
                device_guard.check(res.delta, self.device, f"{type(update).__name__}.client_final")
                return res
        except Exception as exc:
            raise ClientError(f"client {task.client} failed in {stage}: {exc}") from exc

    def run(self, update: ClientUpdate, data: ArrayDataset, tasks: Sequence[ClientTask],
            hp: LocalHParams, fold: DeltaFold | None = None) -> list[ClientResult]:
        """Train the tasks one after another (folded in groups as they finish)."""
        tasks = on_device(tasks, self.device)
        if fold is None:
            return [self._run_one(update, data, t, hp) for t in tasks]
        fold.check(tasks)
        out: list[ClientResult] = []
        group: list[ClientResult] = []  # finished, not yet folded
        for i, t in enumerate(tasks):
            group.append(self._run_one(update, data, t, hp))
            if (len(group) == FOLD_TREES or i == len(tasks) - 1
                    or len(group) * tree_bytes(group[0].delta) >= FOLD_BYTES):
                out += fold.add_results(range(len(out), len(out) + len(group)), group)
                group = []
        return out
