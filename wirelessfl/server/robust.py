"""Robust aggregation: server rules that bound what a few bad clients can do (``algorithm.robust``).

Each rule reduces the stacked pseudo-gradients ``(C, …)`` of the round's arrived clients in a
few tensor operations, with no Python per client:

- ``median``: the coordinate-wise median (Yin et al., ICML 2018), the mean of the two middle
  values for an even count, as NumPy's;
- ``trimmed_mean``: per coordinate, the mean after dropping the ⌊β·C⌋ largest and the ⌊β·C⌋
  smallest values (Yin et al. 2018; ``trim`` β < 1/2);
- ``krum``: the row with the least sum of squared distances to its C − f − 2 nearest rows
  (Blanchard et al., NeurIPS 2017; f = ``byzantine``), and multi-Krum, the mean of the
  ``krum_select`` = m rows of least score (El Mhamdi et al., ICML 2018);
- ``bulyan``: θ = C − 2f rows chosen by Krum one after another (each time among the rows
  not yet chosen), then per coordinate the mean of the β = θ − 2f chosen values closest to
  their median (El Mhamdi, Guerraoui, Rouault, ICML 2018; f = ``byzantine``, C ≥ 4f + 3; a
  round with fewer arrivals tolerates the f it can). Its selection is sequential by
  definition: θ Krum rounds of a fixed few operators each;
- ``norm_bounded``: every Δ_i scaled to norm ≤ ``norm_bound`` (the whole vector, all keys),
  then the link's own sum: the exact weighted mean, or over the air the noisy one
  (Sun et al., "Can you really backdoor FL?", 2019).

The first four are order statistics or selections, not sums: they cannot be computed over
the air, where the server receives only the noisy sum, and are refused there. They ignore
the sample weights (each client one vote), as their papers define them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from typing_extensions import override

from wirelessfl.models.base import Params
from wirelessfl.server.aggregation import AggregateInfo, Aggregator, Mean, _rows_of

#: The built-in rules of ``algorithm.robust`` (``mean``: the plain weighted mean, no rule).
ROBUST_RULES = ("mean", "median", "trimmed_mean", "krum", "bulyan", "norm_bounded")

#: Users' rules (:func:`register_aggregator`): name → (class, whether it is a sum).
_REGISTERED: dict[str, tuple[type, bool]] = {}


def register_aggregator(name: str, rule: type, *, over_the_air: bool = False) -> None:
    """Make ``algorithm.robust: name`` a user's rule: one class on the stacked client dimension.

    ``rule`` subclasses :class:`StackedRule`; the run builds it once, as ``rule(uplink)``
    (the link's own aggregator: None for exact, the digital link's, or the over-the-air
    channel), and each round calls its ``aggregate_stack(stack, weights, rng, **kw)`` with
    the stacked ``(C, …)`` pseudo-gradients of the clients that arrived (a digital link
    has decided who). Its settings are its own (class attributes, or a subclass per
    setting). ``over_the_air``: the rule is a sum of transformed rows that it hands to the
    uplink (as ``norm_bounded`` does), so it runs over the air too; otherwise it is refused
    there in one line, as the order statistics are. Call it from a plug-in
    (``--plugin``), which the workers of ``--jobs`` load too.

    Examples
    --------
    >>> class Clipped(StackedRule):
    ...     def __init__(self, uplink=None):
    ...         self.inner = uplink or Mean()  # (exactness is the link's: set by the run)
    ...     def aggregate_stack(self, stack, weights, rng, **kw):
    ...         return self.inner.aggregate_stack(clip_rows(stack, 0.5), weights, rng, **kw)
    >>> register_aggregator("clipped_half", Clipped, over_the_air=True)
    >>> "clipped_half" in robust_names()
    True
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"an aggregator's name must be an identifier, got {name!r}")
    if name in ROBUST_RULES:
        raise ValueError(f"{name!r} is a built-in rule of algorithm.robust: choose another name")
    if not (isinstance(rule, type) and issubclass(rule, Aggregator)):
        raise ValueError(f"register_aggregator({name!r}, ...) needs an Aggregator class (a "
                         f"StackedRule subclass), got {rule!r}")
    _REGISTERED[name] = (rule, bool(over_the_air))


def robust_names() -> tuple[str, ...]:
    """Every rule ``algorithm.robust`` takes: the built-in ones, then the registered ones."""
    return (*ROBUST_RULES, *_REGISTERED)


def _flat(stack: Params) -> torch.Tensor:
    """The stack's rows as one ``(C, D)`` matrix, keys in order."""
    n = _rows_of(stack)
    return torch.cat([v.reshape(n, -1) for v in stack.values()], 1)


def _unflat(row: torch.Tensor, like: Params) -> Params:
    """A ``(D,)`` vector back into a tree shaped like one row of ``like``."""
    out, at = {}, 0
    for k, v in like.items():
        size = v[0].numel()
        out[k] = row[at:at + size].reshape(v.shape[1:]).to(v.dtype)
        at += size
    return out


def row_norms(stack: Params) -> torch.Tensor:
    """Each row's norm over all its keys, in float64, shape (C,)."""
    return _flat(stack).double().norm(dim=1)


