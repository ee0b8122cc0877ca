"""Uplink questions without training: AirComp MSE, deadline outage, deadline-fitted bit widths.

The functions a wireless researcher calls to study what the training runs of
``network.deadline_s``, ``network.compression`` and ``network.aggregation: over_the_air``
do, for drawn channels alone. Everything is batched over leading dims (rounds, cells, Monte
Carlo draws) without Python loops over instances, validated, and returns typed results.

- :func:`aircomp_mse`: the per-entry MSE (25) of over-the-air aggregation of a given
  selection of clients with a given (or solved) receive beam and aggregation weights;
- :func:`deadline_outage`: which clients' digital uploads meet a round deadline, under
  ``tdma`` (the full band, one client after another, shortest upload first), ``fdma``
  (the band split equally, everyone at once) or ``round_robin`` (the slots shared equally
  among the clients still uploading), and how long the round lasts;
- :func:`fit_bit_widths`: per client, the most bits per parameter (stochastic b-bit
  quantisation) or the most entries (top-k) whose upload meets the deadline in the client's
  equal share of the link.

Rates are full-band rates R_i = B log2(1 + SNR ‖h_i‖²) (:func:`channels.tdma_rate`). Under
``fdma`` each of the S clients gets B/S at the same SNR, rate R_i / S (as RA-Fed's FDMA);
under ``tdma`` a client's share is the time (T − c)/S at rate R_i, so both give a client
the same budget R_i (T − c)/S bits for a deadline T after c seconds of computation.
Under ``round_robin`` the clients take the link's slots in turn, each at its rate R_i when
it transmits: while k clients are still uploading each has 1/k of the slots, so with the
solo times u_(1) ≤ … ≤ u_(S) (u_i = b_i / R_i) the j-th to finish ends at
c + Σ_{i≤j} (S − i + 1)(u_(i) − u_(i−1)) and the last at c + Σ_i u_i, as under ``tdma``;
its equal share of a deadline is again R_i (T − c)/S.

Examples
--------
>>> r = np.array([8e6, 2e6, 4e6])                      # bit/s
>>> out = deadline_outage(r, 4e6, 2.0, access="tdma")  # 4 Mbit each, 2 s deadline
>>> out.arrived.tolist(), float(out.seconds)            # 0.5 s + 1 s fit, 2 s more do not
([True, False, True], 2.0)
>>> fit_bit_widths(r, 1_000_000, 2.0, access="fdma").bits.tolist()
[5.0, 1.0, 2.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from channels.aircomp import AirCompCell
from channels.units import db_to_lin
from channels.validation import as_finite, as_float, as_int, as_mask

ACCESS = ("tdma", "fdma", "round_robin")
OPERATORS = ("quantize", "topk")
#: A deadline is met up to this relative rounding (a fitted upload ends at the deadline exactly).
_RTOL = 1e-9


@dataclass(frozen=True)
class DeadlineResult:
    """Who meets a round's deadline and how long the round lasts.

    Attributes
    ----------
    arrived : ndarray, shape (..., S), bool
        True for a client whose upload ends by the deadline.
    finish_s : ndarray, shape (..., S), float [s]
        When each client's upload ends (inf for a client with rate 0).
    seconds : ndarray, shape (...), float [s]
        The round's duration: the last upload's end when everyone arrives, else the deadline
        (the server waits until it).
    access : str
        ``tdma``, ``fdma`` or ``round_robin``.
    """

    arrived: np.ndarray
    finish_s: np.ndarray
    seconds: np.ndarray
    access: str


def _iv(rate_bps: ArrayLike, access: str, compute_s: ArrayLike,
        deadline_s: float | None) -> tuple[np.ndarray, np.ndarray, float]:
    if access not in ACCESS:
        raise ValueError(f"`access` must be one of {', '.join(ACCESS)}, got {access!r}")
    rate = as_finite("rate_bps", rate_bps, lo=0)
    if rate.ndim < 1 or rate.shape[-1] < 1:
        raise ValueError(f"`rate_bps` must have shape (..., S) with S >= 1, got {rate.shape}")
    compute = as_finite("compute_s", compute_s, lo=0, shape=rate.shape[:-1])
    deadline = math.inf if deadline_s is None else as_float("deadline_s", deadline_s, lo=0,
                                                            hi=1e12, lo_open=True)
    return rate, compute, deadline


def deadline_outage(rate_bps: ArrayLike, payload_bits: ArrayLike, deadline_s: float | None = None,
                    *, access: str = "tdma", compute_s: ArrayLike = 0.0) -> DeadlineResult:
    """Which uploads meet the deadline, and the round's duration.

    Parameters
    ----------
    rate_bps : array_like, shape (..., S), float [bit/s]
        Each transmitting client's full-band rate R_i (≥ 0).
    payload_bits : array_like, broadcastable to (..., S), float [bit]
        What each client uploads (≥ 0).
    deadline_s : float or None [s]
        The round deadline T (> 0), counted from the round's start; None: no deadline.
    access : str
        ``tdma``: the clients upload one after another on the full band, the shortest upload
        first (the order that lets the most clients finish by T); ``fdma``: all at once, each
        on B/S; ``round_robin``: the slots shared equally among the clients still uploading
        (module notes).
    compute_s : float or array_like, shape (...), [s]
        Time before the uploads start (the slowest client's local computation).

    Returns
    -------
    DeadlineResult
        Without a deadline, ``seconds`` is c + Σ_i b_i / R_i (``tdma``, ``round_robin``) or
        c + max_i S b_i / R_i (``fdma``), exactly the clock of ``network.model``.
    """
    rate, compute, deadline = _iv(rate_bps, access, compute_s, deadline_s)
    bits = as_finite("payload_bits", payload_bits, lo=0, shape=rate.shape)
    s = rate.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(bits > 0, bits / np.where(rate > 0, rate, 1.0), 0.0)
        up = np.where((rate == 0) & (bits > 0), np.inf, up)
    if access in ("tdma", "round_robin"):
        order = np.argsort(up, axis=-1, kind="stable")
        solo = np.take_along_axis(up, order, -1)
        if access == "round_robin":  # phase i: S − i + 1 clients share the slots
            with np.errstate(invalid="ignore"):  # inf − inf of two rate-0 clients
                gaps = np.nan_to_num(np.diff(solo, axis=-1, prepend=0.0), nan=0.0, posinf=np.inf)
            solo = gaps * np.arange(s, 0, -1)
        done = compute[..., None] + np.cumsum(solo, axis=-1)
        finish = np.empty_like(done)
        np.put_along_axis(finish, order, done, axis=-1)
        total = compute + up.sum(-1)  # in client order: the clock of network.model tdma
    else:
        finish = compute[..., None] + s * up
        total = finish.max(-1)
    arrived = finish <= deadline * (1 + _RTOL)
    seconds = np.where(arrived.all(-1), total, deadline)
    return DeadlineResult(arrived, finish, seconds, access)


@dataclass(frozen=True)
class BitWidths:
    """Per-client compression fitted to the deadline.

    Attributes
    ----------
    bits : ndarray, shape (..., S), float
        Bits per parameter of the compressed vector: ``full_bits`` when the uncompressed
        upload fits, 1..``max_bits`` for ``quantize``, ``full_bits`` (the kept values) for
        ``topk``; 0 for a client whose smallest upload does not fit (it is dropped).
    keep : ndarray, shape (..., S), float
        Fraction of entries sent (1 for ``quantize``; k/d for ``topk``; 0 when dropped).
    payload_bits : ndarray, shape (..., S), float [bit]
        What each client then uploads, everything counted (the grid ends of quantisation,
        the indices of top-k, the other vectors); the full upload for a dropped client.
    budget_bits : ndarray, shape (..., S), float [bit]
        Each client's budget R_i (T − c)/S.
    operator : str
        ``quantize`` or ``topk``.
    """

    bits: np.ndarray
    keep: np.ndarray
    payload_bits: np.ndarray
    budget_bits: np.ndarray
    operator: str

    @property
    def fits(self) -> np.ndarray:
        """True for a client that uploads by the deadline."""
        return self.bits > 0


def fit_bit_widths(rate_bps: ArrayLike, num_params: int, deadline_s: float, *,
                   operator: str = "quantize", access: str = "tdma", compute_s: ArrayLike = 0.0,
                   full_bits: int = 32, max_bits: int = 16, other_bits: ArrayLike = 0.0,
                   num_tensors: int = 1) -> BitWidths:
    """Per client, the largest upload of one d-vector that meets the deadline in its share.

    A client's budget is R_i (T − c)/S bits (its equal slot of a ``tdma`` frame, or its B/S
    band of ``fdma``, for the whole time left). It first pays ``other_bits`` (vectors it sends
    uncompressed), then:

    - the vector uncompressed (``full_bits`` · d) if it fits;
    - ``quantize``: b = ⌊(budget − other − 64·tensors) / d⌋ bits per entry, at most
      ``max_bits`` (each tensor also sends its grid's two fp32 ends);
    - ``topk``: k = ⌊(budget − other) / (``full_bits`` + ⌈log2 d⌉)⌋ entries, each a value
      and its index;

    and a client with b < 1 (k < 1) cannot upload in time: ``bits`` 0. A fitted upload ends
    exactly at the deadline at the boundary (one bit less of budget gives one bit less).

    Parameters
    ----------
    rate_bps : array_like, shape (..., S), float [bit/s]
        Full-band rates R_i.
    num_params : int
        d, entries of the compressed vector (as timed).
    deadline_s : float
        T (> 0).
    operator : str
        ``quantize`` or ``topk``.
    access : str
        ``tdma``, ``fdma`` or ``round_robin`` (the same budget, see the module notes).
    compute_s : float or array_like, shape (...)
        c, time before the uploads start.
    full_bits, max_bits : int
        Bits of an uncompressed entry (32) and the most of a quantised one (16, ≤ 24).
    other_bits : array_like, broadcastable to (..., S)
        Bits each client also uploads uncompressed (SCAFFOLD's control-variate change).
    num_tensors : int
        Tensors of the vector (each quantised on its own grid).

    Returns
    -------
    BitWidths
    """
    if operator not in OPERATORS:
        raise ValueError(f"`operator` must be one of {', '.join(OPERATORS)}, got {operator!r}")
    if deadline_s is None:
        raise ValueError("`deadline_s` is required: bit widths are fitted to a deadline")
    rate, compute, deadline = _iv(rate_bps, access, compute_s, deadline_s)
    d = as_int("num_params", num_params, lo=1, hi=10**13)
    full_bits = as_int("full_bits", full_bits, lo=1, hi=64)
    max_bits = as_int("max_bits", max_bits, lo=1, hi=min(24, full_bits))
    tensors = as_int("num_tensors", num_tensors, lo=1, hi=10**9)
    other = as_finite("other_bits", other_bits, lo=0, shape=rate.shape)
    s = rate.shape[-1]
    left = np.maximum(deadline - compute, 0.0)[..., None]
    budget = rate * left / s
    avail = budget * (1 + _RTOL) - other
    whole = avail >= full_bits * d
    if operator == "quantize":
        b = np.floor((avail - 64.0 * tensors) / d)
        b = np.where(whole, full_bits, np.clip(b, 0, max_bits))
        keep = np.where(b > 0, 1.0, 0.0)
        sent = np.where(whole, full_bits * d, b * d + 64.0 * tensors)
    else:
        per = full_bits + math.ceil(math.log2(d)) if d > 1 else full_bits
        k = np.where(whole, d, np.clip(np.floor(avail / per), 0, d))
        b = np.where(k > 0, float(full_bits), 0.0)
        keep = k / d
        sent = np.where(whole, full_bits * d, k * per)
    payload = np.where(b > 0, sent + other, full_bits * d + other)
    return BitWidths(b.astype(float), keep.astype(float), payload.astype(float), budget, operator)


@dataclass(frozen=True)
class AirCompMSE:
    """The AirComp MSE of a selection.

    Attributes
    ----------
    mse : ndarray, shape (...)
        Per-entry MSE (25) σ0²/ν² of the weighted estimate (inf when nobody is selected).
    beam : ndarray, shape (..., M), complex
        The receive beam a (unit norm).
    min_gain : ndarray, shape (...)
        min over selected clients of |aᴴh_i|² / (n p_i)² (the weakest effective link).
    """

    mse: np.ndarray
    beam: np.ndarray
    min_gain: np.ndarray


def aircomp_mse(h: ArrayLike, *, snr_db: float, selection: ArrayLike | None = None,
                weights: ArrayLike | None = None, beam: ArrayLike | None = None,
                method: str = "fast", seed: int = 0) -> AirCompMSE:
    """The per-entry MSE (25) of over-the-air aggregation for given clients and beam.

    The transceiver is HIST's (eqs. (22)–(25), :class:`channels.aircomp.AirCompCell`) with
    aggregation weights p_i and silent clients, as ``network.aggregation: over_the_air`` uses
    it: unselected clients send nothing and do not limit the power scaling.

    Parameters
    ----------
    h : array_like, shape (..., n, M), complex
        Channels of the n clients.
    snr_db : float
        P/σ0² per client [dB].
    selection : array_like, shape (..., n), bool, optional
        The transmitting clients (None: all).
    weights : array_like, shape (..., n), float, optional
        Aggregation weights p_i ≥ 0 (None: uniform over the selection).
    beam : array_like, shape (..., M), optional
        The receive beam; None: solved for the selected clients with ``method``
        (:func:`solvers.beamforming.solve`; unselected rows are replaced by a copy of a
        selected one so the batch stays rectangular, which leaves the max-min problem as is).
    method : str
        Beamforming method when ``beam`` is None.
    seed : int
        The beamformer's random starts.

    Returns
    -------
    AirCompMSE
    """
    from solvers.beamforming import solve

    h = as_finite("h", h, dtype=complex)
    if h.ndim < 2:
        raise ValueError(f"`h` must have shape (..., n, M), got {h.shape}")
    snr = db_to_lin(as_float("snr_db", snr_db, lo=-200, hi=200))
    n = h.shape[-2]
    if selection is not None and np.shape(selection)[-1:] != (n,):
        raise ValueError(f"`selection` must have shape (..., {n}), got {np.shape(selection)}")
    sel = (np.ones(h.shape[:-1], bool) if selection is None
           else as_mask("selection", selection, h.shape[:-1]))
    w = np.ones(h.shape[:-1]) if weights is None else as_finite(
        "weights", weights, lo=0, shape=h.shape[:-1])
    w = np.where(sel, w, 0.0)
    empty = w.sum(-1) == 0
    if empty.all():
        raise ValueError("`selection` and `weights` leave no client with a positive weight in "
                         "any instance: nothing would be aggregated (select at least one client "
                         "with weight > 0)")
    w = np.where(empty[..., None], 1.0, w)  # placeholder; its MSE is reported as inf
    if beam is None:
        first = np.argmax(w > 0, axis=-1)
        copy = np.take_along_axis(h, first[..., None, None], axis=-2)
        a = solve(np.where((w > 0)[..., None], h, copy), method, seed=seed).a
    else:
        a = as_finite("beam", beam, dtype=complex)
        if a.shape[-1:] != h.shape[-1:]:
            raise ValueError(f"`beam` must have shape (..., {h.shape[-1]}) (one weight per "
                             f"antenna), got {a.shape}")
        if not (np.abs(a).sum(-1) > 0).all():
            raise ValueError("`beam` must be non-zero in every instance")
    cell = AirCompCell(h, a, power=snr, weights=w)
    mse = np.where(empty, np.inf, cell.mse)
    return AirCompMSE(mse, cell.a, np.where(empty, 0.0, cell.min_gain))
