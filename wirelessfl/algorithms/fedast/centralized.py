"""Centralized training: the reference line of FedAST's Figs. 3/13 (``docs/papers/fedast.md`` §3.7).

One model per task trained on the pooled data of every client. The paper gives no details;
the spec's **[default]**, used here: the task's architecture, plain SGD with the task's
client learning rate, weight decay and batch size, ``epochs`` shuffled passes over the
pooled samples (each distinct sample once per pass), evaluated after every pass. The pooled
data are one client holding everything, so the client engine trains it.

There is no simulated clock: records carry time 0 and the round is the epoch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from wirelessfl.algorithms.fedast.simtime import ClientPool
from wirelessfl.algorithms.fedast.simulation import EvalHook, Simulation, TaskState, check_stop
from wirelessfl.algorithms.fedast.tasks import TaskEnv
from wirelessfl.engine.client import ClientTask
from wirelessfl.engine.loop import Executor
from wirelessfl.rng import Seeds


@dataclass(frozen=True)
class CentralizedHParams:
    """Centralized: each task trained alone on the union of its clients' samples (a reference).

    Attributes
    ----------
    epochs : int
        Passes over the pooled data ("to convergence", §3.7 [default] 10).
    """

    epochs: int = 10

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"`epochs` must be >= 1, got {self.epochs}")


class Centralized(Simulation):
    """Each task's model trained alone on the union of its clients' samples.

    The constructor takes the arguments every multi-task method takes; the client pool is
    not used (nothing is scheduled).
    """

    snapshot_fields = ("grid_evals", "pooled", "states")

    def __init__(self, tasks: list[TaskEnv], pool: ClientPool, executor: Executor, seeds: Seeds,
                 hp: CentralizedHParams) -> None:
        del pool
        self.tasks, self.executor, self.seeds, self.hp = tasks, executor, seeds, hp
        self.pooled = [np.unique(np.concatenate(t.client_indices)) for t in tasks]
        self.grid_evals = 0
        self.states = [TaskState(params={k: v.detach().clone() for k, v in t.init_params.items()})
                       for t in tasks]

    def run(self, on_eval: EvalHook, *, max_time: float = math.inf, eval_every: int = 1,
            max_rounds: int | None = None, on_checkpoint: Callable[[], None] | None = None,
            eval_interval: float | None = None) -> float:
        """``epochs`` passes per task (fewer with ``max_rounds``); the end time, 0.

        ``eval_interval`` does not apply either (no clock): every pass is evaluated.

        ``max_time`` does not apply (no simulated clock).
        """
        epochs = self.hp.epochs if max_rounds is None else min(self.hp.epochs, max_rounds)
        for j, (task, st) in enumerate(zip(self.tasks, self.states)):
            one_pass = dataclasses.replace(task.local, epochs=1, drop_last=False)
            while st.round < epochs and not st.finished:
                if on_checkpoint is not None:
                    on_checkpoint()
                job = ClientTask(client=0, params=st.params, indices=self.pooled[j],
                                 seed=self.seeds.int_seed("local", j, st.round))
                [res] = self.executor.run(task.update, task.splits.train, [job], one_pass)
                st.params = {k: v - res.delta[k] for k, v in st.params.items()}
                st.round += 1
                st.updates += 1
                st.finished = check_stop(task, st, 0.0, on_eval, eval_every,
                                         epochs) is not None
        return 0.0
