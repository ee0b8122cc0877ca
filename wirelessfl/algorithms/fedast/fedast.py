"""FedAST: buffered asynchronous training of several tasks on one client pool.

``specs/fedast.md`` §2 (Algorithms 1–4), run as a discrete-event simulation (§2.3, §4.3)
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
held at once, whatever R; a request keeps its model version until its result is consumed,
so snapshots store versions, never results (a resumed run trains them again, with the same
numbers).

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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from channels.validation import as_float, as_int
from wirelessfl.algorithms.fedast.simtime import ClientPool, EventQueue, Request, VersionStore
from wirelessfl.algorithms.fedast.snapshot import SnapshotError, decode, encode, snapshot_type
from wirelessfl.algorithms.fedast.tasks import TaskEnv, train_requests
from wirelessfl.engine.client import Executor
from wirelessfl.models.base import Params
from wirelessfl.rng import Seeds


@dataclass(frozen=True)
class FedASTHParams:
    """FedAST's server hyperparameters (§2.7).

    Attributes
    ----------
    option : str
        ``S`` (static) or ``D`` (dynamic Realloc).
    requests : int
        Total request budget R, split evenly at the start (R_m^(0) = R / M).
    ratio : int
        r = R_m / b_m, held fixed (32 [code]).
    buffer : int or None
        Fixed buffer size b_m (None: max(1, round(R_m / r)), §7 item 12); 1 is FedAST-NoBuffer.
    server_lr : float
        η_s (0.1 for FedAST, 0.038 for NoBuffer).
    window : int
        V, the number of recent updates of the variance estimate.
    period : float
        c_period = ``period`` × M × Σ_m R_m arrivals between reallocations.
    variance : str
        ``paper`` (R_m ∝ √(η_c η_s τ σ̃²)) or ``code`` (∝ η_s σ̃² / (η_c τ²), §7 item 6).
    max_batch : int
        Most requests trained in one executor call, and most trained results held at once
        (bounds memory whatever R; the results do not depend on it).
    cap_initial_burst : bool
        Apply the availability cap to the initial R requests too (default, so the cap is
        never exceeded; refused ones are made up at later arrivals); ``False`` exempts the
        burst as the authors' code does (§7 item 1).
    """

    option: str = "S"
    requests: int = 384
    ratio: int = 32
    buffer: int | None = None
    server_lr: float = 0.1
    window: int = 8
    period: float = 0.75
    variance: str = "paper"
    max_batch: int = 64
    cap_initial_burst: bool = True

    def __post_init__(self) -> None:
        if self.option not in ("S", "D"):
            raise ValueError(f"`option` must be S or D, got {self.option!r}")
        if self.variance not in ("paper", "code"):
            raise ValueError(f"`variance` must be paper or code, got {self.variance!r}")
        if self.requests < 1 or self.ratio < 1 or (self.buffer is not None and self.buffer < 1):
            raise ValueError("`requests`, `ratio` and `buffer` must be >= 1")
        as_int("requests", self.requests, lo=1, hi=10**5)
        as_int("ratio", self.ratio, lo=1, hi=10**5)
        as_float("server_lr", self.server_lr, lo=0, hi=1e4, lo_open=True)
        as_int("window", self.window, lo=2, hi=10**4)
        as_float("period", self.period, lo=0, hi=1e6, lo_open=True)
        as_int("max_batch", self.max_batch, lo=1, hi=4096)


@snapshot_type
@dataclass
class TaskState:
    """Server state of one task (§2.2)."""

    params: Params
    round: int = 0
    target_requests: int = 0  # R_m
    buffer_size: int = 1  # b_m
    outstanding: int = 0  # A_m
    buffer_sum: Params | None = None
    buffered: int = 0
    window: deque = field(default_factory=deque)
    finished: bool = False
    updates: int = 0
    staleness: list[int] = field(default_factory=list)

    @property
    def mean_staleness(self) -> float:
        """Mean staleness of the updates received so far (0 before the first)."""
        return sum(self.staleness) / max(1, len(self.staleness))


#: ``on_eval(task, state, time)`` is called after each evaluated aggregation; it returns
#: whether the task is done (e.g. its test accuracy reached the target), which stops it.
EvalHook = Callable[[TaskEnv, TaskState, float], bool]


def check_stop(task: TaskEnv, st: TaskState, now: float, on_eval: EvalHook,
               eval_every: int | None, max_rounds: int | None) -> str | None:
    """After an aggregation: evaluate when due; ``"target"`` if done, ``"cap"`` at the round cap.

    ``eval_every=None`` (evaluations on a simulated-time grid) evaluates only at the cap.
    """
    last = max_rounds is not None and st.round >= max_rounds
    due = last or (eval_every is not None and st.round % eval_every == 0)
    if due and on_eval(task, st, now):
        return "target"
    return "cap" if last else None


def split_budget(total: int, shares: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``total`` units in proportion to ``shares``: floors, then the rest at random (§2.6 [code])."""
    shares = np.asarray(shares, float)
    base = np.floor(total * shares / shares.sum()).astype(int)
    extra = rng.choice(len(shares), size=total - base.sum(), replace=True,
                       p=shares / shares.sum())
    return base + np.bincount(extra, minlength=len(shares))


