"""Argument checks shared by every layer (:mod:`channels`, :mod:`solvers`, :mod:`wirelessfl`).

Every public function validates what it is given and raises :class:`ValueError` naming the
argument, the value received and what is allowed; requests whose arrays would not fit in
memory are refused *before* anything is allocated (:func:`check_memory`).

Examples
--------
>>> as_float("lr", 0.1, lo=0, lo_open=True)
0.1
>>> as_float("lr", float("nan"))
Traceback (most recent call last):
...
ValueError: `lr` must be a finite number, got nan
>>> as_int("cells", 1e3, lo=1)
1000
>>> as_int("cells", 0, lo=1)
Traceback (most recent call last):
...
ValueError: `cells` must be an integer >= 1, got 0
"""

from __future__ import annotations

import math
import numbers
import os
import reprlib

import numpy as np
from numpy.typing import ArrayLike

_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlist, _repr.maxdict = 40, 40, 4, 4


def short(value: object) -> str:
    """A repr of ``value`` cut to a few dozen characters (error messages stay one short line)."""
    return _repr.repr(value)


def _bounds(lo, hi, lo_open: bool, hi_open: bool) -> str:
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo:g}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {hi:g}")
    return " and ".join(parts)


def _outside(x, lo, hi, lo_open: bool, hi_open: bool):
    bad = np.zeros(np.shape(x), bool)
    if lo is not None:
        bad |= (x <= lo) if lo_open else (x < lo)
    if hi is not None:
        bad |= (x >= hi) if hi_open else (x > hi)
    return bad


def as_float(name: str, value: object, *, lo: float | None = None, hi: float | None = None,
             lo_open: bool = False, hi_open: bool = False) -> float:
    """``value`` as a finite float in the given range, else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"`{name}` must be a number, got {short(value)}")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"`{name}` must be a finite number, got {x}")
    if _outside(x, lo, hi, lo_open, hi_open):
        raise ValueError(f"`{name}` must be {_bounds(lo, hi, lo_open, hi_open)}, got {x:g}")
    return x


def as_int(name: str, value: object, *, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int (integral floats such as ``1e3`` accepted) in ``[lo, hi]``."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok and isinstance(value, numbers.Real) and not isinstance(value, bool):
        ok = math.isfinite(float(value)) and float(value).is_integer()
    rng = " " + _bounds(lo, hi, False, False) if (lo is not None or hi is not None) else ""
    if not ok:
        raise ValueError(f"`{name}` must be an integer{rng}, got {short(value)}")
    v = int(value)
    if _outside(v, lo, hi, False, False):
        raise ValueError(f"`{name}` must be an integer{rng}, got {v}")
    return v


def as_finite(name: str, x: ArrayLike, *, lo: float | None = None, hi: float | None = None,
              lo_open: bool = False, hi_open: bool = False, dtype=float,
              shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``x`` as an array of finite values in the given range (complex: finite only).

    A real ``dtype`` refuses complex input (its imaginary part would be dropped); with
    ``shape``, the array is broadcast to it (a read-only view) or refused naming ``name``.
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise ValueError(f"`{name}` must be an array of numbers, got {short(x)}")
    if not np.issubdtype(np.dtype(dtype), np.complexfloating) and np.iscomplexobj(x):
        raise ValueError(f"`{name}` must be real, got complex values")
    try:
        arr = np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`{name}` must be an array of numbers ({str(exc)[:80]})") from None
    if shape is not None:
        arr = broadcast(name, arr, shape)
    if not np.isfinite(arr).all():
        raise ValueError(f"`{name}` must be finite everywhere (it holds NaN or Inf)")
    if not np.iscomplexobj(arr):
        bad = _outside(arr, lo, hi, lo_open, hi_open)
        if bad.any():
            raise ValueError(f"`{name}` must be {_bounds(lo, hi, lo_open, hi_open)} everywhere, "
                             f"got {np.asarray(arr)[bad].ravel()[0]:g}")
    return arr


def memory_budget() -> int:
    """Bytes one request may allocate: ``WIRELESSFL_MAX_BYTES``, else 60% of physical memory."""
    env = os.environ.get("WIRELESSFL_MAX_BYTES")
    if env:
        return int(float(env))
    try:
        return int(0.6 * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not POSIX: assume 8 GiB
        return 8 * 2**30


def check_memory(nbytes: float, what: str, fix: str) -> None:
    """Refuse (ValueError) a request whose arrays would take ``nbytes``, before allocating them.

    ``what`` names the request, ``fix`` says how to make it smaller.
    """
    try:
        finite = math.isfinite(float(nbytes)) and float(nbytes) >= 0
    except (TypeError, ValueError):
        finite = False
    if not finite:
        raise ValueError(f"{what}: its memory estimate is {short(nbytes)}, not a number of bytes "
                         "(a size in the request is not finite); check the sizes you passed")
    budget = memory_budget()
    if not nbytes <= budget:
        raise ValueError(f"{what} needs about {nbytes / 2**30:.3g} GiB, more than the "
                         f"{budget / 2**30:.3g} GiB this machine allows (WIRELESSFL_MAX_BYTES); {fix}")


def check_rng(rng: object, name: str = "rng") -> np.random.Generator:
    """``rng`` if it is a numpy Generator, else TypeError naming ``name``."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"`{name}` must be a numpy.random.Generator (np.random.default_rng(seed)), "
                        f"got {type(rng).__name__}")
    return rng


def broadcast(name: str, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``x`` broadcast to ``shape`` (a read-only view), else ValueError naming ``name``."""
    try:
        return np.broadcast_to(x, shape)
    except ValueError:
        raise ValueError(f"`{name}` of shape {np.shape(x)} does not broadcast to {tuple(shape)}"
                         ) from None


def as_mask(name: str, x: ArrayLike, shape: tuple[int, ...]) -> np.ndarray:
    """``x`` as a boolean array broadcast to ``shape``; 0/1 integers are accepted."""
    if isinstance(x, (str, bytes)) or x is None:
        raise ValueError(f"`{name}` must be a boolean array, got {short(x)}")
    arr = np.asarray(x)
    if arr.dtype != bool:
        if arr.dtype.kind not in "iu" or not np.isin(arr, (0, 1)).all():
            raise ValueError(f"`{name}` must be a boolean array (or 0/1 integers), got "
                             f"{arr.dtype} values")
        arr = arr.astype(bool)
    return broadcast(name, arr, shape)
