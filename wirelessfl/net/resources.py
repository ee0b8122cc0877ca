"""Clients' compute and radio resources, and what they cost in seconds.

**HIST's scenario** (``docs/papers/hist.md`` §6.4).

Per global round: CPU frequencies F_i ~ U(1, 2) GHz in cells j ≤ N/2 and U(2, 4) GHz beyond
(drawn once per client by default [default]); SIMO Rayleigh channels h_i ~ CN(0, I_M) with
M = 10 drawn afresh; SNR 30 dB in the first half of the cells and 40 dB in the rest; TDMA
rate R_i = B log2(1 + SNR ‖h_i‖²) with B = 9 MHz. :func:`unit_latency` turns them into the
per-unit latency the mask-size solver takes.

**RA-Fed's resources** (beyond the paper, ``docs/papers/rafed.md``): each round's clients share
the band (FDMA) over fresh Rayleigh channels (:func:`draw_fdma_rates`); a submodel of
parameter fraction f costs f times the full model's compute and upload
(:func:`full_model_seconds`), and under a deadline each client takes the largest ratio
level that fits (:func:`largest_level_in_time`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from channels.rates import BANDWIDTH_HZ, tdma_rate
from channels.rayleigh import simo_rayleigh
from channels.units import db_to_lin
from channels.validation import as_float, as_int
from solvers.latency import full_model_latency_aircomp, full_model_latency_oma


@dataclass(frozen=True)
class Resources:
    """One round's client resources, per cell.

    Attributes
    ----------
    cpu_hz : ndarray, shape (N, n), float [Hz]
        CPU frequency F_i.
    rate_bps : ndarray, shape (N, n), float [bit/s]
        TDMA uplink rate R_i.
    snr : ndarray, shape (N,), float
        Linear SNR P_j / σ0² of each cell.
    """

    cpu_hz: np.ndarray
    rate_bps: np.ndarray
    snr: np.ndarray


def check_scenario(snr_db: tuple[float, float],
                   cpu_ghz: tuple[tuple[float, float], tuple[float, float]]) -> None:
    """Check a scenario's per-half SNRs and CPU ranges; ``ValueError`` if they are unusable.

    ``snr_db`` must be two finite dB values (|x| ≤ 200), ``cpu_ghz`` two (low, high) ranges
    of positive GHz (≤ 1000) with low ≤ high.
    """
    snr = np.asarray(snr_db, dtype=float)
    if snr.shape != (2,) or not np.isfinite(snr).all() or np.abs(snr).max() > 200:
        raise ValueError(f"snr_db must be two finite numbers of dB (|x| <= 200), got {snr_db}")
    for lo_hi in cpu_ghz:
        lo = as_float("cpu_ghz", lo_hi[0], lo=0, hi=1e3, lo_open=True)
        if not lo <= as_float("cpu_ghz", lo_hi[1], lo=0, hi=1e3, lo_open=True):
            raise ValueError(f"cpu_ghz ranges must be (low, high) with low <= high, got {lo_hi}")


def by_half(num_cells: int, first: ArrayLike, rest: ArrayLike) -> np.ndarray:
    """Per-cell values, shape (N, ...): ``first`` in cells j ≤ ⌊N/2⌋, ``rest`` beyond (§6.4)."""
    num_cells = as_int("num_cells", num_cells, lo=1, hi=10**6)
    head = np.arange(num_cells) < num_cells // 2
    first, rest = np.asarray(first, float), np.asarray(rest, float)
    return np.where(head.reshape(-1, *[1] * max(first.ndim, rest.ndim)), first, rest)


def draw_cpu(num_cells: int, clients_per_cell: int, rng: np.random.Generator, *,
             cpu_ghz: tuple[tuple[float, float], tuple[float, float]] = ((1, 2), (2, 4))
             ) -> np.ndarray:
    """CPU frequencies F_i [Hz], shape (N, n): ``cpu_ghz[0]`` in the first ⌊N/2⌋ cells."""
    if num_cells < 1 or clients_per_cell < 1:
        raise ValueError("need at least one cell and one client per cell")
    lo, hi = by_half(num_cells, cpu_ghz[0], cpu_ghz[1]).T
    return 1e9 * rng.uniform(lo[:, None], hi[:, None], (num_cells, clients_per_cell))


def draw_resources(num_cells: int, clients_per_cell: int, rng: np.random.Generator, *,
                   snr_db: tuple[float, float] = (30.0, 40.0),
                   cpu_ghz: tuple[tuple[float, float], tuple[float, float]] = ((1, 2), (2, 4)),
                   cpu_hz: np.ndarray | None = None, antennas: int = 10,
                   bandwidth_hz: float = BANDWIDTH_HZ) -> Resources:
    """Draw the §6.4 scenario: the first ⌊N/2⌋ cells get the first CPU range and SNR.

    ``cpu_hz`` (shape (N, n)) keeps given CPU frequencies and draws only the channels, for
    frequencies drawn once per client (§6.4 [default]).
    """
    if not np.isfinite(snr_db).all():
        raise ValueError(f"`snr_db` must be finite, got {snr_db}")
    if cpu_hz is None:
        cpu_hz = draw_cpu(num_cells, clients_per_cell, rng, cpu_ghz=cpu_ghz)
    snr = db_to_lin(by_half(num_cells, *snr_db))
    h = simo_rayleigh((num_cells,), clients_per_cell, antennas, rng)
    return Resources(cpu_hz, tdma_rate(h, snr[:, None], bandwidth_hz), snr)


def unit_latency(res: Resources, *, scheme: str, units: int, num_params: int,
                 local_steps: int | np.ndarray, cycles_per_step: float = 1e6,
                 bits_per_param: int = 32, client_mask: np.ndarray | None = None) -> np.ndarray:
    """c_j = C_j / K: a cell's edge-round latency per unit of mask [s], shape (N,).

    Masks are counted in hidden units (``docs/papers/hist.md`` §4.3 [default]): a cell with k_j of
    the K units uploads and computes a fraction k_j/K ≈ d_j/d of the model. ``local_steps``
    may be one H per client (N, n); ``client_mask`` (N, n) marks the real clients of cells
    padded to a common size (padded entries do not enter the max).
    """
    if scheme == "oma":
        full = full_model_latency_oma(res.cpu_hz, res.rate_bps, local_steps=local_steps,
                                      cycles_per_step=cycles_per_step,
                                      model_bits=bits_per_param * num_params,
                                      client_mask=client_mask)
    elif scheme == "aircomp":
        full = full_model_latency_aircomp(res.cpu_hz, local_steps=local_steps,
                                          cycles_per_step=cycles_per_step, num_params=num_params,
                                          client_mask=client_mask)
    else:
        raise ValueError(f"`scheme` must be 'oma' or 'aircomp', got {scheme!r}")
    return full / units


# --------------------------------------------------------------------------- RA-Fed's resources


def draw_fdma_rates(num_clients: int, clients: np.ndarray, rng: np.random.Generator, *,
                    antennas: int, snr_db: tuple[float, float], bandwidth_hz: float) -> np.ndarray:
    """Uplink rates [bit/s] of a round's ``clients``, shape (S,), sharing ``bandwidth_hz`` (FDMA).

    Every one of the ``num_clients`` clients draws a SIMO Rayleigh channel over ``antennas``
    receive antennas (the first ⌊N/2⌋ clients at ``snr_db[0]``, the rest at ``snr_db[1]``,
    as HIST's cells); the S = len(``clients``) of the round share the band equally.
    """
    h = simo_rayleigh((), num_clients, antennas, rng)
    snr = db_to_lin(by_half(num_clients, *snr_db))
    return tdma_rate(h, snr, bandwidth_hz / max(len(clients), 1))[clients]


def full_model_seconds(num_params: int, steps: ArrayLike, cpu_hz: ArrayLike, rate_bps: ArrayLike,
                       *, cycles_per_step: float, bits_per_param: float = 32.0) -> np.ndarray:
    """t_n(1) = T_n · cycles · / F_n + bits · d / R_n [s]: compute and upload of the full model.

    A submodel of parameter fraction f takes t_n(f) = f · t_n(1) (compute and upload both
    scale with the parameters kept). Shapes broadcast; ``num_params`` is d.
    """
    per_param = (np.asarray(steps) * cycles_per_step / np.asarray(cpu_hz) / num_params
                 + bits_per_param / np.asarray(rate_bps))   # seconds per parameter
    return per_param * num_params


def largest_level_in_time(full_s: np.ndarray, levels: ArrayLike, fractions: ArrayLike, *,
                          deadline_s: float | None, quantile: float) -> np.ndarray:
    """Each client's largest ratio level whose submodel meets the round deadline (0: none does).

    ``full_s`` (S,) are the full-model times, ``fractions`` the parameter fraction of each of
    the ``levels``; the deadline is ``deadline_s`` or, when None, the ``quantile`` of
    ``full_s``.

    Examples
    --------
    >>> largest_level_in_time(np.array([1.0, 4.0, 9.0]), [0.5, 1.0], [0.25, 1.0],
    ...                       deadline_s=2.0, quantile=0.5).tolist()
    [1.0, 0.5, 0.0]
    """
    full_s = np.asarray(full_s, float)
    deadline = (deadline_s if deadline_s is not None else
                float(np.quantile(full_s, quantile)) if len(full_s) else 0.0)
    fits = full_s[:, None] * np.asarray(fractions, float) <= deadline * (1 + 1e-12)
    return np.where(fits, np.asarray(levels, float), 0.0).max(axis=1, initial=0.0)
