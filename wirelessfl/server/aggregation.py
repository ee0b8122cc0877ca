"""Aggregators: how a server combines its clients' pseudo-gradients.

An aggregator is given the pseudo-gradients ``Δ_i = x_start − x_i`` and weights, and
returns the update the server subtracts (times its step size). :class:`Mean` is the exact
weighted mean (eq. (6) of HIST with uniform weights; FedAvg with data-size weights). An
over-the-air aggregator (HIST §5.9, eqs. (26)–(27)) returns the same mean plus channel noise
through the same interface.

Examples
--------
>>> import torch
>>> d = [{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([3.0, 6.0])}]
>>> update, info = Mean().aggregate(d, np.array([1.0, 3.0]), np.random.default_rng(0))
>>> update["w"], info.mse
(tensor([2.5000, 5.0000]), None)
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from typing_extensions import override

from channels.aircomp import AirCompCell
from channels.rayleigh import simo_rayleigh
from channels.units import db_to_lin
from channels.validation import as_float, as_int
from solvers import beamforming
from wirelessfl.engine.client import FOLD_TREES, DeltaFold
from wirelessfl.models.base import Params, check_tree


def _weights(weights: np.ndarray | Sequence[float], n: int) -> np.ndarray:
    """``weights`` as float64, checked: n of them (n ≥ 1), non-negative, a positive sum."""
    w = np.asarray(weights, dtype=np.float64)
    if n == 0 or w.shape != (n,) or not (w >= 0).all() or w.sum() <= 0:
        raise ValueError(f"need one non-negative weight per tree with a positive sum, got {w}")
    return w


#: Trees stacked at once by :func:`weighted_mean` (more are summed chunk by chunk, so that
#: aggregating 10,000 clients does not hold a second copy of all their pseudo-gradients);
#: the loop engine's :class:`~wirelessfl.engine.fold.DeltaFold` groups are no larger.
MEAN_CHUNK = FOLD_TREES


def weighted_mean(trees: Sequence[Params], weights: np.ndarray | Sequence[float]) -> Params:
    """Σ_i w_i tree_i / Σ_i w_i, key by key.

    Up to :data:`MEAN_CHUNK` trees in one stacked sum; more in chunks of that many, the
    chunks' sums added in order. NaN and Inf propagate, as in torch's own sums: a run reports
    a diverged model after its round (:class:`~wirelessfl.errors.TrainingDiverged`).
    """
    if isinstance(trees, dict) or not isinstance(trees, Sequence):
        raise TypeError(f"`trees` must be a sequence of parameter trees, got {type(trees).__name__}")
    w = _weights(weights, len(trees))
    _same_layout(*(check_tree(f"trees[{i}]", t, finite=False) for i, t in enumerate(trees)))
    fold = DeltaFold(w)  # the same stacked sums as a round folded while it trains
    for lo in range(0, len(trees), MEAN_CHUNK):
        chunk = trees[lo:lo + MEAN_CHUNK]
        fold.add(range(lo, lo + len(chunk)), {k: torch.stack([t[k] for t in chunk])
                                              for k in trees[0]})
    return fold.mean()


def stacked_mean(stack: Params, weights: np.ndarray | Sequence[float]) -> Params:
    """Σ_i w_i stack_i / Σ_i w_i of a stack ``(C, …)`` per key: :func:`weighted_mean` of its rows.

    The same sums, chunk by chunk (:data:`MEAN_CHUNK` rows each), as :func:`weighted_mean`
    takes over the rows one by one, on the stack itself.
    """
    n = _rows_of(stack)
    w = _weights(weights, n)
    fold = DeltaFold(w)
    for lo in range(0, n, MEAN_CHUNK):
        hi = min(n, lo + MEAN_CHUNK)
        fold.add(range(lo, hi), {k: v[lo:hi] for k, v in stack.items()})
    return fold.mean()


def segment_means(stack: Params, weights: np.ndarray, segments: np.ndarray,
                  count: int) -> list[Params]:
    """The weighted mean of each segment's rows of a stack ``(C, …)``: ``count`` trees.

    Segment j's mean is Σ_{i: seg_i = j} w_i stack_i / Σ_{i: seg_i = j} w_i, for all segments
    in one product of a ``(count, C)`` coefficient matrix with the stack per key (a
    hierarchical round's cells, or a lockstep group's runs). An empty segment, or one whose
    weights sum to zero, raises ``ValueError``.
    """
    n = _rows_of(stack)
    w = np.asarray(weights, np.float64)
    seg = np.asarray(segments, np.int64)
    if w.shape != (n,) or seg.shape != (n,) or not (w >= 0).all():
        raise ValueError(f"need one non-negative weight and one segment per row ({n}), got "
                         f"{w.shape} and {seg.shape}")
    if n and (seg.min() < 0 or seg.max() >= count):
        raise ValueError(f"segments must lie in [0, {count}), got {seg.min()}..{seg.max()}")
    coef = np.zeros((count, n))
    coef[seg, np.arange(n)] = w
    totals = coef.sum(1)
    if not (totals > 0).all():
        raise ValueError(f"segments {np.flatnonzero(totals <= 0).tolist()} have no weight")
    coef /= totals[:, None]
    out: list[dict] = [{} for _ in range(count)]
    for k, v in stack.items():
        c = torch.as_tensor(coef, dtype=v.dtype, device=v.device)
        got = (c @ v.reshape(n, -1)).view(count, *v.shape[1:])
        for j in range(count):
            out[j][k] = got[j]
    return out


def _rows_of(stack: Params) -> int:
    """The common first dimension of a stack's tensors (ValueError: none, or several)."""
    rows = {v.shape[0] if v.dim() else -1 for v in stack.values()}
    if len(rows) != 1 or -1 in rows or 0 in rows:
        raise ValueError(f"a stack needs one first dimension of at least 1 row for all tensors, "
                         f"got {sorted(rows)}")
    return rows.pop()


