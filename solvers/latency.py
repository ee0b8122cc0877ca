"""Round latency of HIST under OMA/TDMA and AirComp uploads.

Fang, Han, Brinton, "Federated Learning over Hierarchical Wireless Networks: Training Latency
Minimization via Submodel Partitioning", arXiv 2310.17890 (``docs/papers/hist.md`` §4.1, §5.7).

Only client computation and uplinks count (edge/cloud processing and downlinks are free).
Both models are linear in the mask size: an edge round of cell j with a submodel of d_j of
the d parameters takes τ_j = C_j · d_j / d, where C_j is the edge-round latency with the full
model:

- OMA, eq. (17): C_j = max_{i∈C_j} (H V_0 / F_i + n_j L_0 / R_i) — the paper's literal form,
  which charges n_j upload slots as long as client i's own; ``tdma="exact"`` uses
  max_i H V_0/F_i + Σ_i L_0/R_i instead (``docs/papers/hist.md`` §8 item 21);
- AirComp, eq. (35): C_j = max_i H V_0 / F_i + d t_s Δf / B (eq. (34): one entry per subcarrier
  and OFDM symbol, independent of n_j).

A global round takes max_j E τ_j (eq. (18)); HFedAvg is d_j = d. With masks counted in
hidden units (``docs/papers/hist.md`` §4.3 [default]) d_j/d is replaced by k_j/K.

Cells with different client counts are padded to a common n_max and carry ``client_mask``.

Examples
--------
>>> cpu = np.array([[1e9, 2e9], [4e9, 4e9]])        # 2 cells x 2 clients [Hz]
>>> rate = np.full((2, 2), 1e8)                     # [bit/s]
>>> C = full_model_latency_oma(cpu, rate, local_steps=10, cycles_per_step=1e6, model_bits=1e6)
>>> C.round(4).tolist()                             # max_i (H V0/F_i + n_j L0/R_i)
[0.03, 0.0225]
>>> float(round_latency(C, [50, 50], 100, edge_rounds=5))
0.075
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from channels.rates import BANDWIDTH_HZ, SUBCARRIER_HZ, SYMBOL_S
from channels.validation import as_finite, as_float, as_int, as_mask, short


def _cells_iv(name: str, x: ArrayLike, client_mask: ArrayLike | None,
              shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(x, (str, bytes)) or x is None or np.iscomplexobj(x):
        raise ValueError(f"`{name}` must be a real array of shape (..., N, n), got {short(x)}")
    try:
        x = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be an array of numbers") from None
    if x.ndim < 2:
        raise ValueError(f"`{name}` must have shape (..., N, n), got {x.shape}")
    if 0 in x.shape[-2:]:
        raise ValueError(f"`{name}` must hold at least one cell and one client (shape (..., N, n) "
                         f"with N, n >= 1), got {x.shape}")
    if shape is not None and x.shape != shape:
        raise ValueError(f"`{name}` must have the shape of `cpu_hz` {shape}, got {x.shape}")
    mask = np.ones(x.shape, bool) if client_mask is None else as_mask(
        "client_mask", client_mask, x.shape)
    if not (mask.sum(-1) > 0).all():
        raise ValueError("every cell needs at least one client (client_mask has an empty cell)")
    bad = mask & ~(np.isfinite(x) & (x > 0))
    if bad.any():
        raise ValueError(f"`{name}` must be finite and > 0 for every client, got {x[bad][:3]}")
    return x, mask


def _scalars(**values: float) -> None:
    """Each named scalar finite and > 0 (integers where the name says so).

    ``local_steps`` may also be an array (one H per client, broadcast against the cells):
    integers >= 0 (a client without data computes nothing).
    """
    for name, v in values.items():
        if name == "local_steps" and np.ndim(v) > 0:
            steps = as_finite(name, v, lo=0)
            if (np.floor(steps) != steps).any():
                raise ValueError("`local_steps` must hold integers")
        elif name in ("local_steps", "num_params"):
            as_int(name, v, lo=1)
        else:
            as_float(name, v, lo=0, lo_open=True)


def _overflow_checked(x: np.ndarray, what: str) -> np.ndarray:
    if not np.isfinite(x).all():
        raise ValueError(f"{what} overflows float64 (inputs too large); rescale the units")
    return x


def _masked_max(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, x, -np.inf).max(-1)


def full_model_latency_oma(cpu_hz: ArrayLike, rate_bps: ArrayLike, *, local_steps: int,
                           cycles_per_step: float, model_bits: float,
                           client_mask: ArrayLike | None = None,
                           tdma: str = "literal") -> np.ndarray:
    """Edge-round latency C_j of each cell with the full model under TDMA, eq. (17) with d_j = d.

    Parameters
    ----------
    cpu_hz : array_like, shape (..., N, n), float [Hz]
        CPU frequency F_i of every client (padded entries ignored).
    rate_bps : array_like, shape (..., N, n), float [bit/s]
        Uplink rate R_i of every client.
    local_steps : int or array_like of int, broadcastable to (..., N, n)
        H, or each client's own number of local steps (e.g. from local epochs).
    cycles_per_step : float [cycles]
        V_0, CPU cycles of one mini-batch update of the full model.
    model_bits : float [bit]
        L_0, bits of the full model (32 d by default in HIST).
    client_mask : array_like of bool, shape (..., N, n), optional
        True for real clients; n_j is its row sum.
    tdma : str
        ``"literal"`` (eq. (17)) or ``"exact"`` (slots summed over clients).

    Returns
    -------
    ndarray, shape (..., N), float [s]
    """
    cpu, mask = _cells_iv("cpu_hz", cpu_hz, client_mask)
    rate, _ = _cells_iv("rate_bps", rate_bps, mask, cpu.shape)
    _scalars(local_steps=local_steps, cycles_per_step=cycles_per_step, model_bits=model_bits)
    compute = local_steps * cycles_per_step / np.where(mask, cpu, 1.0)
    upload = model_bits / np.where(mask, rate, 1.0)
    with np.errstate(over="ignore"):
        if tdma == "literal":
            return _overflow_checked(_masked_max(compute + mask.sum(-1, keepdims=True) * upload,
                                                 mask), "the OMA latency")
        if tdma == "exact":
            return _overflow_checked(_masked_max(compute, mask) + np.where(mask, upload, 0.0)
                                     .sum(-1), "the OMA latency")
    raise ValueError(f"`tdma` must be 'literal' or 'exact', got {tdma!r}")


def full_model_latency_aircomp(cpu_hz: ArrayLike, *, local_steps: int, cycles_per_step: float,
                               num_params: int, bandwidth_hz: float = BANDWIDTH_HZ,
                               subcarrier_hz: float = SUBCARRIER_HZ, symbol_s: float = SYMBOL_S,
                               client_mask: ArrayLike | None = None) -> np.ndarray:
    """Edge-round latency C_j with the full model under AirComp, eq. (35) with d_j = d.

    Parameters
    ----------
    cpu_hz : array_like, shape (..., N, n), float [Hz]
        CPU frequency of every client.
    local_steps, cycles_per_step
        H and V_0 as in :func:`full_model_latency_oma`.
    num_params : int
        d, the entries uploaded with the full model.
    bandwidth_hz, subcarrier_hz, symbol_s : float
        B [Hz], Δf [Hz], t_s [s] of eq. (34).

    Returns
    -------
    ndarray, shape (..., N), float [s]
    """
    cpu, mask = _cells_iv("cpu_hz", cpu_hz, client_mask)
    _scalars(local_steps=local_steps, cycles_per_step=cycles_per_step, num_params=num_params,
             bandwidth_hz=bandwidth_hz, subcarrier_hz=subcarrier_hz, symbol_s=symbol_s)
    if subcarrier_hz > bandwidth_hz:
        raise ValueError(f"`subcarrier_hz` ({subcarrier_hz:g}) must not exceed `bandwidth_hz` "
                         f"({bandwidth_hz:g}): the band holds no subcarrier")
    compute = _masked_max(local_steps * cycles_per_step / np.where(mask, cpu, 1.0), mask)
    with np.errstate(over="ignore"):
        return _overflow_checked(compute + num_params * symbol_s * subcarrier_hz / bandwidth_hz,
                                 "the AirComp latency")


def edge_round_latency(full_latency: ArrayLike, sizes: ArrayLike, total: int) -> np.ndarray:
    """τ_j = C_j d_j / D for mask sizes d_j out of D (eqs. (17), (35)) [s], shape (..., N)."""
    total = as_int("total", total, lo=1)
    c = as_finite("full_latency", full_latency, lo=0)
    d = as_finite("sizes", sizes, lo=0, hi=total, shape=c.shape)
    with np.errstate(over="ignore"):
        return _overflow_checked(c * d / float(total), "the edge-round latency")


def round_latency(full_latency: ArrayLike, sizes: ArrayLike, total: int, *,
                  edge_rounds: int) -> np.ndarray:
    """Global-round latency max_j E τ_j, eq. (18) [s], shape (...)."""
    edge_rounds = as_int("edge_rounds", edge_rounds, lo=1)
    return edge_rounds * edge_round_latency(full_latency, sizes, total).max(-1)


def size_cap(total: int, num_cells: int, kappa: float = 9.0) -> int:
    """Per-cell cap from (19c): d_j ≤ U = ⌊κ D / (6N)⌋ with ε_th = κ δ_1².

    κ = 9 is the paper's ε_th = 9 δ_1² (U = ⌊1.5 D/N⌋); κ = 6 forces the uniform split.

    Examples
    --------
    >>> [size_cap(300, n) for n in (2, 4, 6, 8)]
    [225, 112, 75, 56]
    """
    kappa = as_float("kappa", kappa, lo=0, lo_open=True)
    total = as_int("total", total, lo=0)
    num_cells = as_int("num_cells", num_cells, lo=1)
    return int(np.floor(kappa * total / (6.0 * num_cells) + 1e-9))


def uniform_sizes(total: int, num_cells: int) -> np.ndarray:
    """The uniform split [code]: ⌊D/N⌋ to each of the first N−1 cells, the rest to the last.

    Examples
    --------
    >>> uniform_sizes(300, 8).tolist()
    [37, 37, 37, 37, 37, 37, 37, 41]
    """
    total = as_int("total", total, lo=0, hi=2**62)
    num_cells = as_int("num_cells", num_cells, lo=1, hi=10**8)
    sizes = np.full(num_cells, total // num_cells, dtype=np.int64)
    sizes[-1] += total - sizes.sum()
    return sizes
