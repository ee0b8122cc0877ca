"""Which client engine a run trains on, and on which device (chosen once per run).

:func:`resolve_device` turns a config's ``device`` into a ``torch.device``;
:func:`make_executor` builds the :class:`~wirelessfl.engine.loop.Executor` of its
``engine``: the loop, the batched engine, or worker processes.
"""

from __future__ import annotations

from typing import Any

import torch

from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.loop import Executor, LoopExecutor
from wirelessfl.errors import ConfigError
from wirelessfl.models.base import FLModel


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``auto`` (cuda when available)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device cuda requested but no CUDA GPU is available; use --device cpu")
    return torch.device(name)


def make_executor(engine: str, device: torch.device, max_batch: int | None = None,
                  model: FLModel | None = None, workers: int = 2,
                  compile: str = "off", replay: str = "auto",  # noqa: A002
                  low_rank: str = "auto", worker_init: Any = None) -> Executor:
    """The client engine: ``loop``, ``batched``, ``auto`` or ``distributed``.

    ``distributed`` splits each round's clients over ``workers`` processes
    (:class:`~wirelessfl.engine.distributed.DistributedExecutor`; a run stops them at its end).

    ``auto`` is the batched engine: on 2 CPU cores it measured 1.9× the loop for the FCNN,
    1.6× for LeNet-5 (``benchmarks/engine.py``) and 5.6× for the quickstart's linear model;
    it runs updates it cannot stack (subclassed steps) through the loop itself. The
    exception is a model that sets ``loop_on_cpu`` (GPT-2 + LoRA: stacked attention measured
    0.35–0.78× the loop on 2 CPU cores, ``benchmarks/lora.py``), which ``auto`` runs on the
    loop on a CPU. ``compile`` is the batched engine's (and each distributed worker's)
    ``torch.compile`` mode, ``replay`` when it records and replays its steps and ``low_rank``
    whether it may keep linear weights low-rank
    (:class:`~wirelessfl.engine.batched.BatchedExecutor`, :mod:`wirelessfl.engine.replay`,
    :mod:`wirelessfl.models.lowrank`). ``worker_init``: what each distributed worker
    process runs first (a run's plug-ins).
    """
    if engine == "distributed":
        from wirelessfl.engine.distributed import DistributedExecutor

        return DistributedExecutor(workers, device.type, max_batch=max_batch, compile=compile,
                                   replay=replay, low_rank=low_rank, worker_init=worker_init)
    if engine == "auto" and device.type == "cpu" and getattr(model, "loop_on_cpu", False):
        return LoopExecutor(device)
    if engine in ("batched", "auto"):
        return BatchedExecutor(device, max_batch=max_batch, compile=compile, replay=replay,
                               low_rank=low_rank)
    return LoopExecutor(device)