def _same_layout(first: Params, *others: Params) -> None:
    """Every tree has ``first``'s keys and shapes (ValueError naming the first difference)."""
    for i, t in enumerate(others, 1):
        if t.keys() != first.keys():
            diff = sorted(set(t) ^ set(first))[:3]
            raise ValueError(f"tree {i} has other keys than tree 0 (differ: {diff})")
        for k, v in first.items():
            if t[k].shape != v.shape:
                raise ValueError(f"tree {i}: {k!r} has shape {tuple(t[k].shape)}, tree 0 "
                                 f"{tuple(v.shape)}")


@dataclass(frozen=True)
class AggregateInfo:
    """What one aggregation says besides its update.

    Attributes
    ----------
    mse : float or None
        Over the air: the per-entry MSE (25) of the estimate (inf when every client was
        silent); None for an exact aggregate.
    silent : int
        Clients that did not transmit (truncated channel inversion).
    noise_std : float or None
        Over the air: the standard deviation per entry of the noise in the returned
        aggregate, u·√MSE (u the value of one symbol; MSE/2 with ``real_part``); None for an
        exact aggregate.
    within_clip : int or None
        With adaptive clipping (``algorithm.dp_clip_quantile``): how many of the aggregated
        updates had norm ≤ C_t before clipping (what the next C is learned from); else None.
    """

    mse: float | None = None
    silent: int = 0
    noise_std: float | None = None
    within_clip: int | None = None

    @property
    def received_nothing(self) -> bool:
        """Whether nobody transmitted (the update is zero)."""
        return self.mse is not None and math.isinf(self.mse)

    @staticmethod
    def merged(infos: Sequence[AggregateInfo]) -> tuple[float | None, int | None]:
        """The round's mean MSE and its silent clients over several aggregations (None: exact)."""
        over_air = [i for i in infos if i.mse is not None]
        if not over_air:
            return None, None
        return (float(np.mean([i.mse for i in over_air])),
                int(sum(i.silent for i in over_air)))


