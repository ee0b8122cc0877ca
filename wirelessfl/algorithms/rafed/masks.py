"""Neuron index sets of resource-adaptive submodels (``docs/papers/rafed.md`` §2.1.1–2.1.3).

Client n with resource ratio r_n keeps k = ⌈r_n H_ℓ⌉ of the H_ℓ units of every prunable
layer ℓ (rounded up to the group's ``multiple``, e.g. an even count under GroupNorm(2));
inputs and the output layer are always whole. *Which* k units is the mask policy's choice:

- ``random`` (default): a fresh uniform subset per client and round;
- ``static``: a uniform subset drawn once per client (round 0's draw, kept for the run);
- ``prefix``: the first k units (HeteroFL's nested submodels);
- ``rolling``: the window {(q + j) mod H : 0 ≤ j < k} of round q (FedRolex);
- ``coverage_aware``: clients (in a random order) first take the least-covered units still
  below Γ_min (ties broken at random), then fill their remaining capacity at random, so
  every unit ends with coverage Γ ≥ Γ_min whenever Σ_n k_n ≥ Γ_min H (otherwise the
  policy refuses: no assignment could reach it).

:func:`draw` returns one selection (group name → sorted unit indices) per client; the
selections of a round are a pure function of (policy, round, seed stream).

Examples
--------
>>> from wirelessfl.models.base import UnitGroup
>>> g = (UnitGroup("fc1", 8, ()),)
>>> [s["fc1"].tolist() for s in draw("rolling", g, [0.5, 0.25], 3, np.random.default_rng(0))]
[[3, 4, 5, 6], [3, 4]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from channels.validation import as_finite, as_float, as_int, check_rng, short
from wirelessfl.models.base import UnitGroup

POLICIES = ("random", "static", "prefix", "rolling", "coverage_aware")


def kept_units(group: UnitGroup, ratio: float) -> int:
    """The number of units kept, ⌈r H⌉ for ratio r ∈ (0, 1], rounded up to the group's multiple."""
    ratio = as_float("ratio", ratio, lo=0, hi=1, lo_open=True)  # a neuron ratio r
    k = max(1, math.ceil(ratio * group.size - 1e-9))
    m = group.multiple
    return min(group.size, -(-k // m) * m)


def draw(policy: str, groups: Sequence[UnitGroup], ratios: Sequence[float], round_: int,
         rng: np.random.Generator, *, gamma_min: int = 1) -> list[dict[str, torch.Tensor]]:
    """The round's selections, one per client (ratio ``ratios[n]``).

    The selections of :func:`draw_levels`, client by client.

    Parameters
    ----------
    policy : str
        One of :data:`POLICIES`.
    groups : sequence of UnitGroup
        The prunable groups (a model's ``unit_groups``).
    ratios : sequence of float
        Neuron ratio r_n of each client of the round.
    round_ : int
        q (the ``rolling`` window's offset).
    rng : numpy.random.Generator
        The round's mask stream (``static`` passes round 0's).
    gamma_min : int
        Γ_min of ``coverage_aware``.
    """
    out: list[dict[str, torch.Tensor]] = [{} for _ in range(_checked_len(ratios))]
    for rows, sel in draw_levels(policy, groups, ratios, round_, rng, gamma_min=gamma_min):
        for i, n in enumerate(rows.tolist()):
            out[n] = {g: s[i] for g, s in sel.items()}
    return out


def draw_levels(policy: str, groups: Sequence[UnitGroup], ratios: Sequence[float], round_: int,
                rng: np.random.Generator, *, gamma_min: int = 1, among: np.ndarray | None = None
                ) -> list[tuple[np.ndarray, dict[str, torch.Tensor]]]:
    """The round's selections (:func:`draw`'s) as stacks of clients that keep equally many units.

    Returns ``(rows, selection)`` pairs: the positions ``rows`` (ascending) of clients whose
    kept counts agree in every group, and per group their units ``(len(rows), k)`` (each row
    sorted): what :class:`~wirelessfl.server.submodel.SubmodelStack` takes. No Python per
    client but ``coverage_aware``'s greedy pass (one client after another by its definition).
    ``among`` keeps only those positions of ``ratios`` (``static``: every client's draw, the
    round's clients kept), and ``rows`` are then positions in ``among``; the stream is drawn
    as for all of ``ratios``.
    """
    if policy not in POLICIES:
        raise ValueError(f"mask `policy` must be one of {', '.join(POLICIES)}, got {short(policy)}")
    round_ = as_int("round_", round_, lo=0)
    gamma_min = as_int("gamma_min", gamma_min, lo=1, hi=10**6)
    n = _checked_len(ratios)
    check_rng(rng)
    keep = np.arange(n) if among is None else np.asarray(among, np.int64)
    if not n or not len(keep):
        return []
    r = np.asarray(ratios, float)
    levels, which = np.unique(r, return_inverse=True)  # kept_units once per distinct ratio
    ks = np.array([[kept_units(g, float(v)) for g in groups] for v in levels],
                  np.int64).reshape(len(levels), len(groups))[which.reshape(-1)]
    sizes, member = np.unique(ks[keep], axis=0, return_inverse=True)
    member = member.reshape(-1)
    out = [(np.flatnonzero(member == j), {}) for j in range(len(sizes))]
    for gi, g in enumerate(groups):
        if policy == "coverage_aware":
            picks = _coverage_aware(g.size, ks[:, gi], gamma_min, rng)
        elif policy in ("random", "static"):  # the k smallest of i.i.d. keys: a uniform k-subset
            order = np.argsort(rng.random((n, g.size)), axis=1)
        for j, (rows, sel) in enumerate(out):
            k, at = int(sizes[j, gi]), keep[rows]
            if policy == "prefix":
                units = np.broadcast_to(np.arange(k), (len(rows), k))
            elif policy == "rolling":
                units = np.broadcast_to(np.sort((round_ + np.arange(k)) % g.size), (len(rows), k))
            elif policy == "coverage_aware":
                units = np.stack([picks[i] for i in at.tolist()])
            else:
                units = np.sort(order[at, :k], axis=1)
            sel[g.name] = torch.from_numpy(np.array(units, dtype=np.int64))
    return out


def _checked_len(ratios: Sequence[float]) -> int:
    """len(ratios), each a neuron ratio in (0, 1] (TypeError, ValueError otherwise)."""
    if isinstance(ratios, (str, bytes)) or not isinstance(ratios, Sequence | np.ndarray):
        raise TypeError(f"`ratios` must be a list of neuron ratios, one per client, got "
                        f"{short(ratios)}")
    if np.asarray(ratios).dtype.kind == "b":
        raise ValueError("`ratios` must be neuron ratios in (0, 1], got booleans")
    got = as_finite("ratios", ratios, lo=0, hi=1, lo_open=True)
    if got.ndim != 1:
        raise ValueError(f"`ratios` must be a flat list, one ratio per client, got shape {got.shape}")
    return len(got)


def _coverage_aware(size: int, ks: np.ndarray, gamma_min: int,
                    rng: np.random.Generator) -> list[np.ndarray]:
    """Greedy least-covered-first assignment with Γ ≥ Γ_min on every unit (see module doc)."""
    if int(ks.sum()) < gamma_min * size:
        raise ValueError(f"coverage Γ_min = {gamma_min} needs Σ_n k_n >= {gamma_min * size} "
                         f"units of a {size}-unit layer, but the clients hold {int(ks.sum())}: "
                         "lower gamma_min or raise the ratios")
    count = np.zeros(size, dtype=np.int64)
    picks: list[np.ndarray] = [np.empty(0, np.int64)] * len(ks)
    for n in rng.permutation(len(ks)):
        k = int(ks[n])
        key = count + rng.random(size)                 # least covered first, random ties
        key[count >= gamma_min] = np.inf               # only units still below Γ_min ...
        need = np.argsort(key)[:min(k, int((count < gamma_min).sum()))]
        rest = np.setdiff1d(np.arange(size), need)     # ... then random spare capacity
        chosen = np.concatenate([need, rng.permutation(rest)[:k - len(need)]])
        count[chosen] += 1
        picks[n] = np.sort(chosen)
    return picks


def parameter_fraction(groups: Sequence[UnitGroup], shapes: dict[str, torch.Size],
                       ratio: float) -> float:
    """‖m‖₁/d of a submodel keeping ⌈r H⌉ units of every group (``docs/papers/rafed.md`` §2.1.2).

    Which units does not matter, only how many: a weight between two prunable layers keeps
    about r² of its entries, one next to the input or output layer about r.
    """
    from wirelessfl.server.submodel import Submodel

    ratio = as_float("ratio", ratio, lo=0, hi=1, lo_open=True)
    if not isinstance(shapes, dict):
        raise TypeError(f"`shapes` must map parameter names to shapes, got {type(shapes).__name__}")
    missing = sorted({s.param for g in groups for s in g.slices} - set(shapes))
    if missing:
        raise ValueError(f"`shapes` lacks the parameter {missing[0]!r} of a unit group; give "
                         "every parameter's shape")
    like = {name: torch.empty(shape, device="meta") for name, shape in shapes.items()}
    prefix = {g.name: torch.arange(kept_units(g, ratio)) for g in groups}
    total = sum(int(torch.Size(s).numel()) for s in shapes.values())
    return Submodel(groups, prefix, like).num_params(like) / total


def ratio_for_fraction(groups: Sequence[UnitGroup], shapes: dict[str, torch.Size],
                       fraction: float) -> float:
    """The smallest neuron ratio whose submodel holds at least ``fraction`` of the parameters.

    For the abstract's "50% parameters" setting (§2.1.2, §7 item 12): a neuron ratio of
    about 0.71 for a CNN, about 0.545 for the 784-200-200-10 MLP (whose first layer, next to
    the input, scales with r alone). Bisection over r; the fraction is monotone in r.
    """
    as_float("fraction", fraction, lo=0, hi=1, lo_open=True)
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if mid > 0 and parameter_fraction(groups, shapes, mid) >= fraction:
            hi = mid
        else:
            lo = mid
    return hi
