"""Synchronous simultaneous training of several tasks: Sync-ST and its variants.

``docs/papers/fedast.md`` §3.

Each global round starting at t0 draws Σ_m n_m distinct clients (a random permutation of
the N) and splits them across the active tasks; each trains its task's current model once.
A job finishes at max(t0, F_i) + D (F_i: the end of a discarded job from an earlier round
still running on that client, §7 item 18 [code]). First-k keeps each task's k_m = min(k, n_m)
earliest finishers; the round ends when the last kept update of any task arrives, and each
task applies x ← x − η_s mean_kept(Δ). ``first_k=None`` is Sync-ST-NoStrag.Mit. Discarded
jobs are never trained (their results are not used). When a task reaches its target its
clients go to the others in proportion to their shares.

How clients are assigned to tasks is the only difference between the variants
(``assignment``): ``random`` (Sync-ST, §3.1), ``bayes`` (Sync-Bayes-ST, §3.3: a Gaussian
process with a Matérn-3/2 kernel over past assignments and their costs, expected improvement
over 75 random candidates) and ``ucb`` (Sync-UCB-ST, §3.4: discounted UCB scores of each
(task, client) pair from the clients' training losses).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from wirelessfl.algorithms.fedast.assignment import ASSIGNMENTS
from wirelessfl.algorithms.fedast.hparams import SyncSTHParams
from wirelessfl.algorithms.fedast.simtime import ClientPool
from wirelessfl.algorithms.fedast.simulation import EvalHook, Simulation, TaskState, check_stop, split_budget
from wirelessfl.algorithms.fedast.tasks import TaskEnv, train_requests
from wirelessfl.engine.loop import Executor
from wirelessfl.rng import Seeds


class SyncST(Simulation):
    """Sync-ST over ``tasks`` on the clients of ``pool`` (its latency model and queue ends)."""

    uses_sync_local = True  # tasks train with their ``sync_local`` hyperparameters (§3.1)

    snapshot_fields = ("assignment", "delays", "grid_evals", "pool", "rounds", "sampling",
                       "states", "time")

    def __init__(self, tasks: list[TaskEnv], pool: ClientPool, executor: Executor, seeds: Seeds,
                 hp: SyncSTHParams) -> None:
        if hp.clients > pool.num_clients:
            raise ValueError(f"Sync-ST draws {hp.clients} clients per round from a pool of "
                             f"{pool.num_clients}")
        if hp.split is not None and len(hp.split) != len(tasks):
            raise ValueError(f"`split` has {len(hp.split)} entries for {len(tasks)} tasks")
        self.tasks, self.pool, self.executor, self.seeds, self.hp = tasks, pool, executor, seeds, hp
        self.sampling = seeds.generator("sampling")
        self.delays = seeds.generator("delays")
        self.states = [TaskState(params={k: v.detach().clone() for k, v in t.init_params.items()})
                       for t in tasks]
        split = hp.split or split_budget(hp.clients, np.ones(len(tasks)), self.sampling)
        for st, n in zip(self.states, split):
            st.target_requests = int(n)
        self.time = 0.0
        self.grid_evals = 0
        self.rounds = 0
        self.assignment = ASSIGNMENTS[hp.assignment](len(tasks), pool.num_clients, hp)

    def _round(self, before_apply: Callable[[float], None] | None = None) -> None:
        """One global round of every active task.

        ``before_apply(end)`` runs once the round's end time is known, before its updates are
        applied (evaluations on the simulated-time grid see the models of before the round);
        a task it finishes gets no update.
        """
        active = [j for j, s in enumerate(self.states) if not s.finished]
        counts = [self.states[j].target_requests for j in active]
        chosen, first_k = self.assignment.assign(self.rounds, active, counts, self.sampling)
        start, end, kept = self.time, self.time, []
        for j, clients in zip(active, chosen):
            reqs = [self.pool.send(int(c), j, self.states[j].round,
                                   start, self.delays, force=True) for c in clients]
            k = len(reqs) if self.hp.first_k is None or not first_k else min(self.hp.first_k,
                                                                             len(reqs))
            reqs.sort(key=lambda r: r.done)
            kept.append(reqs[:k])
            for r in reqs:
                self.pool.cancel(r)
            end = max(end, reqs[k - 1].done)
        if before_apply is not None:
            before_apply(end)
        self.time = end
        losses = []
        for j, reqs in zip(active, kept):
            st = self.states[j]
            if st.finished:  # reached its target on the evaluation grid during the round
                losses.append(np.full(len(reqs), np.nan))
                continue
            results = train_requests(
                self.executor, self.tasks[j], [st.params] * len(reqs), [r.client for r in reqs],
                [self.seeds.int_seed("local", j, st.round, r.client) for r in reqs])
            eta = self.hp.server_lr / len(results)
            st.params = {k: v - eta * sum(res.delta[k] for res in results)
                         for k, v in st.params.items()}
            st.round += 1
            st.updates += len(results)
            st.staleness.extend([0] * len(results))
            losses.append(np.array([res.loss for res in results]))
        self.assignment.observe(active, [np.array([r.client for r in reqs]) for reqs in kept],
                                [np.array([r.done - start for r in reqs]) for reqs in kept], losses)
        self.rounds += 1

    def _finish(self, j: int) -> None:
        st = self.states[j]
        st.finished = True
        active = [i for i, s in enumerate(self.states) if not s.finished]
        if active:
            shares = np.array([self.states[i].target_requests for i in active], float)
            for i, e in zip(active, split_budget(st.target_requests, shares, self.sampling)):
                self.states[i].target_requests += int(e)
        st.target_requests = 0

    def run(self, on_eval: EvalHook, *, max_time: float = math.inf, eval_every: int = 1,
            max_rounds: int | None = None, on_checkpoint: Callable[[], None] | None = None,
            eval_interval: float | None = None) -> float:
        """Rounds until every task is finished, ``max_time`` or ``max_rounds``; the end time.

        With ``eval_interval`` tasks are evaluated on the simulated-time grid (see
        :meth:`~wirelessfl.algorithms.fedast.fedast.Simulation.evaluate_grid`) instead of after
        every ``eval_every`` rounds.
        """
        every = None if eval_interval is not None else eval_every
        while not all(s.finished for s in self.states) and self.time < max_time:
            if on_checkpoint is not None:
                on_checkpoint()
            self._round(lambda end: self.evaluate_grid(min(end, max_time), on_eval, eval_interval))
            for j, st in enumerate(self.states):
                stop = None if st.finished else check_stop(self.tasks[j], st, self.time, on_eval,
                                                           every, max_rounds)
                if stop == "target":
                    self._finish(j)
                elif stop:
                    st.finished = True
        return self.time
