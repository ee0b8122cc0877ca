"""One client's share of a round and what it sends back: :class:`ClientTask`, :class:`ClientResult`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from wirelessfl.engine.hparams import LocalHParams
from wirelessfl.models.base import Params


def task_lr(task: ClientTask, hp: LocalHParams) -> float:
    """The task's own step size, else the hyperparameters' (a scheduled 0 stays 0)."""
    return hp.lr if task.lr is None else task.lr


@dataclass(frozen=True)
class ClientTask:
    """One client's share of a round.

    Attributes
    ----------
    client : int
        Client id.
    params : Params
        Start model (full or sliced submodel).
    indices : ndarray, shape (n_i,), int64
        The client's samples in the training set.
    seed : int
        Seed of its mini-batch order and dropout (from the ``local`` stream).
    state : Any
        Its persistent state, or None.
    lr : float or None
        Per-client step size overriding ``LocalHParams.lr``.
    broadcast : Any
        Values the server sends to every client of the round with the model (SCAFFOLD's c,
        a teacher, ...), or None.
    buffers : Params or None
        The model's buffers (BatchNorm running statistics) the client starts from; it
        updates its own copy and returns it.
    """

    client: int
    params: Params
    indices: np.ndarray
    seed: int
    state: Any = None
    lr: float | None = None
    broadcast: Any = None
    buffers: Params | None = None


@dataclass(frozen=True)
class ClientResult:
    """What a client returns.

    Attributes
    ----------
    client : int
        Client id.
    delta : Params
        Pseudo-gradient ``start − end`` (same shapes as the task's params); empty when the
        executor folded it into a :class:`DeltaFold`.
    num_samples : int
        Local data size n_i.
    num_steps : int
        Local steps taken.
    loss : float
        Mean training loss over the steps (NaN if none).
    state : Any
        New persistent state.
    buffers : Params or None
        The client's buffers after local training (BatchNorm running statistics).
    """

    client: int
    delta: Params
    num_samples: int
    num_steps: int
    loss: float
    state: Any = None
    buffers: Params | None = None


def mover(device: torch.device) -> Callable[[Any], Any]:
    """A function that moves tensors, and dicts, lists and tuples of them, to ``device``.

    Each distinct tensor or container moves once (by identity, over all its calls), so
    objects that share a tensor keep sharing one; a container whose contents are already
    there is returned itself, and anything else is returned as it is.
    """
    moved: dict[int, Any] = {}

    def move(x: Any) -> Any:
        if id(x) in moved:
            return moved[id(x)]
        if isinstance(x, torch.Tensor):
            out = x.to(device)
        elif type(x) is dict:
            out = {k: move(v) for k, v in x.items()}
            out = x if all(out[k] is v for k, v in x.items()) else out
        elif type(x) in (list, tuple):
            items = [move(v) for v in x]
            out = x if all(a is b for a, b in zip(items, x)) else type(x)(items)
        else:
            return x  # anything else as it is (frozensets of ids, a rule's own objects)
        moved[id(x)] = out
        return out

    return move


def on_device(tasks: Sequence[ClientTask], device: torch.device) -> list[ClientTask]:
    """``tasks`` with their start models, buffers and broadcast tensors on ``device``.

    An executor trains on its own device whatever device a task's tensors come from (a
    server model kept on the host, a test's tasks built on the CPU): everything a rule
    reads in :meth:`LocalSGD.context` and :meth:`ClientUpdate.client_final` is then on the
    device of the round's parameters. Each distinct tensor moves once, so tasks that share
    a start keep sharing one tensor; tensors already there are not copied. A task's
    ``state`` stays where the client store keeps it (:mod:`wirelessfl.engine.client_store`
    loads it onto the parameters' device).
    """
    move = mover(device)
    out = []
    for t in tasks:  # a task already on the device is kept (1,000 tasks a round: no copies)
        params, buffers, broadcast = move(t.params), move(t.buffers), move(t.broadcast)
        out.append(t if params is t.params and buffers is t.buffers
                   and broadcast is t.broadcast
                   else replace(t, params=params, buffers=buffers, broadcast=broadcast))
    return out


class ClientError(RuntimeError):
    """A client failed; the message names the client and the stage."""

