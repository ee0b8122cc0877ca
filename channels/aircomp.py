"""AirComp aggregation in one cell: precoding, the received signal and its MSE.

Fang, Han, Brinton, arXiv 2310.17890, Sec. V (``docs/papers/hist.md`` §5.3–5.4, §5.9, §8.4).
Every client i of cell j sends the same entry k at once; the M-antenna edge server combines::

    (22)  δ̂_k = m_jᴴ ( Σ_i h_i α_i δ_{i,k} + z_k ),   z_k ~ CN(0, σ0² I_M),

with the channel-inversion precoder (23) α_i = (1/n_j) (m_jᴴ h_i)* / |m_jᴴ h_i|² and the
receive beam m_j = a_j / ν_j, ‖a_j‖ = 1, ν_j = √P_j min_i |a_jᴴ h_i|. The estimate is then::

    (24)  δ̂_k = (1/n_j) Σ_i δ_{i,k} + a_jᴴ z_k / ν_j,   unbiased, with
    (25)  MSE_j = σ0² / (P_j min_i |a_jᴴ h_i|²)  per entry, and
    (28)  Var = γ² Σ_{k ∈ S_j} MSE_j = γ² d_j MSE_j  for the edge update (27).

Everything is batched over leading dims (rounds, cells): h has shape (..., n, M), a (..., M).
Two ways to draw an estimate:

- :meth:`AirCompCell.receive` simulates (22) literally (complex α, m and z) and returns the
  complex estimate;
- :meth:`AirCompCell.estimate` is the fast path of §5.9: the exact average plus equivalent
  noise drawn directly. Parameters are real, so the default (paper-literal, §8.4 item 16)
  adds real N(0, MSE) noise; ``real_part=True`` instead matches the real part of (22), whose
  noise variance is MSE / 2.

``tight_power=True`` (§8.4 item 17) uses ν_j = n_j √P_j min_i |a_jᴴ h_i| so that the weakest
client transmits at full power P_j instead of P_j / n_j²; the MSE drops by n_j².

**Weighted aggregation and silent clients** (beyond HIST, for any algorithm's uplink):
``weights`` p_i ≥ 0 (normalised to sum 1) make the estimate Σ_i p_i δ_i with the precoder
α_i = p_i (m_jᴴ h_i)* / |m_jᴴ h_i|². A client with p_i = 0 sends nothing (truncated channel
inversion, Zhu, Wang, Huang, IEEE TWC 2020: clients whose channel is too weak stay silent;
or clients not selected). The k_j clients with p_i > 0 are the cell of (22)–(25): the
per-client power limit is |α_i|² ≤ P_j / k_j², which sets
ν_j = √P_j min_{p_i > 0} |a_jᴴ h_i| / (k_j p_i), and with p_i = 1/k_j the MSE is (25) over the
transmitting clients, σ0² / (P_j min_{p_i > 0} |a_jᴴ h_i|²). Silent clients neither limit ν_j
nor count in k_j (counting them, as n_j, would scale the MSE by (n_j / k_j)²).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> h = (rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))) / np.sqrt(2)
>>> cell = AirCompCell(h, a=np.array([1.0, 0.0]), power=100.0)
>>> bool(np.isclose(cell.mse, 1 / (100 * np.min(np.abs(h[:, 0]) ** 2))))
True
>>> bool(np.all(np.abs(cell.precoders) <= np.sqrt(100.0) / 4 + 1e-12))  # |α_i|² ≤ P / n²
True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from channels.validation import as_finite, as_int, check_memory, check_rng, short


def beam_gains(a: ArrayLike, h: ArrayLike) -> np.ndarray:
    """|aᴴ h_i|² for beams a (..., S, M) or (..., M) and channels h (..., n, M): (..., [S,] n).

    Raises ``ValueError`` for NaN/Inf entries or shapes that do not fit.
    """
    a = as_finite("a", a, dtype=complex)
    h = as_finite("h", h, dtype=complex)
    if h.ndim < 2 or a.ndim < 1 or a.shape[-1] != h.shape[-1]:
        raise ValueError(f"beams `a` (..., [S,] M) and channels `h` (..., n, M) must share M; "
                         f"got a {a.shape}, h {h.shape}")
    try:
        np.broadcast_shapes(a.shape[:-2] if a.ndim == h.ndim else a.shape[:-1], h.shape[:-2])
    except ValueError:
        raise ValueError(f"the leading (batch) dims of `a` {a.shape} and `h` {h.shape} do not "
                         "broadcast") from None
    return gains_unchecked(a, h)


def gains_unchecked(a: np.ndarray, h: np.ndarray) -> np.ndarray:
    """:func:`beam_gains` without the input checks, for solvers' inner loops."""
    p = a @ np.swapaxes(h.conj(), -1, -2) if a.ndim == h.ndim else \
        np.einsum("...m,...im->...i", a, h.conj())
    return p.real ** 2 + p.imag ** 2