class Aggregator(ABC):
    """Combine pseudo-gradients into one server update.

    Contract: :meth:`aggregate` returns a tree with the keys and shapes of each input delta
    and the :class:`AggregateInfo` of that aggregation (its MSE over the air). Clients that
    failed are not passed in; an empty list raises ``ValueError``. Randomness (channel noise)
    comes only from ``rng``. An aggregator keeps no log: what a round's aggregations say is
    in their returned infos.
    """

    #: Whether the result is the exact weighted mean (no channel in between).
    exact: bool = True
    #: Whether :meth:`aggregate_stack` needs the rows' client ids (``clients=``): a channel
    #: whose large-scale gains belong to the clients (over the air on a deployment).
    needs_clients: bool = False

    @abstractmethod
    def aggregate(self, deltas: Sequence[Params], weights: np.ndarray,
                  rng: np.random.Generator, *, unit: float | None = None,
                  channel: np.random.Generator | None = None) -> tuple[Params, AggregateInfo]:
        """The server update and what the aggregation says about itself.

        ``unit`` is what one transmitted symbol is worth in the vectors' units (over the
        air the noise scales with it; None: the aggregator's own, e.g. γ for model deltas).
        ``channel`` is the stream of the round's first aggregation, so that a second vector
        of the round can go over the same channel (None: this call's own).
        """

    def aggregate_stack(self, stack: Params, weights: np.ndarray, rng: np.random.Generator, *,
                        unit: float | None = None,
                        channel: np.random.Generator | None = None) -> tuple[Params, AggregateInfo]:
        """:meth:`aggregate` of a stack ``(C, …)`` of pseudo-gradients, one row a client.

        The round's path (the engine's own stack). Here, through :meth:`aggregate` on the
        rows, so an aggregator written per client (a median, a trimmed mean) gets every
        client's Δ_i exactly as before; :class:`Mean` and :class:`AirComp` reduce the stack.
        """
        n = _rows_of(stack)
        rows = [{k: v[i] for k, v in stack.items()} for i in range(n)]
        return self.aggregate(rows, weights, rng, unit=unit, channel=channel)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Mean(Aggregator):
    """The exact weighted mean (error-free orthogonal uplinks)."""

    @override
    def aggregate(self, deltas: Sequence[Params], weights: np.ndarray,
                  rng: np.random.Generator, *, unit: float | None = None,
                  channel: np.random.Generator | None = None) -> tuple[Params, AggregateInfo]:
        """Weighted mean of ``deltas``; ``rng``, ``unit`` and ``channel`` are unused."""
        return weighted_mean(deltas, weights), AggregateInfo()

    @override
    def aggregate_stack(self, stack: Params, weights: np.ndarray, rng: np.random.Generator, *,
                        unit: float | None = None,
                        channel: np.random.Generator | None = None) -> tuple[Params, AggregateInfo]:
        """Weighted mean of the stack's rows (:func:`stacked_mean`)."""
        return stacked_mean(stack, weights), AggregateInfo()


def apply_update(params: Params, update: Params, lr: float = 1.0) -> Params:
    """Server step ``x − lr · update`` (plain averaging when lr = 1); NaN propagates."""
    lr = as_float("lr", lr)
    _same_layout(check_tree("params", params, finite=False),
                 check_tree("update", update, finite=False))
    return {k: params[k] - lr * update[k] for k in params}


@dataclass(frozen=True)
class RoundChannel:
    """The round's channel stream for a later vector, and which of the round's clients send it.

    ``stream`` is the generator the round's first aggregation drew its channel from (its first
    child), ``clients`` how many clients that aggregation had, ``rows`` (None: all) the
    positions among them of the clients that send this vector: FAdamGC's S̃ sends its Δy_i
    over its members' own channels of the round (:meth:`AirComp.round_channel_of`).
    """

    stream: np.random.Generator
    clients: int
    rows: np.ndarray | None = None


