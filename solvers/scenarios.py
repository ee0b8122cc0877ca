"""Solver studies on a scenario: what ``wirelessfl masks`` and ``wirelessfl beamform`` report.

:func:`mask_size_study` solves the latency-optimal mask sizes of HIST (eqs. (20)/(36) under
the cap (19c)) for per-unit latencies c_j and compares them with uniform masks;
:func:`beamforming_study` solves max-min receive beamforming (eq. (33)) for a batch of SIMO
channels and reports the AirComp MSE (eq. (25)) and, on request, the gap to the SDR upper
bound. :func:`load_arrays` reads a scenario from an ``.npz`` file (data only, no pickles).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from channels.aircomp import AirCompCell
from channels.units import db_to_lin, lin_to_db
from channels.validation import as_float, as_int
from solvers import beamforming, mask_sizes
from solvers.latency import size_cap, uniform_sizes


def load_arrays(path: str | Path, names: tuple[str, ...], what: str) -> dict[str, np.ndarray]:
    """The arrays ``names`` of an ``.npz`` file (names missing from it are left out).

    ``what`` says what the file must hold, for the error. Object arrays are refused (no
    pickles are loaded).
    """
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such file; need an .npz with {what}")
    try:
        with np.load(path, allow_pickle=False) as f:
            got = {n: np.asarray(f[n]) for n in names if n in f}
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable .npz file; need an .npz with {what} "
                         f"({type(exc).__name__})") from exc
    if names[0] not in got:
        raise ValueError(f"{path}: need an .npz with {what} (no array {names[0]!r})")
    return got


@dataclass(frozen=True)
class MaskSizeStudy:
    """Optimal against uniform mask sizes for one scenario.

    Attributes
    ----------
    sizes : ndarray, shape (N,), int
        Optimal mask sizes k_j (sum K, each ≤ cap).
    uniform : ndarray, shape (N,), int
        Uniform sizes (K split as evenly as possible).
    cap : int
        The per-cell cap ⌊κK / 6N⌋ of (19c).
    round_latency_s, uniform_round_latency_s : float [s]
        E · max_j c_j k_j of the optimal and of the uniform sizes.
    saving : float
        1 − optimal / uniform round latency.
    backend : str
        Solver used; ``seconds`` its time [s].
    """

    sizes: np.ndarray
    uniform: np.ndarray
    cap: int
    round_latency_s: float
    uniform_round_latency_s: float
    saving: float
    backend: str
    seconds: float


def mask_size_study(unit_latency: ArrayLike, total: int, *, eps_th: float = 9.0,
                    edge_rounds: int = 5, backend: str = "exact") -> MaskSizeStudy:
    """Latency-optimal HIST mask sizes for per-unit latencies ``unit_latency`` [s], shape (N,).

    Raises ``ValueError`` for bad input and when the backend finds no solution; a missing
    backend raises :class:`~solvers.mask_sizes.SolverUnavailableError`.
    """
    c = np.asarray(unit_latency, dtype=float)
    if c.ndim != 1 or not c.size:
        raise ValueError(f"`unit_latency` must have shape (N,), got {c.shape}")
    as_int("edge_rounds", edge_rounds, lo=1, hi=10**9)
    cap = size_cap(total, c.size, as_float("eps_th", eps_th, lo=0, lo_open=True, hi=1e9))
    r = mask_sizes.solve(c, total, cap, backend=backend)
    if not r.success:
        raise ValueError(f"backend {backend} found no solution: {r.message}")
    uni = uniform_sizes(total, c.size)
    best, base = float(edge_rounds * r.latency), float(edge_rounds * (c * uni).max())
    return MaskSizeStudy(r.sizes, uni, cap, best, base, 1.0 - best / base, r.backend, r.seconds)


@dataclass(frozen=True)
class BeamformingStudy:
    """Receive beams for a batch of cells and what they give.

    Attributes
    ----------
    result : BeamformingResult
        The solver's result (``a``, ``min_gain``, ``upper_bound``, ...).
    mse_db : ndarray, shape (...,), float [dB]
        AirComp MSE of eq. (25) at the given SNR, per instance.
    ratio_to_bound : ndarray or None, shape (...,)
        min gain / SDR upper bound (with ``bound``).
    """

    result: beamforming.BeamformingResult
    mse_db: np.ndarray
    ratio_to_bound: np.ndarray | None = None


def beamforming_study(h: ArrayLike, method: str = "fast", *, snr_db: float = 30.0,
                      bound: bool = False, seed: int = 0) -> BeamformingStudy:
    """Max-min receive beamforming for channels ``h`` (..., n, M), complex, CN(0, 1) fading.

    ``snr_db`` is P/σ0² [dB] for the MSE; ``bound`` also solves the SDR relaxation (the
    ``certified`` method carries it already).
    """
    snr = db_to_lin(as_float("snr_db", snr_db, lo=-200, hi=200))
    r = beamforming.solve(h, method, seed=seed)
    mse = AirCompCell(np.asarray(h), r.a, power=snr).mse
    ratio = None
    if bound:
        upper = (r.upper_bound if r.method == "certified"
                 else beamforming.solve(h, "sdr", seed=seed).upper_bound)
        ratio = r.min_gain / upper
    return BeamformingStudy(r, lin_to_db(mse), ratio)