def realloc_units(total: int, ratio: int, sigma: np.ndarray) -> np.ndarray:
    """Targets R_m in whole units of r ∝ σ̂_m, at least one unit each (§7 item 5).

    The result sums to ``total`` only when ``total`` is a multiple of ``ratio`` with at least
    one unit per task; :class:`FedAST` refuses option D otherwise.
    """
    units = max(total // ratio, len(sigma))
    share = units * sigma / sigma.sum()
    got = np.ones(len(sigma), int)
    for _ in range(units - len(sigma)):
        got[int(np.argmax(share - got))] += 1
    return got * ratio


def normalised_variance(window: list[Params]) -> float:
    """σ̃² = mean_k ‖Δ_k − Δ̄‖² / ‖Δ̄‖² over the last V updates (Algorithm 4, step 2)."""
    flat = torch.stack([torch.cat([v.flatten() for v in d.values()]) for d in window])
    mean = flat.mean(0)
    return float(((flat - mean) ** 2).sum(1).mean() / mean.square().sum().clamp_min(1e-30))


class Simulation:
    """What FedAST and the synchronous baselines share: snapshots for resumable runs.

    :meth:`state_dict` holds everything but what is rebuilt from the config on resume (tasks,
    executor, seeds, hyperparameters) and what can be recomputed (trained results): task
    states, event queue, client pool, model versions and the random generators, as plain
    data (:mod:`wirelessfl.algorithms.fedast.snapshot`, loadable with ``weights_only=True``), so a resumed run
    continues with the same numbers. ``run(..., on_checkpoint=f)`` calls ``f()`` after each
    completed aggregation (round), where such a snapshot is clean.
    """

    _rebuilt = ("tasks", "executor", "seeds", "hp")
    _recomputed: tuple[str, ...] = ()
    grid_evals: int  # grid times evaluated so far (set by each simulator's constructor)

    def evaluate_grid(self, now: float, on_eval: EvalHook, interval: float | None) -> None:
        """Evaluate every active task at each grid time k·``interval`` ≤ ``now`` not yet done.

        Called before the event at ``now`` is applied, so a grid time sees the models of
        that moment; every method then evaluates at the same simulated times (FedAST E4's
        time to target, issue 16 item 18). A task whose evaluation reaches its target
        finishes there (``_finish``).
        """
        if interval is None:
            return
        while (self.grid_evals + 1) * interval <= now and not all(s.finished for s in self.states):
            self.grid_evals += 1
            for j, st in enumerate(self.states):
                if not st.finished and on_eval(self.tasks[j], st, self.grid_evals * interval):
                    self._finish(j)

    def _finish(self, j: int) -> None:
        self.states[j].finished = True

    def state_dict(self) -> dict[str, Any]:
        """The simulation's state as plain data (tensors, numbers, lists, dicts)."""
        return encode({k: ({} if k in self._recomputed else v) for k, v in vars(self).items()
                       if k not in self._rebuilt})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict` of the same configuration.

        Raises :class:`~wirelessfl.algorithms.fedast.snapshot.SnapshotError` (a ValueError) for a snapshot
        of another simulation or configuration.
        """
        plain = decode(state)
        mine = {k for k in vars(self) if k not in self._rebuilt}
        if not isinstance(plain, dict) or set(plain) != mine:
            raise SnapshotError("the snapshot is of another method or configuration")
        shapes = [[tuple(v.shape) for v in t.init_params.values()] for t in self.tasks]
        got = [[tuple(getattr(v, "shape", ())) for v in s.params.values()]
               for s in plain.get("states", [])]
        if got != shapes:
            raise SnapshotError("the snapshot's models do not match the tasks of config.yaml")
        for k, v in plain.items():  # attributes the snapshot leaves to the config
            for attr in getattr(type(v), "_snapshot_rebuilt", ()):
                setattr(v, attr, getattr(getattr(self, k), attr))
        vars(self).update(plain)


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

    _recomputed = ("results",)

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

    def _realloc(self) -> None:
        """Algorithm 3 with the variance estimate of Algorithm 4 (option D)."""
        active = [i for i, s in enumerate(self.states) if not s.finished]
        period = self.hp.period * len(active) * sum(self.states[i].target_requests for i in active)
        if self.arrivals_since_realloc < period or any(
                len(self.states[i].window) < self.hp.window for i in active):
            return
        self.arrivals_since_realloc = 0
        sigma = np.array([self._sigma(i) for i in active])
        if not np.isfinite(sigma).all() or sigma.sum() <= 0:
            return
        total = sum(self.states[i].target_requests for i in active)
        for i, r in zip(active, realloc_units(total, self.hp.ratio, sigma)):
            self.states[i].target_requests = int(r)

    def _sigma(self, j: int) -> float:
        """σ̂ of task j (paper) or the code variant's allocation weight (§7 item 6)."""
        task, st = self.tasks[j], self.states[j]
        var = normalised_variance(list(st.window))
        eta_c, eta_s, tau = task.local.lr, self.hp.server_lr, task.steps
        if self.hp.variance == "code":
            return eta_s * var / (eta_c * tau**2)
        return math.sqrt(eta_c * eta_s * tau * var)

    def _replenish(self, j: int) -> None:
        st = self.states[j]
        budget = sum(s.target_requests for s in self.states)
        total_out = sum(s.outstanding for s in self.states)
        k = min(2, max(0, st.target_requests - st.outstanding), max(0, budget - total_out))
        self._send(j, k)

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
