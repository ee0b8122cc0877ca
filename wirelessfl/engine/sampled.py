"""An executor that trains a sample of each call's clients and times it: for estimates only.

A round of a paper-scale setting can take longer to train than an estimate may spend
(100 clients of a ResNet-18 on CIFAR-10: minutes a round on 2 CPU cores). Local training
is a sum over clients, trained alone or in chunks of stacked clients, so a call's time is
estimated from the clients it trains before its budget is spent: clients drawn at random,
in chunks of growing size (from an eighth of the engine's chunk,
:meth:`~wirelessfl.engine.batched.BatchedExecutor.chunk_size`, doubling up to it), until
all are trained or ``budget_s`` has passed, and then

    T_call ≈ T_trained + (C − c) · t_last / k_last,                                    (1)

``c`` of the call's ``C`` clients trained in ``T_trained`` seconds, the last chunk's
``k_last`` in ``t_last``. The ``C − c`` clients not trained take the results of trained ones
(their Δ, loss, steps and state, under their own ids and sample counts), so the round goes
on at its real size: its aggregation, server step and link see ``C`` clients. A call that
trains every client within its budget returns the inner engine's results (in chunks of its
own); one that does not, results the model learns nothing true from: only the clock
(:attr:`SampledExecutor.seconds`, :attr:`SampledExecutor.extrapolated`) is read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from wirelessfl.data.arrays import ArrayDataset
from wirelessfl.engine.batch import ClientBatch, ClientResults
from wirelessfl.engine.client import ClientResult, ClientTask, ClientUpdate, DeltaFold, LocalHParams
from wirelessfl.engine.client_store import take_rows
from wirelessfl.engine.loop import Executor
from wirelessfl.engine.schedule import steps_per_call

__all__ = ["SampledExecutor"]


class SampledExecutor(Executor):
    """Trains each call's clients until ``budget_s`` is spent; eq. (1) for the call's time.

    Parameters
    ----------
    inner : Executor
        The run's own executor.
    budget_s : float
        Seconds a call trains before it estimates the rest (a first chunk always trains).
    steps : int, optional
        Local steps a trained client takes at most (its seconds scaled to its own steps);
        None: its own.
    seed : int
        Seed of the draws of which clients train.

    Attributes
    ----------
    seconds : float
        Seconds spent training.
    extrapolated : float
        Their eq. (1) projection to every client asked for.
    trained, asked : int
        Clients trained and clients asked for, over all calls.
    """

    def __init__(self, inner: Executor, budget_s: float = 1.0, steps: int | None = None,
                 seed: int = 0) -> None:
        if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) \
                or not budget_s >= 0 or budget_s == float("inf"):
            raise ValueError(f"budget_s must be a finite number of seconds >= 0, got {budget_s!r}")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                                  or steps < 1):
            raise ValueError(f"steps must be a whole number >= 1 (or None), got {steps!r}")
        self.inner, self.budget_s, self.steps = inner, float(budget_s), steps
        self.rng = np.random.default_rng(seed)
        self.seconds = self.extrapolated = 0.0
        self.trained = self.asked = 0

    def __repr__(self) -> str:
        return f"SampledExecutor({self.inner!r}, budget_s={self.budget_s}, steps={self.steps})"

    def __getattr__(self, name: str) -> Any:  # the inner executor's own (device, close, ...)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _chunk(self, update: ClientUpdate, data: ArrayDataset, task: ClientTask,
               hp: LocalHParams) -> int:
        size = getattr(self.inner, "chunk_size", None)
        return max(1, int(size(task, hp, data, getattr(update, "model", None)))) if size else 1

    def _train(self, samples: np.ndarray, hp: LocalHParams, chunk: int, fold: DeltaFold | None,
               train: Callable[[np.ndarray, LocalHParams, DeltaFold | None], Any]
               ) -> tuple[np.ndarray, list]:
        """Train positions of a call in growing random chunks, within the budget.

        ``samples``: each client's n_i. Returns the positions trained (in the order trained)
        and each chunk's results; with a ``fold``, the trained clients' weighted mean goes
        into it for the whole call.
        """
        n = len(samples)
        own = np.array([steps_per_call(int(m), hp) for m in samples], np.float64)
        short = hp if self.steps is None or own.max(initial=0) <= self.steps else \
            replace(hp, steps=self.steps, epochs=None)
        taken = own if short is hp else np.array([steps_per_call(int(m), short) for m in samples],
                                                 np.float64)
        order = self.rng.permutation(n)
        done, size, spent, counted, parts, takes = 0, max(1, chunk // 8), 0.0, 0.0, [], []
        total: dict[str, torch.Tensor] = {}
        while done < n:
            take = np.sort(order[done:done + size])
            sub = None if fold is None else DeltaFold(fold.weights[take], fold.normaliser)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            parts.append(train(take, short, sub))
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            scaled = dt * float(own[take].sum() / taken[take].sum()) if taken[take].sum() else dt
            takes.append(take)
            done, spent, counted = done + len(take), spent + dt, counted + scaled
            if sub is not None and sub.total is not None:
                for k, v in sub.total.items():
                    total[k] = v if k not in total else total[k].add_(v)
            if spent >= self.budget_s and done < n:  # eq. (1): the rest at the last chunk's rate
                counted += scaled / len(take) * (n - done)
                break
            size = min(2 * size, chunk)
        trained = np.concatenate(takes)
        self.seconds, self.extrapolated = self.seconds + spent, self.extrapolated + counted
        self.trained, self.asked = self.trained + len(trained), self.asked + n
        if fold is not None:
            fold.check([None] * n)
            w = fold.weights[trained].sum()
            scale = fold.weights.sum() / w if len(trained) < n and w > 0 else 1.0
            fold.total = {k: v.mul_(scale) for k, v in total.items()} if total else None
            fold.folded = n
        return trained, parts

    @staticmethod
    def _stand_ins(n: int, trained: np.ndarray) -> np.ndarray:
        """For each of ``n`` positions, its row among the trained results (a trained one's)."""
        slot = np.full(n, -1, np.int64)
        slot[trained] = np.arange(len(trained))
        rest = np.flatnonzero(slot < 0)
        slot[rest] = np.arange(len(rest)) % len(trained)
        return slot

    def run(self, update: ClientUpdate, data: ArrayDataset, tasks: Sequence[ClientTask],
            hp: LocalHParams, fold: DeltaFold | None = None) -> list[ClientResult]:
        """The per-client contract: tasks trained within the budget, every task given a result."""
        n = len(tasks)
        if not n:
            return []
        trained, parts = self._train(
            np.array([len(t.indices) for t in tasks]), hp, self._chunk(update, data, tasks[0], hp),
            fold, lambda take, h, sub: self.inner.run(update, data, [tasks[i] for i in take], h, sub))
        got = [r for p in parts for r in p]
        pick = self._stand_ins(n, trained)
        return _states_to_fold(fold, [replace(got[j], client=t.client, num_samples=len(t.indices))
                                      for j, t in zip(pick.tolist(), tasks)])

    def run_batch(self, update: ClientUpdate, data: ArrayDataset, batch: ClientBatch,
                  hp: LocalHParams, fold: DeltaFold | None = None) -> ClientResults:
        """The round's path: rows trained within the budget, every row given a result."""
        n = len(batch)
        if not n:
            return self.inner.run_batch(update, data, batch, hp, fold)
        trained, parts = self._train(
            batch.num_samples, hp, self._chunk(update, data, batch.task(0), hp), fold,
            lambda take, h, sub: self.inner.run_batch(update, data, batch.select(take), h, sub))
        got = ClientResults.concat(parts)
        pick = self._stand_ins(n, trained)
        if not got.stacked:  # per-client results (a rule on the loop)
            return ClientResults.from_list(_states_to_fold(fold, [
                replace(got[j], client=int(c), num_samples=int(m))
                for j, c, m in zip(pick.tolist(), batch.clients, batch.num_samples)]))
        index = torch.as_tensor(pick)
        states = take_rows(got.states, pick)
        if fold is not None:  # the call's states (stand-ins too) to the round's state fold
            states = fold.take_states(np.arange(n), states)
        return ClientResults(
            batch.clients, batch.num_samples, got.num_steps[pick], got.losses[pick],
            deltas=None if got.deltas is None else
            {k: v.index_select(0, index.to(v.device)) for k, v in got.deltas.items()},
            buffers={k: v.index_select(0, index.to(v.device)) for k, v in got.buffers.items()},
            states=states)


def _states_to_fold(fold: DeltaFold | None, results: list[ClientResult]) -> list[ClientResult]:
    """With a state fold, the results' states (stand-ins' too) go to it and leave the results.

    The chunks are trained with folds of their own, without the round's state fold
    (a stand-in's state is known only once the call is done).
    """
    if fold is None or fold.states is None:
        return results
    fold.take_states(np.arange(len(results)), [r.state for r in results])
    return [replace(r, state=None) for r in results]
