"""SIMO Rayleigh block fading (Fang, Han, Brinton, arXiv 2310.17890, ``docs/papers/hist.md`` §5.3, §6.4).

Each single-antenna client i sees an M-antenna edge server through h_i ~ CN(0, g_i I_M):
unit-variance Rayleigh fading per complex entry (variance 1/2 per real dimension) times an
optional large-scale power gain g_i. HIST uses g_i = 1 (SNR absorbs all large-scale effects);
:func:`path_gain` gives distance path loss with optional log-normal shadowing for studies
with geometry.

Examples
--------
>>> h = simo_rayleigh((3, 4), 15, 10, np.random.default_rng(0))
>>> h.shape, h.dtype
((3, 4, 15, 10), dtype('complex128'))
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from channels.validation import as_finite, as_float, as_int, check_memory, check_rng


def simo_rayleigh(batch_shape: tuple[int, ...], n_clients: int, n_antennas: int,
                  rng: np.random.Generator, gain: ArrayLike | None = None) -> np.ndarray:
    """Draw SIMO channels h ~ CN(0, g I_M).

    Parameters
    ----------
    batch_shape : tuple of int
        Leading dims (e.g. rounds × cells).
    n_clients, n_antennas : int
        Clients n and receive antennas M.
    rng : numpy.random.Generator
        The channels stream.
    gain : array_like, broadcastable to (..., n), float, optional
        Large-scale power gain g_i (linear); 1 if None.

    Returns
    -------
    h : ndarray, shape (*batch_shape, n, M), complex128
    """
    check_rng(rng)
    batch_shape = tuple(as_int("batch_shape", b, lo=0) for b in batch_shape)
    n_clients = as_int("n_clients", n_clients, lo=1)
    n_antennas = as_int("n_antennas", n_antennas, lo=1)
    shape = (*batch_shape, n_clients, n_antennas)
    check_memory(48.0 * float(np.prod(shape, dtype=float)), f"channels of shape {shape}",
                 "draw fewer instances, clients or antennas")
    g = None if gain is None else as_finite("gain", gain, lo=0, shape=shape[:-1])
    h = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) / np.sqrt(2.0)
    if g is not None:
        h = h * np.sqrt(g)[..., None]
    return h


def path_gain(distance_m: ArrayLike, exponent: float = 3.0, *, ref_distance_m: float = 1.0,
              ref_loss_db: float = 0.0, shadowing_db: float = 0.0,
              rng: np.random.Generator | None = None) -> np.ndarray:
    """Large-scale power gain g = 10^(−PL/10), PL = PL0 + 10 η log10(r / r0) + X_σ.

    Parameters
    ----------
    distance_m : array_like, float [m]
        Client–server distances r (≥ ``ref_distance_m``).
    exponent : float
        Path-loss exponent η.
    ref_distance_m, ref_loss_db : float
        Reference distance r0 [m] and loss PL0 [dB] there.
    shadowing_db : float
        Standard deviation σ [dB] of log-normal shadowing X_σ (0 = none; needs ``rng``).
    """
    ref_distance_m = as_float("ref_distance_m", ref_distance_m, lo=0, lo_open=True)
    exponent = as_float("exponent", exponent, lo=0)
    ref_loss_db = as_float("ref_loss_db", ref_loss_db)
    shadowing_db = as_float("shadowing_db", shadowing_db, lo=0)
    r = as_finite("distance_m", distance_m)
    if (r < ref_distance_m).any():
        raise ValueError(f"`distance_m` must be >= ref_distance_m={ref_distance_m}")
    pl_db = ref_loss_db + 10.0 * exponent * np.log10(r / ref_distance_m)
    if shadowing_db:
        if rng is None:
            raise ValueError("shadowing needs `rng` (np.random.default_rng(seed))")
        check_rng(rng)
        pl_db = pl_db + rng.normal(0.0, shadowing_db, r.shape)
    return np.power(10.0, -pl_db / 10.0)
