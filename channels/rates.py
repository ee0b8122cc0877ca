"""Uplink rates and AirComp timing (``docs/papers/hist.md`` §6.4 and eq. (34)).

Examples
--------
>>> h = np.ones((1, 10)) / np.sqrt(10)          # ||h||^2 = 1
>>> float(tdma_rate(h, snr=1.0, bandwidth_hz=1.0)[0])
1.0
>>> aircomp_upload_time(600)                    # 600 entries on 600 subcarriers: one symbol
7.142857142857143e-05
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from channels.validation import as_finite, as_float

BANDWIDTH_HZ = 9e6  # B per cell, HIST §6.4
SUBCARRIER_HZ = 15e3  # Δf, 5G NR numerology 0
SYMBOL_S = 1.0 / 14e3  # t_s = 1/14 ms


def tdma_rate(h: ArrayLike, snr: ArrayLike, bandwidth_hz: float = BANDWIDTH_HZ) -> np.ndarray:
    """TDMA uplink rate R = B log2(1 + SNR ‖h‖²) with maximum-ratio reception.

    Parameters
    ----------
    h : array_like, shape (..., M), complex
        Channel of each client.
    snr : array_like, broadcastable to (...), float
        Transmit SNR P / σ0² (linear).
    bandwidth_hz : float [Hz]
        Bandwidth of a TDMA slot (the whole band of the cell).

    Returns
    -------
    ndarray, shape (...), float [bit/s]
    """
    h = as_finite("h", h, dtype=complex)
    if h.ndim < 1:
        raise ValueError(f"`h` must have shape (..., M) (one channel per antenna), got {h.shape}")
    snr = as_finite("snr", snr, lo=0, shape=h.shape[:-1])  # refused by name if it does not fit
    bandwidth_hz = as_float("bandwidth_hz", bandwidth_hz, lo=0, lo_open=True)
    with np.errstate(over="ignore"):
        rate = bandwidth_hz * np.log2(1.0 + snr * np.sum(np.abs(h) ** 2, -1))
    if not np.isfinite(rate).all():
        raise ValueError("`h` or `snr` is so large that the rate overflows float64; rescale them")
    return rate


def aircomp_upload_time(num_entries: ArrayLike, *, bandwidth_hz: float = BANDWIDTH_HZ,
                        subcarrier_hz: float = SUBCARRIER_HZ, symbol_s: float = SYMBOL_S,
                        ceil: bool = False) -> np.ndarray | float:
    """AirComp upload time of d_j entries, eq. (34): d_j / (B/Δf) · t_s [s].

    One entry per subcarrier per OFDM symbol, the same for every client count. The paper
    does not round the symbol count (default); ``ceil=True`` uses ⌈d_j / (B/Δf)⌉ symbols.
    """
    for name, v in (("bandwidth_hz", bandwidth_hz), ("subcarrier_hz", subcarrier_hz),
                    ("symbol_s", symbol_s)):
        as_float(name, v, lo=0, lo_open=True)
    symbols = as_finite("num_entries", num_entries, lo=0) / (bandwidth_hz / subcarrier_hz)
    out = (np.ceil(symbols) if ceil else symbols) * symbol_s
    return float(out) if np.ndim(out) == 0 else out
