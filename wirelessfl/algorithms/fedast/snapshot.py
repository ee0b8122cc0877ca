"""Snapshots of simulation state in a form that cannot carry code.

A snapshot is written with :func:`torch.save` and read back with ``torch.load(...,
weights_only=True)``, which accepts tensors, numbers, strings, lists, tuples and dicts and
nothing that could run code. :func:`encode` turns a simulation's objects into such plain
data, with a tag for each kind of value those types cannot hold:

- ``{"__obj__": name, "state": {...}}`` for instances of the classes registered with
  :func:`snapshot_type` (and only those: :func:`decode` refuses any other name);
- ``{"__tuple__": [...]}``, ``{"__deque__": [...]}``, ``{"__items__": [[key, value], ...]}``
  (a mapping with keys that are not plain strings);
- ``{"__ndarray__": tensor}`` for numeric numpy arrays, ``{"__rng__": state}`` for a numpy
  ``Generator`` (its PCG64 state, so a resumed run continues the same random stream).

Examples
--------
>>> import numpy as np
>>> plain = encode({(0, 1): np.arange(3), "rng": np.random.default_rng(0)})
>>> back = decode(plain)
>>> back[(0, 1)].tolist(), int(back["rng"].integers(100)) == int(np.random.default_rng(0).integers(100))
([0, 1, 2], True)
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np
import torch

_TYPES: dict[str, type] = {}
_TAGS = ("__obj__", "__tuple__", "__deque__", "__items__", "__ndarray__", "__rng__")


class SnapshotError(ValueError):
    """A snapshot holds something that no registered type or tag describes."""


def snapshot_type(cls: type) -> type:
    """Class decorator: instances of ``cls`` may appear in snapshots (attributes encoded).

    Attributes named in the class's ``_snapshot_rebuilt`` are left out: the owner rebuilds
    them from the configuration (e.g. a client pool's latency model).
    """
    _TYPES[cls.__qualname__] = cls
    return cls


def encode(obj: Any) -> Any:
    """Plain data (tensors, numbers, strings, lists, dicts) that :func:`decode` turns back."""
    if isinstance(obj, np.generic):  # before float: np.float64 is a float subclass
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str, torch.Tensor)):
        return obj
    if isinstance(obj, list):
        return [encode(v) for v in obj]
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v) for v in obj]}
    if isinstance(obj, collections.deque):
        return {"__deque__": [encode(v) for v in obj], "maxlen": obj.maxlen}
    if isinstance(obj, dict):
        if all(isinstance(k, str) and k not in _TAGS for k in obj):
            return {k: encode(v) for k, v in obj.items()}
        return {"__items__": [[encode(k), encode(v)] for k, v in obj.items()]}
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise SnapshotError(f"cannot snapshot an array of dtype {obj.dtype}")
        return {"__ndarray__": torch.from_numpy(np.ascontiguousarray(obj).copy())}
    if isinstance(obj, np.random.Generator):
        return {"__rng__": obj.bit_generator.state}
    name = type(obj).__qualname__
    if _TYPES.get(name) is type(obj):
        skip = getattr(type(obj), "_snapshot_rebuilt", ())
        names = ([f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj)
                 else list(vars(obj)))  # a dataclass: its fields, not a cache beside them
        return {"__obj__": name, "state": encode({k: getattr(obj, k) for k in names
                                                  if k not in skip})}
    raise SnapshotError(f"cannot snapshot a {type(obj).__name__} (not a registered type)")


def decode(plain: Any) -> Any:
    """The objects :func:`encode` made ``plain`` from; SnapshotError for anything else."""
    if plain is None or isinstance(plain, (bool, int, float, str, torch.Tensor)):
        return plain
    if isinstance(plain, list):
        return [decode(v) for v in plain]
    if not isinstance(plain, dict):
        raise SnapshotError(f"unexpected {type(plain).__name__} in a snapshot")
    if "__tuple__" in plain:
        return tuple(decode(v) for v in plain["__tuple__"])
    if "__deque__" in plain:
        return collections.deque((decode(v) for v in plain["__deque__"]), plain.get("maxlen"))
    if "__items__" in plain:
        return {_key(decode(k)): decode(v) for k, v in plain["__items__"]}
    if "__ndarray__" in plain:
        return plain["__ndarray__"].numpy()
    if "__rng__" in plain:
        state = plain["__rng__"]
        if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
            raise SnapshotError("a random generator in the snapshot is not PCG64")
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = state
        return rng
    if "__obj__" in plain:
        cls = _TYPES.get(plain["__obj__"])
        if cls is None:
            raise SnapshotError(f"a snapshot names the unknown type {str(plain['__obj__'])[:40]!r}")
        state = decode(plain["state"])
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise SnapshotError(f"the snapshot of a {cls.__name__} is not a mapping of attributes")
        obj = cls.__new__(cls)
        obj.__dict__.update(state)
        return obj
    return {k: decode(v) for k, v in plain.items()}


def _key(k: Any) -> Any:
    try:
        hash(k)
    except TypeError:
        raise SnapshotError("a snapshot has a mapping key that cannot be hashed") from None
    return k