class AirComp(Aggregator):
    """Over-the-air aggregation of one cell or one round's clients (HIST §5.9, eqs. (21)–(28)).

    Each call is one aggregation: it draws the clients' SIMO Rayleigh channels
    h_i ~ CN(0, I_M), solves the receive beam with :func:`solvers.beamforming.solve` and
    returns the weighted mean of the vectors plus i.i.d. real Gaussian noise of variance
    u² · MSE per entry, with the transceiver of :class:`channels.aircomp.AirCompCell` (its
    precoders (23), MSE (25)). u is the value of one transmitted symbol: HIST's clients send
    their accumulated gradients δ_i = Δ_i / γ (21), so for model deltas u = γ (``lr``) and
    the edge step (27) carries noise γ Z. ``real_part=True`` halves the variance (§8.4 item
    16); ``noise_power=0`` gives the exact mean. Every call returns its MSE (the variance of
    one symbol's estimate) and its silent clients in its :class:`AggregateInfo`.

    Beyond HIST, for any algorithm's uplink (``network.aggregation: over_the_air``):

    - **weights**: unequal aggregation weights p_i enter the precoders and the power limit
      (:class:`~channels.aircomp.AirCompCell` ``weights``); equal weights are HIST exactly;
    - **truncated channel inversion** (``truncation_db``, Zhu, Wang, Huang, IEEE TWC 2020):
      a client whose average channel gain ‖h_i‖²/M is below the threshold stays silent and
      the estimate is the weighted mean of the others (None: everyone transmits); the beam
      is solved for the transmitting clients. If every client is silent the update is zero;
    - **normalisation** (``normalise``): the clients scale their vectors by one common
      factor s = max_i RMS(Δ_i) (sent digitally) so that every transmitted symbol has
      average power ≤ 1, and the server rescales: the noise is s·√MSE per entry, relative
      to the updates' size, instead of u·√MSE.

    Parameters
    ----------
    snr_db : float
        P / σ0² per client [dB] (σ0² = ``noise_power``); the per-client power limit.
    lr : float
        γ, the default symbol value u of :meth:`aggregate`.
    antennas : int
        M (default 10).
    method : str
        Beamforming method (default ``"fast"``).
    noise_power : float
        σ0² (default 1; 0 disables the noise).
    real_part, tight_power : bool
        §8.4 items 16 and 17: noise of variance MSE/2 (the real part of (22)) instead of
        MSE (HIST's (27)-(28) as written); the weakest client at full power.
    truncation_db : float or None
        Gain threshold of truncated channel inversion [dB] (None: none).
    normalise : bool
        Common normalisation before transmission.
    round_channel : bool
        A call given the round's ``channel`` stream draws the channel from it (a second
        vector over the round's channel); otherwise from its own ``rng``.
    subset_rows : bool
        With ``round_channel``, a vector sent by a subset of the round's clients
        (:class:`RoundChannel` ``rows``) keeps its senders' own rows of the round's channel
        (false: the earlier, smaller draw; :meth:`round_channel_of`).
    gains : callable or None
        Client ids → each client's large-scale power gain g_i (linear, relative to
        ``snr_db``): its channel is h_i ~ CN(0, g_i I_M) (a deployment's path loss, e.g.
        ``network.large_scale`` of ``aircomp``); the calls then need the rows' ``clients``.
        None: g_i = 1, HIST's model.
    """

    exact = False

    def __init__(self, snr_db: float, lr: float, *, antennas: int = 10, method: str = "fast",
                 noise_power: float = 1.0, real_part: bool = False, tight_power: bool = False,
                 truncation_db: float | None = None, normalise: bool = False,
                 round_channel: bool = False, subset_rows: bool = True,
                 gains: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        if not np.isfinite(snr_db):
            raise ValueError(f"AirComp SNR must be a finite number of dB, got {snr_db}")
        as_float("snr_db", snr_db, lo=-200, hi=200)
        as_float("lr", lr, lo=0, hi=1e6)
        antennas = as_int("antennas", antennas, lo=1, hi=4096)
        if method not in beamforming.METHODS:
            raise ValueError(f"`method` must be one of {', '.join(beamforming.METHODS)}, got {method!r}")
        as_float("noise_power", noise_power, lo=0, hi=1e12)
        if truncation_db is not None:
            as_float("truncation_db", truncation_db, lo=-200, hi=200)
        self.snr_db, self.lr, self.antennas, self.method = snr_db, lr, int(antennas), method
        self.noise_power, self.real_part, self.tight_power = noise_power, real_part, tight_power
        self.truncation_db, self.normalise = truncation_db, bool(normalise)
        self.round_channel, self.subset_rows = bool(round_channel), bool(subset_rows)
        self.gains = gains
        self.needs_clients = gains is not None

    @override
    def aggregate(self, deltas: Sequence[Params], weights: np.ndarray,
                  rng: np.random.Generator, *, unit: float | None = None,
                  channel: np.random.Generator | None = None,
                  clients: np.ndarray | None = None) -> tuple[Params, AggregateInfo]:
        """Weighted mean of ``deltas`` plus the AirComp noise of a drawn channel (:meth:`aggregate_stack`)."""
        if isinstance(deltas, dict) or not isinstance(deltas, Sequence) or not len(deltas):
            raise ValueError("AirComp needs a non-empty sequence of parameter trees")
        _same_layout(*(check_tree(f"deltas[{i}]", d, finite=False) for i, d in enumerate(deltas)))
        return self.aggregate_stack({k: torch.stack([d[k] for d in deltas]) for k in deltas[0]},
                                    weights, rng, unit=unit, channel=channel, clients=clients)

    def _gained(self, h: np.ndarray, clients: np.ndarray | None) -> np.ndarray:
        """``h`` (unit Rayleigh rows) times √g of each row's client: CN(0, g_i I_M)."""
        if self.gains is None:
            return h
        if clients is None or len(clients) != h.shape[0]:
            raise ValueError("this over-the-air channel has a large-scale gain per client: pass "
                             "the rows' client ids (clients=) to aggregate_stack")
        g = np.asarray(self.gains(np.asarray(clients, np.int64)), float)
        return h * np.sqrt(g)[:, None]

    @override
    def aggregate_stack(self, stack: Params, weights: np.ndarray, rng: np.random.Generator, *,
                        unit: float | None = None,
                        channel: np.random.Generator | None = None,
                        clients: np.ndarray | None = None) -> tuple[Params, AggregateInfo]:
        """Weighted mean of the stack's rows plus the AirComp noise of a drawn channel.

        The channel comes from ``rng``, or with ``round_channel`` from ``channel`` when given
        (the round's first aggregation's stream: the same h, beam and silent clients), the
        noise always from ``rng``. With ``gains`` each row's channel carries its client's
        large-scale gain (``clients``: the rows' ids). Normalisation's common scale is every
        row's RMS at once, read from the device once.
        """
        channel_rng, noise_rng = rng.spawn(2)
        n = _rows_of(stack)
        if self.round_channel and channel is not None:
            h, channel_rng = self.round_channel_of(channel, n)
        else:
            h = simo_rayleigh((), n, self.antennas, channel_rng)
        h = self._gained(h, clients)
        w = _weights(weights, n)
        talk = np.ones(n, bool)
        if self.truncation_db is not None:
            talk = (np.abs(h) ** 2).mean(-1) >= db_to_lin(self.truncation_db)
            w = np.where(talk, w, 0.0)
        silent = int(n - talk.sum())
        if not talk.any():  # nobody transmits: nothing is received
            return ({k: torch.zeros_like(v[0]) for k, v in stack.items()},
                    AggregateInfo(float("inf"), silent))
        beam = beamforming.solve(h[talk], self.method, seed=channel_rng).a
        uniform = talk.all() and np.all(w == w[0])
        cell = AirCompCell(h, beam, power=db_to_lin(self.snr_db), noise_power=self.noise_power,
                           tight_power=self.tight_power, weights=None if uniform else w)
        mse = float(cell.mse) / (2.0 if self.real_part else 1.0)
        mean = stacked_mean(stack, np.ones(n) if uniform else w)
        scale = self.lr if unit is None else unit
        if self.normalise:  # one common scale: every symbol of average power <= 1
            rms = torch.cat([v.reshape(n, -1) for v in stack.values()], 1).pow(2).mean(1).sqrt()
            on = torch.as_tensor(talk, device=rms.device)
            scale = float(torch.where(on, rms, torch.zeros_like(rms)).max())
        gen = torch.Generator(device="cpu").manual_seed(int(noise_rng.integers(2**63)))
        std = scale * mse ** 0.5
        return ({k: v + std * torch.randn(v.shape, generator=gen, dtype=v.dtype).to(v.device)
                 for k, v in mean.items()}, AggregateInfo(float(cell.mse), silent, float(std)))

    def round_channel_of(self, channel: np.random.Generator | RoundChannel,
                         n: int) -> tuple[np.ndarray, np.random.Generator]:
        """The round's channel of these ``n`` rows, and the stream the beam solve goes on with.

        The round's first aggregation drew h for its clients from the stream's first child; a
        later vector (SCAFFOLD's Δc_i, FAdamGC's Δy_i) draws the same h and, sent by a subset
        of the round's clients (:class:`RoundChannel` ``rows``), keeps its members' own rows.
        The beam is then solved again for the clients that transmit this vector.
        """
        if isinstance(channel, RoundChannel) and self.subset_rows:
            stream, clients, rows = channel.stream.spawn(2)[0], channel.clients, channel.rows
        else:  # (subset_rows false: runs made before 2026-11-26 drew n rows afresh)
            base = channel.stream if isinstance(channel, RoundChannel) else channel
            stream, clients, rows = base.spawn(2)[0], n, None
        h = simo_rayleigh((), clients, self.antennas, stream)
        if rows is not None:
            h = h[np.asarray(rows, np.int64)]
        if h.shape[0] != n:
            raise ValueError(f"the round's channel has {h.shape[0]} rows for {n} transmitting "
                             "clients: give RoundChannel the rows of the round's clients")
        return h, stream

    def __repr__(self) -> str:
        return (f"AirComp(snr_db={self.snr_db}, M={self.antennas}, method={self.method!r}, "
                f"truncation_db={self.truncation_db}, normalise={self.normalise}, "
                f"real_part={self.real_part}, round_channel={self.round_channel}, "
                f"subset_rows={self.subset_rows})")
