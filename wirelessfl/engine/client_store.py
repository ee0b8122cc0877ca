"""Per-client state kept off the compute device.

Algorithms with persistent client state (SCAFFOLD's c_i, FAdamGC's y_i and v_i, MOON's
previous local model) keep it in ``ServerState.client_states`` as trees on the CPU, in the
store's dtype (float32, or float16 to halve it). A round moves to the compute device only
the states of its own clients (:func:`load`), so device memory grows with the clients of a
round, not with the population; checkpoints save the store as it is, at the run's
``checkpoint_every`` interval, and load it onto the CPU.

Examples
--------
>>> from collections.abc import Sequence

import torch
>>> kept = store({"w": torch.ones(2)}, "float16")
>>> kept["w"].dtype, kept["w"].device.type
(torch.float16, 'cpu')
>>> load(kept, {"w": torch.zeros(2)})["w"].dtype
torch.float32
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from wirelessfl.engine import device_guard
from wirelessfl.models.base import Params

STORE_DTYPES = {"float32": torch.float32, "float16": torch.float16}
#: Dtypes :func:`zeros` and :func:`to_host` also take (index tensors kept beside a store).
HOST_DTYPES = {**STORE_DTYPES, "int64": torch.int64}


def store(tree: Params, dtype: str = "float32") -> Params:
    """``tree`` as the store keeps it: on the CPU, in ``dtype``."""
    if dtype not in STORE_DTYPES:
        raise ValueError(f"`state_dtype` must be one of {', '.join(STORE_DTYPES)}, got {dtype!r}")
    return device_guard.host({k: v.detach().to("cpu", STORE_DTYPES[dtype])
                              for k, v in tree.items()})


def zeros(shape: tuple[int, ...] | torch.Size, dtype: str = "float32") -> torch.Tensor:
    """A zero tensor as the store keeps it (host memory, ``dtype``)."""
    return device_guard.host(torch.zeros(tuple(shape), dtype=HOST_DTYPES[dtype]))


def to_host(t: torch.Tensor, dtype: str = "float32") -> torch.Tensor:
    """One tensor as the store keeps it (host memory, ``dtype``)."""
    return device_guard.host(t.detach().to("cpu", HOST_DTYPES[dtype]))


def load(tree: Params, like: Params) -> Params:
    """A stored ``tree`` on the device and in the dtype of ``like`` (a round's parameters)."""
    return {k: tree[k].to(like[k]) for k in like}


def nbytes(states: dict) -> int:
    """Bytes held by a mapping of client id → stored tree."""
    return sum(v.numel() * v.element_size() for t in states.values() for v in t.values())


def gathered(states: Sequence[Params | None] | None, like: Params) -> Params | None:
    """The clients' stored trees stacked, on the device and in the dtypes of ``like``.

    :func:`load` for a whole round at once: one stack per key. None when no client has a
    state; a client without one gets zeros.
    """
    if states is None or all(s is None for s in states):
        return None
    proto = next(s for s in states if s is not None)  # the store's dtype and device
    zero = {k: torch.zeros_like(proto[k]) for k in like}
    return {k: torch.stack([s[k] if s is not None else zero[k] for s in states]).to(v)
            for k, v in like.items()}


def client_trees(stack: Params, dtype: str = "float32") -> list[Params]:
    """A stack ``(C, …)`` as ``C`` trees the store keeps, each a copy of its own.

    One move to the host per key, then each client's row copied (a row that viewed the
    round's stack would keep the whole stack alive as long as the client's state lives).
    """
    host = {k: to_host(v.contiguous(), dtype) for k, v in stack.items()}
    keys = list(host)
    n = next(iter(host.values())).shape[0] if host else 0
    return [dict(zip(keys, (v[c].clone() for v in host.values()))) for c in range(n)]


def repeated(tree: Params | None, n: int, like: Params) -> Params:
    """One tree (or zeros, for None) as ``n`` rows of a stack, on ``like``'s device and dtypes."""
    out = {}
    for k, v in like.items():
        rows = v.new_empty((n, *v.shape))
        out[k] = rows.zero_() if tree is None else rows.copy_(tree[k].detach().to(v))
    return out