def clip_rows(stack: Params, bound: float, norms: torch.Tensor | None = None) -> Params:
    """Each row of the stack scaled to norm ≤ ``bound`` (the norm over all its keys).

    ``norms``: the rows' :func:`row_norms`, when the caller has them already.
    """
    norms = row_norms(stack) if norms is None else norms
    scale = torch.clamp(bound / norms.clamp_min(1e-300), max=1.0)
    return {k: v * scale.to(v.dtype).reshape(-1, *[1] * (v.dim() - 1)) for k, v in stack.items()}


class StackedRule(Aggregator):
    """A rule defined on the stack (its ``aggregate_stack``).

    :meth:`aggregate` stacks the per-client trees and calls it.
    """

    @override
    def aggregate(self, deltas: Sequence[Params], weights: np.ndarray,
                  rng: np.random.Generator, *, unit: float | None = None,
                  channel: np.random.Generator | None = None) -> tuple[Params, AggregateInfo]:
        if isinstance(deltas, dict) or not len(deltas):
            raise ValueError(f"{type(self).__name__} needs a non-empty sequence of parameter trees")
        return self.aggregate_stack({k: torch.stack([d[k] for d in deltas]) for k in deltas[0]},
                                    weights, rng, unit=unit, channel=channel)


class Median(StackedRule):
    """The coordinate-wise median of the rows (even count: the mean of the two middle values)."""

    @override
    def aggregate_stack(self, stack: Params, weights: np.ndarray, rng: np.random.Generator, *,
                        unit: float | None = None,
                        channel: np.random.Generator | None = None) -> tuple[Params, AggregateInfo]:
        n = _rows_of(stack)
        out = {}
        for k, v in stack.items():
            s = v.sort(0).values
            out[k] = (s[(n - 1) // 2] + s[n // 2]) / 2
        return out, AggregateInfo()


class TrimmedMean(StackedRule):
    """Per coordinate, the mean of the rows less the ⌊β·C⌋ largest and ⌊β·C⌋ smallest values."""

    def __init__(self, trim: float) -> None:
        if not 0 <= float(trim) < 0.5:
            raise ValueError(f"`trim` must be in [0, 0.5), got {trim!r}")
        self.trim = float(trim)

    @override
    def aggregate_stack(self, stack: Params, weights: np.ndarray, rng: np.random.Generator, *,
                        unit: float | None = None,
                        channel: np.random.Generator | None = None) -> tuple[Params, AggregateInfo]:
        n = _rows_of(stack)
        cut = int(np.floor(self.trim * n))
        return {k: v.sort(0).values[cut:n - cut].mean(0) for k, v in stack.items()}, AggregateInfo()

    def __repr__(self) -> str:
        return f"TrimmedMean(trim={self.trim})"


class Krum(StackedRule):
    """Krum (``select`` = 1) or multi-Krum: the mean of the ``select`` rows of least score.

    A row's score is the sum of its squared distances to its C − f − 2 nearest other rows
    (at least one). Ties go to the lower row.
    """

    def __init__(self, byzantine: int, select: int = 1) -> None:
        if int(byzantine) < 0 or int(select) < 1:
            raise ValueError(f"Krum needs byzantine >= 0 and select >= 1, got {byzantine!r}, "
                             f"{select!r}")
        self.byzantine, self.select = int(byzantine), int(select)

    def scores(self, flat: torch.Tensor) -> torch.Tensor:
        """Each row's Krum score, ``(C,)``."""
        n = flat.shape[0]
        d = torch.cdist(flat.double(), flat.double()).pow(2)
        d.fill_diagonal_(float("inf"))
        near = max(1, min(n - 1, n - self.byzantine - 2))
        return d.sort(1).values[:, :near].sum(1) if n > 1 else torch.zeros(1, dtype=d.dtype)

    @override
    def aggregate_stack(self, stack: Params, weights: np.ndarray, rng: np.random.Generator, *,
                        unit: float | None = None,
                        channel: np.random.Generator | None = None) -> tuple[Params, AggregateInfo]:
        flat = _flat(stack)
        chosen = torch.argsort(self.scores(flat), stable=True)[:min(self.select, flat.shape[0])]
        return _unflat(flat[chosen].mean(0), stack), AggregateInfo()

    def __repr__(self) -> str:
        return f"Krum(byzantine={self.byzantine}, select={self.select})"


class Bulyan(StackedRule):
    """Bulyan: θ = C − 2f rows by repeated Krum, then a trimmed mean around each median.

    Of the θ chosen rows, each coordinate averages the β = θ − 2f values closest to the
    coordinate's median (NumPy's: the mean of the two middle values for an even θ; ties to
    the earlier chosen row). ``byzantine`` f is capped per round at ⌊(C − 3)/4⌋, what C rows
    can tolerate.
    """

    def __init__(self, byzantine: int) -> None:
        if int(byzantine) < 0:
            raise ValueError(f"Bulyan needs byzantine >= 0, got {byzantine!r}")
        self.byzantine = int(byzantine)

    @staticmethod
    def needs(byzantine: int) -> int:
        """The fewest rows Bulyan needs to tolerate ``byzantine`` of them: 4f + 3."""
        return 4 * int(byzantine) + 3

    def chosen(self, flat: torch.Tensor, f: int) -> torch.Tensor:
        """The θ = C − 2f rows Krum picks one after another, in the order picked."""
        n = flat.shape[0]
        d = torch.cdist(flat.double(), flat.double()).pow(2)
        d.fill_diagonal_(float("inf"))
        alive = torch.ones(n, dtype=torch.bool, device=flat.device)
        picks = []
        for left in range(n, 2 * f, -1):  # θ Krum rounds among the rows not yet chosen
            near = max(1, min(left - 1, left - f - 2))
            scores = d.masked_fill(~alive[None, :], float("inf")).sort(1).values[:, :near].sum(1)
            scores = scores.masked_fill(~alive, float("inf")) if left > 1 else alive.double().neg()
            pick = torch.argmin(scores)  # the first of equal scores
            picks.append(pick)
            alive[pick] = False
        return torch.stack(picks)

    @override
    def aggregate_stack(self, stack: Params, weights: np.ndarray, rng: np.random.Generator, *,
                        unit: float | None = None,
                        channel: np.random.Generator | None = None) -> tuple[Params, AggregateInfo]:
        flat = _flat(stack)
        n = flat.shape[0]
        f = min(self.byzantine, max(0, (n - 3) // 4))
        picked = flat[self.chosen(flat, f)]
        theta = picked.shape[0]
        ordered = picked.sort(0).values
        median = (ordered[(theta - 1) // 2] + ordered[theta // 2]) / 2
        closest = (picked - median).abs().argsort(dim=0, stable=True)[:theta - 2 * f]
        return _unflat(picked.gather(0, closest).mean(0), stack), AggregateInfo()

    def __repr__(self) -> str:
        return f"Bulyan(byzantine={self.byzantine})"


class NormBounded(StackedRule):
    """Every row scaled to norm ≤ ``bound``, then ``inner``'s sum (the exact mean, or over the air)."""

    def __init__(self, bound: float, inner: Aggregator | None = None) -> None:
        if not (np.isfinite(bound) and bound > 0):
            raise ValueError(f"`norm_bound` must be a positive number, got {bound!r}")
        self.bound, self.inner = float(bound), inner or Mean()
        self.exact, self.needs_clients = self.inner.exact, self.inner.needs_clients

    def clipped(self, stack: Params) -> Params:
        """The stack with each row's norm (over all keys) capped at the bound."""
        return clip_rows(stack, self.bound)

    @override
    def aggregate_stack(self, stack: Params, weights: np.ndarray, rng: np.random.Generator,
                        **kwargs) -> tuple[Params, AggregateInfo]:
        return self.inner.aggregate_stack(self.clipped(stack), weights, rng, **kwargs)

    def __repr__(self) -> str:
        return f"NormBounded(bound={self.bound}, inner={self.inner!r})"


def robust_aggregator(rule: str, uplink: Aggregator | None, *, trim: float = 0.1,
                      byzantine: int = 1, select: int = 1,
                      norm_bound: float = 1.0) -> Aggregator:
    """The server aggregator of ``rule`` over the run's uplink (None: exact).

    Over the air (an inexact uplink) only sums go: ``mean`` and ``norm_bounded``; the others
    raise ValueError, with the ways out.
    """
    if rule not in robust_names():
        raise ValueError(f"`robust` must be one of {', '.join(robust_names())}, got {rule!r}")
    if rule in _REGISTERED:
        cls, sums = _REGISTERED[rule]
        if uplink is not None and not uplink.exact and not sums:
            raise ValueError(f"algorithm.robust {rule} was registered without over_the_air=True "
                             "(not a sum), so it cannot be computed over the air: use a digital "
                             "link (network.model tdma), or register it as a sum")
        try:
            made = cls(uplink)
        except Exception as exc:  # a user's class: its error, in one line
            raise ValueError(f"algorithm.robust {rule}: {cls.__name__}(uplink) failed: "
                             f"{type(exc).__name__}: {str(exc)[:120]}") from None
        if not isinstance(made, Aggregator):
            raise ValueError(f"algorithm.robust {rule}: {cls.__name__}(uplink) is not an "
                             "Aggregator")
        if uplink is not None:  # a sum handed to the link is as exact as the link
            made.exact, made.needs_clients = uplink.exact, uplink.needs_clients
        return made
    if rule == "mean":
        return uplink or Mean()
    if rule == "norm_bounded":
        return NormBounded(norm_bound, uplink)
    if uplink is not None and not uplink.exact:
        raise ValueError(f"algorithm.robust {rule} is not a sum, so it cannot be computed over "
                         "the air (the server receives only the noisy sum): use robust "
                         "norm_bounded or mean there, or a digital link (network.model tdma)")
    if rule == "median":
        return Median()
    if rule == "trimmed_mean":
        return TrimmedMean(trim)
    if rule == "bulyan":
        return Bulyan(byzantine)
    return Krum(byzantine, select)
