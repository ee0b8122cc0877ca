"""The simulation base of FedAST and its synchronous baselines (``docs/papers/fedast.md`` §2.3, §4.3).

Several tasks train on one client pool in simulated time: each task's server state is a
:class:`TaskState`; :class:`Simulation` holds what every method shares (evaluation on a
simulated-time grid, snapshots for resumable runs); :func:`check_stop` decides after an
aggregation whether a task is evaluated and done, and :func:`split_budget` splits a request
budget in proportion to shares.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wirelessfl.algorithms.fedast.snapshot import SnapshotError, decode, encode, snapshot_type
from wirelessfl.algorithms.fedast.tasks import TaskEnv
from wirelessfl.models.base import Params


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


class Simulation:
    """What FedAST and the synchronous baselines share: snapshots for resumable runs.

    :meth:`state_dict` holds everything but what is rebuilt from the config on resume (tasks,
    executor, seeds, hyperparameters) and what a subclass names in ``_recomputed``: task
    states, event queue, client pool, model versions and the random generators, as plain
    data (:mod:`wirelessfl.algorithms.fedast.snapshot`, loadable with ``weights_only=True``), so a resumed run
    continues with the same numbers. ``run(..., on_checkpoint=f)`` calls ``f()`` after each
    completed aggregation (round), where such a snapshot is clean.
    """

    _rebuilt = ("tasks", "executor", "seeds", "hp")
    _recomputed: tuple[str, ...] = ()
    #: The attributes a snapshot holds, listed by each simulator: others (the config's
    #: ``_rebuilt`` parts, caches) stay out, so a new cache leaves saved snapshots loadable.
    snapshot_fields: tuple[str, ...] = ("grid_evals", "states")
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
        return encode({k: ({} if k in self._recomputed else getattr(self, k))
                       for k in self.snapshot_fields})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict` of the same configuration.

        Raises :class:`~wirelessfl.algorithms.fedast.snapshot.SnapshotError` (a ValueError) for a snapshot
        of another simulation or configuration.
        """
        plain = decode(state)
        mine = set(self.snapshot_fields)
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
        for k, v in plain.items():
            setattr(self, k, v)