def complex_normal(shape: tuple[int, ...], rng: np.random.Generator,
                   variance: ArrayLike = 1.0) -> np.ndarray:
    """Circularly-symmetric complex Gaussian CN(0, variance): variance/2 per real dimension."""
    check_rng(rng)
    variance = as_finite("variance", variance, lo=0)
    try:
        size = float(np.prod([as_int("shape", s, lo=0) for s in shape], dtype=float))
    except TypeError:
        raise ValueError(f"`shape` must be a tuple of integers, got {short(shape)}") from None
    check_memory(32 * size, f"complex normal samples of shape {tuple(shape)}",
                 "draw fewer samples at a time")
    z = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return z * np.sqrt(np.asarray(variance, dtype=float) / 2.0)


@dataclass(frozen=True)
class AirCompCell:
    """The AirComp transceiver of one cell (or a batch of cells).

    Parameters
    ----------
    h : array_like, shape (..., n, M), complex
        Channels h_i of the n clients (constant over the edge round, known at both ends).
    a : array_like, shape (..., M), complex or real
        Receive beam direction; normalised to ‖a‖ = 1 here.
    power : float or array_like, shape (...)
        Transmit power budget P_j (linear; §6.4 default P_j = 10^(SNR/10) with σ0² = 1).
    noise_power : float or array_like, shape (...)
        σ0², receiver noise power per antenna.
    tight_power : bool
        ν_j = n_j √P_j min_i |a_jᴴ h_i| instead of the paper's √P_j min_i |a_jᴴ h_i|.
    weights : array_like, shape (..., n), float, or None
        Aggregation weights p_i ≥ 0 with a positive sum (None: uniform 1/n_j, HIST); a zero
        weight is a silent client.
    """

    h: np.ndarray
    a: np.ndarray
    power: ArrayLike = 1.0
    noise_power: ArrayLike = 1.0
    tight_power: bool = False
    weights: ArrayLike | None = None

    def __post_init__(self) -> None:
        h = as_finite("h", self.h, dtype=complex)
        a = as_finite("a", self.a, dtype=complex)
        as_finite("power", self.power, lo=0, lo_open=True)
        as_finite("noise_power", self.noise_power, lo=0)
        if h.ndim < 2 or a.shape[-1:] != h.shape[-1:]:
            raise ValueError(f"`h` must be (..., n, M) and `a` (..., M); got {h.shape} and {a.shape}")
        norm = np.linalg.norm(a, axis=-1, keepdims=True)
        if not (norm > 0).all():
            raise ValueError("`a` must be non-zero")
        if not (np.all(np.asarray(self.power) > 0) and np.all(np.asarray(self.noise_power) >= 0)):
            raise ValueError("`power` must be > 0 and `noise_power` >= 0 (0: noiseless)")
        object.__setattr__(self, "h", h)
        object.__setattr__(self, "a", a / norm)
        if self.weights is not None:
            w = as_finite("weights", self.weights, lo=0)
            try:
                w = np.broadcast_to(w, h.shape[:-1])
            except ValueError:
                raise ValueError(f"`weights` {w.shape} must broadcast to the clients "
                                 f"{h.shape[:-1]}") from None
            total = w.sum(-1, keepdims=True)
            if not (total > 0).all():
                raise ValueError("`weights` must have a positive sum in every cell")
            object.__setattr__(self, "weights", w / total)

    @property
    def n_clients(self) -> int:
        """n_j, clients in the cell."""
        return self.h.shape[-2]

    @property
    def n_transmitting(self) -> np.ndarray:
        """k_j, the clients with a positive weight (all n_j without weights), shape (...)."""
        if self.weights is None:
            return np.full(self.h.shape[:-2], self.n_clients)
        return (self.weights > 0).sum(-1)

    @cached_property
    def min_gain(self) -> np.ndarray:
        """min_i |a_jᴴ h_i|² (weighted: min over p_i > 0 of |a_jᴴ h_i|² / (k_j p_i)²), shape (...)."""
        gains = gains_unchecked(self.a, self.h)
        if self.weights is None:
            return gains.min(-1)
        p = self.weights * self.n_transmitting[..., None]
        with np.errstate(divide="ignore"):
            return np.where(p > 0, gains / np.where(p > 0, p, 1.0) ** 2, np.inf).min(-1)

    @cached_property
    def nu(self) -> np.ndarray:
        """Receive normalisation ν_j (times k_j with ``tight_power``), shape (...)."""
        if not (self.min_gain > 0).all():
            raise ValueError("a transmitting client has |a^H h_i| = 0 (a zero channel, or a beam "
                             "orthogonal to it): no power scaling reaches the server; drop that "
                             "client (weight 0) or choose another beam")
        scale = self.n_transmitting if self.tight_power else 1.0
        return scale * np.sqrt(np.asarray(self.power, dtype=float) * self.min_gain)

    @property
    def beam(self) -> np.ndarray:
        """m_j = a_j / ν_j, shape (..., M)."""
        return self.a / self.nu[..., None]

    @cached_property
    def precoders(self) -> np.ndarray:
        """α_i of (23), shape (..., n); |α_i|² ≤ P_j / k_j² (≤ P_j with ``tight_power``)."""
        g = np.einsum("...m,...im->...i", self.beam.conj(), self.h)  # m_jᴴ h_i
        if self.weights is None:
            return g.conj() / (self.n_clients * np.abs(g) ** 2)
        return self.weights * g.conj() / np.abs(g) ** 2

    @cached_property
    def mse(self) -> np.ndarray:
        """Per-entry MSE (25), σ0² / ν_j², shape (...)."""
        return np.asarray(self.noise_power, dtype=float) / self.nu ** 2

    def update_variance(self, num_entries: ArrayLike, lr: float) -> np.ndarray:
        """Variance (28) of the edge update (27): γ² d_j MSE_j."""
        from channels.validation import as_float

        as_float("lr", lr, lo=0, hi=1e6)
        d = as_finite("num_entries", num_entries, lo=0)
        return lr ** 2 * d * self.mse

    def receive(self, delta: ArrayLike, rng: np.random.Generator) -> np.ndarray:
        """Simulate (22) literally for a block of K entries; returns the complex estimate.

        Parameters
        ----------
        delta : array_like, shape (..., n, K), real
            The entries δ_{i,k} each client sends (accumulated gradients, eq. (21)).
        rng : numpy.random.Generator
            Noise stream.

        Returns
        -------
        ndarray, shape (..., K), complex
            δ̂_k; its real part is (24) with noise variance MSE / 2, its mean the exact average.
        """
        delta = self._delta(delta)
        check_rng(rng)
        signal = np.einsum("...im,...i,...ik->...mk", self.h, self.precoders, delta)
        z = complex_normal(signal.shape, rng, np.asarray(self.noise_power)[..., None, None])
        return np.einsum("...m,...mk->...k", self.beam.conj(), signal + z)

    def _delta(self, delta: ArrayLike) -> np.ndarray:
        """``delta`` checked: real, finite, shape (..., n, K) matching the cells."""
        d = as_finite("delta", delta)
        if d.ndim < 2 or d.shape[-2] != self.n_clients:
            raise ValueError(f"`delta` must have shape (..., {self.n_clients}, K), one row per "
                             f"client, got {d.shape}")
        try:
            np.broadcast_shapes(d.shape[:-2], self.h.shape[:-2])
        except ValueError:
            raise ValueError(f"`delta` of shape {d.shape} does not match the cells "
                             f"{self.h.shape[:-2]}") from None
        return d

    def estimate(self, delta: ArrayLike, rng: np.random.Generator, *,
                 real_part: bool = False) -> np.ndarray:
        """Fast path (§5.9 step 4): (1/n_j) Σ_i δ_i (Σ_i p_i δ_i) plus equivalent real noise.

        The noise variance is MSE (25) by default (paper-literal), MSE / 2 with
        ``real_part=True`` (the distribution of Re δ̂ from :meth:`receive`).
        """
        delta = self._delta(delta)
        check_rng(rng)
        mean = (delta.mean(-2) if self.weights is None
                else np.einsum("...i,...ik->...k", self.weights, delta))
        var = self.mse / 2.0 if real_part else self.mse
        return mean + rng.standard_normal(mean.shape) * np.sqrt(var)[..., None]
