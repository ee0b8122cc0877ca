"""Synchronous simultaneous training of several tasks: Sync-ST and its variants (``specs/fedast.md`` §3).

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
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from wirelessfl.algorithms.fedast.fedast import EvalHook, Simulation, TaskState, check_stop, split_budget
from wirelessfl.algorithms.fedast.simtime import ClientPool
from wirelessfl.algorithms.fedast.snapshot import snapshot_type
from wirelessfl.algorithms.fedast.tasks import TaskEnv, train_requests
from wirelessfl.engine.client import Executor
from wirelessfl.rng import Seeds


@snapshot_type
@dataclass(frozen=True)
class SyncSTHParams:
    """Sync-ST's hyperparameters (§3.1).

    Attributes
    ----------
    first_k : int or None
        Keep the k earliest finishers per task (30); None keeps all (NoStrag.Mit).
    clients : int
        Σ_m n_m, clients drawn per round (the 300 available).
    split : tuple of int or None
        n_m per task (e.g. 100/84/48/68); None splits ``clients`` evenly, the remainder at
        random.
    server_lr : float
        η_s (1: plain FedAvg averaging).
    assignment : str
        ``random`` (Sync-ST), ``bayes`` (Sync-Bayes-ST) or ``ucb`` (Sync-UCB-ST).
    bayes_alpha : float
        α of Sync-Bayes-ST's cost (latency vs fairness, 0.25 [code]).
    ucb_discount : float
        γ of Sync-UCB-ST (0.99 [code]).
    """

    first_k: int | None = 30
    clients: int = 300
    split: tuple[int, ...] | None = None
    server_lr: float = 1.0
    assignment: str = "random"
    bayes_alpha: float = 0.25
    ucb_discount: float = 0.99

    def __post_init__(self) -> None:
        if self.first_k is not None and self.first_k < 1:
            raise ValueError(f"`first_k` must be >= 1 or null, got {self.first_k}")
        if self.clients < 1 or not self.server_lr > 0:
            raise ValueError("`clients` must be >= 1 and `server_lr` > 0")
        if self.assignment not in ASSIGNMENTS:
            raise ValueError(f"`assignment` must be one of {', '.join(ASSIGNMENTS)}, got "
                             f"{self.assignment!r}")
        if self.split is not None and (sum(self.split) != self.clients or min(self.split) < 1):
            raise ValueError(f"`split` {self.split} must be positive and sum to `clients` "
                             f"({self.clients})")


class Assignment(ABC):
    """Which clients train which task in a round, and what it learns from the round."""

    def __init__(self, num_tasks: int, num_clients: int, hp: SyncSTHParams) -> None:
        self.num_tasks, self.num_clients, self.hp = num_tasks, num_clients, hp

    @abstractmethod
    def assign(self, r: int, active: list[int], counts: list[int],
               rng: np.random.Generator) -> tuple[list[np.ndarray], bool]:
        """Clients of each active task in round r, and whether first-k applies."""

    @abstractmethod
    def observe(self, active: list[int], kept: list[np.ndarray], durations: list[np.ndarray],
                losses: list[np.ndarray]) -> None:
        """The kept clients of each active task, their job durations and training losses."""

    def _blocks(self, counts: list[int], rng: np.random.Generator, extra: int = 0) -> list[np.ndarray]:
        """A random pool of Σ n_m (+ ``extra``) distinct clients cut into blocks of n_m."""
        pool = rng.permutation(self.num_clients)[:min(self.num_clients, sum(counts) + extra)]
        if extra:
            pool = rng.permutation(pool)[:sum(counts)]
        return np.split(pool, np.cumsum(counts)[:-1])


@snapshot_type
class RandomAssignment(Assignment):
    """Sync-ST: a random partition of Σ n_m distinct clients every round (§3.1)."""

    def assign(self, r, active, counts, rng):  # noqa: D102
        return self._blocks(counts, rng), True

    def observe(self, active, kept, durations, losses):
        """Nothing to learn: every round is a fresh random partition."""


@snapshot_type
class UCBAssignment(Assignment):
    """Sync-UCB-ST (§3.4): discounted UCB scores of each (task, client) pair.

    Discounted counts N and losses L, score A = L/N + √(2 ln(Σ_{s<r} γ^s) / N) (+∞ when
    N = 0); round 0 trains every client on every task with no first-k [code]; later, from a
    pool of Σ n_m + 5 clients, tasks take their n_m best-scoring clients in turn, starting
    from task r mod M.
    """

    def __init__(self, num_tasks: int, num_clients: int, hp: SyncSTHParams) -> None:
        super().__init__(num_tasks, num_clients, hp)
        self.counts = np.zeros((num_tasks, num_clients))
        self.losses = np.zeros((num_tasks, num_clients))
        self.rounds = 0

    def assign(self, r, active, counts, rng):  # noqa: D102
        if self.rounds == 0:
            return [np.arange(self.num_clients)] * len(active), False
        g = self.hp.ucb_discount
        horizon = (1 - g**self.rounds) / (1 - g)
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(self.counts > 0, self.losses / self.counts
                             + np.sqrt(2 * np.log(horizon) / self.counts), np.inf)
        pool = list(rng.permutation(self.num_clients)[:min(self.num_clients, sum(counts) + 5)])
        picks = {}
        for step in range(len(active)):
            slot = (r + step) % len(active)
            j = active[slot]
            best = np.argsort(-score[j, pool], kind="stable")[:counts[slot]]
            picks[j] = np.array([pool[b] for b in best])
            pool = [c for c in pool if c not in set(picks[j])]
        return [picks[j] for j in active], True

    def observe(self, active, kept, durations, losses):  # noqa: D102
        g = self.hp.ucb_discount
        self.counts *= g
        self.losses *= g
        for j, clients, loss in zip(active, kept, losses):
            self.counts[j, clients] += 1
            self.losses[j, clients] += np.nan_to_num(loss)
        self.rounds += 1


def matern32(d: np.ndarray, length: float) -> np.ndarray:
    """Matérn kernel with ν = 3/2 at distances ``d``: (1 + √3 d/ℓ) exp(−√3 d/ℓ)."""
    s = np.sqrt(3.0) * d / length
    return (1 + s) * np.exp(-s)


def expected_improvement(x_seen: np.ndarray, y_seen: np.ndarray, x_new: np.ndarray) -> np.ndarray:
    """EI (minimisation, ξ = 0) of a GP fitted to (x_seen, y_seen) at the rows of ``x_new``.

    Targets are standardised; the length scale maximises the log marginal likelihood over a
    grid (as scikit-learn's fit does by L-BFGS).
    """
    mu_y, sd_y = y_seen.mean(), y_seen.std() or 1.0
    y = (y_seen - mu_y) / sd_y
    dist = np.sqrt(((x_seen[:, None] - x_seen[None]) ** 2).sum(-1))
    best = None
    for length in np.geomspace(0.5, 200, 25):
        k = matern32(dist, length) + 1e-6 * np.eye(len(y))
        chol = np.linalg.cholesky(k)
        w = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
        ll = -0.5 * y @ w - np.log(np.diag(chol)).sum()
        if best is None or ll > best[0]:
            best = (ll, length, chol, w)
    _, length, chol, w = best
    cross = matern32(np.sqrt(((x_new[:, None] - x_seen[None]) ** 2).sum(-1)), length)
    mean = cross @ w
    v = np.linalg.solve(chol, cross.T)
    sd = np.sqrt(np.clip(1.0 - (v * v).sum(0), 1e-12, None))
    gain = y.min() - mean
    z = gain / sd
    return gain * norm.cdf(z) + sd * norm.pdf(z)


@snapshot_type
class BayesAssignment(Assignment):
    """Sync-Bayes-ST (§3.3 [code]): Bayesian optimisation of the assignment.

    Round 0 is random; later rounds run the best of 75 random candidates by expected
    improvement of a GP over (assignment vector, cost) pairs, with cost
    α Σ_m max_kept D + (1 − α) Σ_m Var_i(cnt_m,i) (cnt: times client i was kept for task m).

    Departures from the authors' code, stated: the GP is first used once two rounds have
    been observed (round 2; the code fits it from round 1), and each candidate draws its
    own pool of Σ n_m + 5 clients (the code reshuffles one pool for all candidates).
    """

    candidates = 75

    def __init__(self, num_tasks: int, num_clients: int, hp: SyncSTHParams) -> None:
        super().__init__(num_tasks, num_clients, hp)
        self.kept_counts = np.zeros((num_tasks, num_clients))
        self.seen: list[np.ndarray] = []
        self.costs: list[float] = []
        self._last: np.ndarray | None = None

    def _vector(self, active: list[int], blocks: list[np.ndarray]) -> np.ndarray:
        v = np.zeros((self.num_tasks, self.num_clients))
        for j, b in zip(active, blocks):
            v[j, b] = 1.0
        return v.ravel()

    def assign(self, r, active, counts, rng):  # noqa: D102
        options = [self._blocks(counts, rng, extra=5)
                   for _ in range(1 if len(self.seen) < 2 else self.candidates)]
        if len(options) > 1:
            ei = expected_improvement(np.array(self.seen), np.array(self.costs),
                                      np.array([self._vector(active, o) for o in options]))
            options = [options[int(np.argmax(ei))]]
        self._last = self._vector(active, options[0])
        return options[0], True

    def observe(self, active, kept, durations, losses):  # noqa: D102
        for j, clients in zip(active, kept):
            self.kept_counts[j, clients] += 1
        a = self.hp.bayes_alpha
        cost = (a * sum(float(d.max()) for d in durations)
                + (1 - a) * float(self.kept_counts[active].var(axis=1).sum()))
        self.seen.append(self._last)
        self.costs.append(cost)


ASSIGNMENTS = {"random": RandomAssignment, "bayes": BayesAssignment, "ucb": UCBAssignment}


class SyncST(Simulation):
    """Sync-ST over ``tasks`` on the clients of ``pool`` (its latency model and queue ends)."""

    uses_sync_local = True  # tasks train with their ``sync_local`` hyperparameters (§3.1)

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
