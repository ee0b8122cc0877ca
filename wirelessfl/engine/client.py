"""The client's side of the engine, one name for plug-ins: its modules' public names re-exported.

The client's side is split by concept; a plug-in (a local rule, an algorithm) may import
from here or from the module itself:

- :mod:`wirelessfl.engine.hparams`: :class:`LocalHParams` (``local:``) and :func:`scheduled_lr`;
- :mod:`wirelessfl.engine.task`: one client's share of a round and what it sends back
  (:class:`ClientTask`, :class:`ClientResult`, :class:`ClientError`);
- :mod:`wirelessfl.engine.local_sgd`: the local rule as pure functions
  (:class:`ClientUpdate`, :class:`LocalSGD`, :class:`Carry`);
- :mod:`wirelessfl.engine.fold`: Δ folded into a weighted sum as clients finish
  (:class:`DeltaFold`);
- :mod:`wirelessfl.engine.precision`: float32 arithmetic on a GPU, forked generators;
- :mod:`wirelessfl.engine.evaluate`: test-set evaluation;
- :mod:`wirelessfl.engine.schedule`: mini-batch orders.

An *executor* (:mod:`wirelessfl.engine.loop`) decides how a rule runs over many clients:
:class:`~wirelessfl.engine.loop.LoopExecutor` one after another (the reference), the batched
executor (:mod:`wirelessfl.engine.batched`) on stacked clients. A round's clients go to it as
one :class:`~wirelessfl.engine.batch.ClientBatch` and come back as
:class:`~wirelessfl.engine.batch.ClientResults` (:mod:`wirelessfl.engine.batch`).
"""

from __future__ import annotations

from wirelessfl.engine.evaluate import evaluate
from wirelessfl.engine.fold import FOLD_BYTES, FOLD_TREES, DeltaFold, tree_bytes, weighted_sum
from wirelessfl.engine.hparams import (
    AUTOCAST,
    MAX_LOCAL_STEPS,
    PRECISIONS,
    SCALE_GROWTH_INTERVAL,
    SCALE_INIT,
    LocalHParams,
    scheduled_lr,
)
from wirelessfl.engine.local_sgd import (
    Carry,
    ClientUpdate,
    LocalSGD,
    check_corrected,
    keep_where,
    weighted_cross_entropy,
)
from wirelessfl.engine.precision import float32_arithmetic, forked_rng
from wirelessfl.engine.schedule import batch_schedule, steps_per_call
from wirelessfl.engine.task import ClientError, ClientResult, ClientTask, mover, on_device, task_lr

__all__ = ["AUTOCAST", "MAX_LOCAL_STEPS", "PRECISIONS", "SCALE_GROWTH_INTERVAL", "SCALE_INIT",
           "FOLD_BYTES", "FOLD_TREES", "Carry", "ClientError", "ClientResult", "ClientTask",
           "ClientUpdate", "DeltaFold", "LocalHParams", "LocalSGD", "batch_schedule",
           "check_corrected", "evaluate", "float32_arithmetic", "forked_rng", "keep_where",
           "mover", "on_device", "scheduled_lr", "steps_per_call", "task_lr", "tree_bytes",
           "weighted_cross_entropy", "weighted_sum"]
