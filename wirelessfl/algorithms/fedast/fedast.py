"""FedAST: buffered asynchronous training of several tasks on one client pool.

``docs/papers/fedast.md`` §2 (Algorithms 1–4), run as a discrete-event simulation (§2.3, §4.3)
on the shared :mod:`wirelessfl.algorithms.fedast.simtime` parts: an
:class:`~wirelessfl.algorithms.fedast.simtime.EventQueue` of completions, a
:class:`~wirelessfl.algorithms.fedast.simtime.ClientPool` (FIFO queues, availability cap)
and a :class:`~wirelessfl.algorithms.fedast.simtime.VersionStore` of the model versions
outstanding requests use.

Server step (§2.3 step 6): x ← x − η_s · mean_B(Δ) with Δ = x_sent − x_local (every
buffered update weighted equally, no staleness discount; divided by the actual |B|).
Replenishment (§2.4 [code]): K_m = min(2, max(0, R_m − A_m), max(0, R − Σ_j A_j)) requests
with the current model to clients drawn uniformly with replacement; a request refused by
the availability cap is skipped and made up at a later arrival. Option S keeps (R_m, b_m);
option D reallocates R_m ∝ σ̂_g,m (Algorithms 3–4) every c_period arrivals.

Local training runs lazily, batched and in bounded chunks: a request's result depends only
on its model snapshot, its client's data and its seed (§4.3), so when a completion is popped
whose result is missing, the ``max_batch`` untrained outstanding requests that complete
first are trained together (one executor call per task). At most ``max_batch`` results are
held at once, whatever R; a request keeps its model version until its result is consumed.
Snapshots hold those results too (at most ``max_batch`` deltas): a stacked group of other
requests can differ from the original group in the last bits, so a resumed run that trained
them again would drift from the uninterrupted one.

Defaults for what the paper leaves open are those of §7: availability cap on distinct busy
clients, applied to the initial burst too (``cap_initial_burst``; the authors' code exempts
it, item 1); integer reallocation in units of r (item 5; option D needs R to be a multiple
of r with at least one unit per task, so the total budget never changes); Realloc counter
reset at each reallocation, skipped until every active task has V updates (item 7);
evaluation after every aggregation (item 10, ``eval_every``).

Departures from the authors' code, stated: under option D, b_m = ⌈A_m / r⌉ is computed at
each arrival before the replenishment that follows it (the code: after); ``variance:
code`` uses the window of the last V updates of every parameter, biases included, as one
estimate (the code skips biases and averages per-arrival estimates since the last
reallocation).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from wirelessfl.algorithms.fedast.hparams import FedASTHParams
from wirelessfl.algorithms.fedast.realloc import reallocate
from wirelessfl.algorithms.fedast.simtime import ClientPool, EventQueue, Request, VersionStore
from wirelessfl.algorithms.fedast.simulation import EvalHook, Simulation, TaskState, check_stop, split_budget
from wirelessfl.algorithms.fedast.tasks import TaskEnv, train_requests
from wirelessfl.engine.loop import Executor
from wirelessfl.models.base import Params
from wirelessfl.rng import Seeds


class FedAST(Simulation):
    """The FedAST server over ``tasks`` (option S or D; ``buffer=1`` is FedAST-NoBuffer).

    Parameters
    ----------
    tasks : list of TaskEnv
        The M tasks.
    pool : ClientPool
        The shared clients (latency model, FIFO queues, availability cap).
    executor : Executor
        Client engine.
    seeds : Seeds
        The run's streams (``sampling`` for client draws and budget hand-over, ``delays``
        for latencies, ``local`` for each request's mini-batch order).
    hp : FedASTHParams
        Server hyperparameters.
    """

    snapshot_fields = ("arrivals_since_realloc", "delays", "grid_evals", "pending", "pool",
                       "queue", "results", "sampling", "started", "states", "time", "versions")

    def __init__(self, tasks: list[TaskEnv], pool: ClientPool, executor: Executor, seeds: Seeds,
                 hp: FedASTHParams) -> None:
        if hp.option == "D" and (hp.requests % hp.ratio or hp.requests // hp.ratio < len(tasks)):
            raise ValueError(f"option D reallocates whole units of r={hp.ratio} requests: "
                             f"requests ({hp.requests}) must be a multiple of ratio with at "
                             f"least one unit per task ({len(tasks)} tasks)")
        self.tasks, self.pool, self.executor, self.seeds, self.hp = tasks, pool, executor, seeds, hp
        self.versions = VersionStore()
        self.queue = EventQueue()
        self.pending: dict[int, Request] = {}
        self.results: dict[int, Params] = {}
        self.sampling = seeds.generator("sampling")
        self.delays = seeds.generator("delays")
        self.time = 0.0
        self.grid_evals = 0
        self.started = False
        self.arrivals_since_realloc = 0
        m = len(tasks)
        per_task = split_budget(hp.requests, np.ones(m), self.sampling)
        self.states = [TaskState(params={k: v.detach().clone() for k, v in t.init_params.items()},
                                 target_requests=int(r), buffer_size=self._buffer_for(int(r)))
                       for t, r in zip(tasks, per_task)]
        for j, st in enumerate(self.states):
            self.versions.pin(j, (j, 0), st.params)

    # ------------------------------------------------------------------ requests
    def _buffer_for(self, requests: int) -> int:
        return self.hp.buffer or max(1, round(requests / self.hp.ratio))

    def _send(self, j: int, count: int, *, force: bool = False) -> int:
        """Send up to ``count`` requests of task j with its current model; how many went out."""
        st, sent = self.states[j], 0
        for _ in range(count):
            client = int(self.sampling.integers(self.pool.num_clients))
            req = self.pool.send(client, j, st.round, self.time, self.delays, force=force)
            if req is None:
                continue
            self.versions.acquire((j, st.round))
            self.pending[req.id] = req
            self.queue.push(req.done, req)
            st.outstanding += 1
            sent += 1
        return sent

    def _train_pending(self) -> None:
        """Train the ``max_batch`` untrained outstanding requests that complete first.

        One executor call per task; the results are held until their completion is popped.
        Beyond ``max_batch`` held results, those that complete last are dropped (they are
        trained again when needed, with the same numbers), so memory never grows with R.
        """
        order = {"key": lambda r: (r.done, r.id)}
        todo = sorted((r for r in self.pending.values() if r.id not in self.results),
                      **order)[:self.hp.max_batch]
        for j, task in enumerate(self.tasks):
            chunk = [r for r in todo if r.task == j]
            if not chunk:
                continue
            deltas = train_requests(
                self.executor, task, [self.versions[(j, r.version)] for r in chunk],
                [r.client for r in chunk], [self.seeds.int_seed("local", j, r.id) for r in chunk])
            for r, d in zip(chunk, deltas):
                self.results[r.id] = d.delta
        if len(self.results) > self.hp.max_batch:
            held = sorted((self.pending[i] for i in self.results), **order)
            for r in held[self.hp.max_batch:]:
                del self.results[r.id]

    def _drop(self, req: Request) -> None:
        """Forget an outstanding request (completed or cancelled) and free its version."""
        self.pending.pop(req.id)
        self.results.pop(req.id, None)
        self.versions.release((req.task, req.version))

    # ------------------------------------------------------------------ server
    def _aggregate(self, j: int) -> None:
        st = self.states[j]
        eta = self.hp.server_lr / st.buffered
        st.params = {k: v - eta * st.buffer_sum[k] for k, v in st.params.items()}
        st.round += 1
        st.buffer_sum, st.buffered = None, 0
        self.versions.pin(j, (j, st.round), st.params)

    def _finish(self, j: int, handover: bool = True) -> None:
        """Task j is done: cancel its requests and hand its budget over (§2.6)."""
        st = self.states[j]
        st.finished = True
        for req in [r for r in self.pending.values() if r.task == j]:
            self.pool.cancel(req)
            self._drop(req)
        st.outstanding = 0
        self.versions.unpin(j)
        active = [i for i, s in enumerate(self.states) if not s.finished]
        if not (active and handover):
            return
        shares = np.array([self.states[i].target_requests for i in active], float)
        extra = split_budget(st.target_requests, shares, self.sampling)
        st.target_requests = 0
        for i, e in zip(active, extra):
            s = self.states[i]
            s.target_requests += int(e)
            s.buffer_size = self._buffer_for(s.target_requests)
            if self.hp.option == "S":
                self._send(i, int(e))

    def _replenish(self, j: int) -> None:
        st = self.states[j]
        budget = sum(s.target_requests for s in self.states)
        total_out = sum(s.outstanding for s in self.states)
        k = min(2, max(0, st.target_requests - st.outstanding), max(0, budget - total_out))
        self._send(j, k)

    def _realloc(self) -> None:
        """Algorithm 3 with the variance estimate of Algorithm 4 (option D)."""
        if reallocate(self.states, self.tasks, self.hp, self.arrivals_since_realloc):
            self.arrivals_since_realloc = 0

    # ------------------------------------------------------------------ loop
    def run(self, on_eval: EvalHook, *, max_time: float = math.inf, eval_every: int = 1,
            max_rounds: int | None = None, on_checkpoint: Callable[[], None] | None = None,
            eval_interval: float | None = None) -> float:
        """Simulate until every task is finished, ``max_time`` or ``max_rounds`` per task.

        Tasks are evaluated after every ``eval_every`` aggregations, or with
        ``eval_interval`` on the simulated-time grid (:meth:`Simulation.evaluate_grid`).
        Returns the simulated time at the end.
        """
        every = None if eval_interval is not None else eval_every
        if not self.started:
            for j, st in enumerate(self.states):
                self._send(j, st.target_requests, force=not self.hp.cap_initial_burst)
            self.started = True
        rounds = sum(s.round for s in self.states)
        while len(self.queue) and not all(s.finished for s in self.states):
            if on_checkpoint is not None and sum(s.round for s in self.states) != rounds:
                rounds = sum(s.round for s in self.states)
                on_checkpoint()  # after a completed aggregation, between events
            t, req = self.queue.pop()
            if req.id not in self.pending:
                continue  # cancelled
            if t > max_time:
                break
            self.evaluate_grid(t, on_eval, eval_interval)
            if req.id not in self.pending:
                continue  # its task reached the target at a grid time before t
            self.time = t
            if req.id not in self.results:
                self._train_pending()
            delta = self.results[req.id]
            self._drop(req)
            self.pool.release(req)
            j, st = req.task, self.states[req.task]
            st.outstanding -= 1
            st.updates += 1
            st.staleness.append(st.round - req.version)
            st.buffer_sum = delta if st.buffer_sum is None else {
                k: st.buffer_sum[k] + v for k, v in delta.items()}
            st.buffered += 1
            self.arrivals_since_realloc += 1
            if self.hp.option == "D":
                st.window.append(delta)
                while len(st.window) > self.hp.window:
                    st.window.popleft()
                self._realloc()
                st.buffer_size = self.hp.buffer or max(1, math.ceil(st.outstanding / self.hp.ratio))
            if st.buffered >= st.buffer_size:
                self._aggregate(j)
                stop = check_stop(self.tasks[j], st, self.time, on_eval, every, max_rounds)
                if stop:
                    self._finish(j, handover=stop == "target")
                    continue
            self._replenish(j)
        return self.time
