"""How Sync-ST's variants assign a round's clients to the tasks (``docs/papers/fedast.md`` §3.1–3.4).

:class:`RandomAssignment` (Sync-ST: random blocks), :class:`BayesAssignment`
(Sync-Bayes-ST: a Gaussian process with a Matérn-3/2 kernel over past assignments and
their costs, expected improvement over random candidates) and :class:`UCBAssignment`
(Sync-UCB-ST: discounted UCB scores of each (task, client) pair from training losses).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from scipy.stats import norm
from typing_extensions import override

from wirelessfl.algorithms.fedast.hparams import SyncSTHParams
from wirelessfl.algorithms.fedast.snapshot import snapshot_type


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

    @override
    def assign(self, r, active, counts, rng):
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

    @override
    def assign(self, r, active, counts, rng):
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

    @override
    def observe(self, active, kept, durations, losses):
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

    @override
    def assign(self, r, active, counts, rng):
        options = [self._blocks(counts, rng, extra=5)
                   for _ in range(1 if len(self.seen) < 2 else self.candidates)]
        if len(options) > 1:
            ei = expected_improvement(np.array(self.seen), np.array(self.costs),
                                      np.array([self._vector(active, o) for o in options]))
            options = [options[int(np.argmax(ei))]]
        self._last = self._vector(active, options[0])
        return options[0], True

    @override
    def observe(self, active, kept, durations, losses):
        for j, clients in zip(active, kept):
            self.kept_counts[j, clients] += 1
        a = self.hp.bayes_alpha
        cost = (a * sum(float(d.max()) for d in durations)
                + (1 - a) * float(self.kept_counts[active].var(axis=1).sum()))
        self.seen.append(self._last)
        self.costs.append(cost)


ASSIGNMENTS = {"random": RandomAssignment, "bayes": BayesAssignment, "ucb": UCBAssignment}
