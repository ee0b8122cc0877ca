"""A task as the FedAST simulation sees it (``docs/papers/fedast.md`` §4.4–4.6), and its local training.

:class:`TaskEnv` is built from a task's config by :func:`wirelessfl.run.tasks.build_tasks`;
:func:`train_requests` runs a batch of one task's requests through the client engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from wirelessfl.data.arrays import DatasetSplits
from wirelessfl.engine.client import ClientResult, ClientTask, LocalHParams, LocalSGD, evaluate
from wirelessfl.engine.loop import Executor
from wirelessfl.models.base import FLModel, Params


@dataclass(eq=False)
class TaskEnv:
    """A task, built: data, partition over the pool, model, local training, test set."""

    index: int
    config: Any
    splits: DatasetSplits
    client_indices: tuple[np.ndarray, ...]
    model: FLModel
    init_params: Params
    update: LocalSGD
    local: LocalHParams
    device: torch.device
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The task's label."""
        return self.config.name

    @property
    def steps(self) -> int:
        """Local steps τ_m of a full client (for the latency model)."""
        hp = self.local
        if hp.epochs is None:
            return hp.steps
        per_epoch = int(self.config.data.samples_per_client or 1) // hp.batch_size
        return max(1, per_epoch) * hp.epochs

    def evaluate(self, params: Params) -> tuple[float, float]:
        """Test accuracy and loss."""
        return evaluate(self.model, params, self.splits.test, device=self.device)


def train_requests(executor: Executor, task: TaskEnv, starts: list[Params], clients: list[int],
                   seeds: list[int]) -> list[ClientResult]:
    """Local training of several requests of one task (pseudo-gradients sent − local, losses)."""
    jobs = [ClientTask(client=c, params=p, indices=task.client_indices[c], seed=s)
            for c, p, s in zip(clients, starts, seeds)]
    return executor.run(task.update, task.splits.train, jobs, task.local)
