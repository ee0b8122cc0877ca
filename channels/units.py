"""Unit converters: decibels and linear power ratios.

Examples
--------
>>> db_to_lin(30.0)
1000.0
>>> float(lin_to_db(db_to_lin(-20.0)))
-20.0
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from channels.validation import as_finite


def db_to_lin(x_db: ArrayLike) -> np.ndarray | float:
    """10^(x/10): a power ratio in dB to linear (finite dB values, below about 3000 dB)."""
    x = as_finite("x_db", x_db, hi=3000.0)
    out = np.power(10.0, x / 10.0)
    return float(out) if out.ndim == 0 else out


def lin_to_db(x: ArrayLike) -> np.ndarray | float:
    """10 log10(x): a linear power ratio (finite, > 0) to dB."""
    out = 10.0 * np.log10(as_finite("x", x, lo=0, lo_open=True))
    return float(out) if out.ndim == 0 else out
