"""Submodels: slicing the units a client keeps out of the global parameters, and back.

A *selection* maps unit-group names to the indices of the units kept. HIST draws disjoint
selections, one per cell (``docs/papers/hist.md`` §1.3(b), §4.4); RA-Fed draws one per client
(``docs/papers/rafed.md`` §2.1). :class:`Submodel` turns a selection into per-parameter index
tuples and offers three views of the same thing:

- :meth:`Submodel.slice` — the physically smaller parameters (the fast, sliced form);
- :meth:`Submodel.scatter` — write sliced parameters back into full-size ones;
- :meth:`Submodel.mask` — 0/1 masks of full size (the masked form of eq. (5)).

For ReLU networks the sliced and the masked forms give identical iterates (§1.3(e)).

Examples
--------
>>> from wirelessfl.models import build_model
>>> model = build_model("fcnn", (1, 28, 28), 10, seed=0)
>>> sub = Submodel(model.unit_groups, {"fc1": torch.arange(100)}, model.params())
>>> {k: tuple(v.shape) for k, v in sub.slice(model.params()).items()}
{'fc1.weight': (100, 784), 'fc1.bias': (100,), 'fc2.weight': (10, 100), 'fc2.bias': (10,)}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from channels.validation import check_rng
from wirelessfl.models.base import Params, UnitGroup, check_tree

Selection = Mapping[str, torch.Tensor]


def _expand(units: torch.Tensor, width: int, blocks: int = 1, size: int = 0) -> torch.Tensor:
    """Entry indices of ``units`` when each unit owns ``width`` consecutive entries.

    With ``blocks`` > 1 the dimension stacks that many blocks of ``size`` units (an LSTM's
    gates): unit j owns the same entries in every block.
    """
    if width > 1:
        units = (units[:, None] * width + torch.arange(width, device=units.device)).reshape(-1)
    if blocks > 1:
        offsets = torch.arange(blocks, device=units.device) * (size * width)
        units = (offsets[:, None] + units[None, :]).reshape(-1)
    return units


class Submodel:
    """The parameter indices of one selection of units.

    Parameters
    ----------
    groups : sequence of UnitGroup
        The model's unit groups (only those named in ``selection`` matter).
    selection : mapping of str to LongTensor
        Kept unit indices per group name, each in ``[0, group.size)`` without repeats.
    like : Params
        Full-size parameters (for shapes and device).
    """

    def __init__(self, groups: Sequence[UnitGroup], selection: Selection, like: Params) -> None:
        by_name = {g.name: g for g in groups}
        check_tree("like", like, finite=False)
        if not isinstance(selection, dict):
            raise TypeError(f"`selection` must map unit-group names to unit indices, got "
                            f"{type(selection).__name__}")
        self.selection = {}
        for name, u in selection.items():
            got = torch.as_tensor(u)
            if got.is_floating_point() or got.is_complex() or got.dtype == torch.bool \
                    or got.dim() != 1:
                raise ValueError(f"unit indices of {str(name)[:40]!r} must be a 1-d list of "
                                 f"integers, got {got.dtype} of shape {tuple(got.shape)}")
            if got.numel() != torch.unique(got).numel():
                raise ValueError(f"unit indices of {str(name)[:40]!r} repeat a unit; give each "
                                 "kept unit once")
            self.selection[name] = got.to(torch.long)
        self.dims: dict[str, dict[int, torch.Tensor]] = {}
        for name, units in self.selection.items():
            if name not in by_name:
                raise ValueError(f"selection names unit group {name!r}; the model has "
                                 f"{sorted(by_name)}")
            group = by_name[name]
            if units.numel() and (units.min() < 0 or units.max() >= group.size):
                raise ValueError(f"unit indices of {name!r} must lie in [0, {group.size})")
            for s in group.slices:
                if s.param not in like or not 0 <= s.dim < like[s.param].dim() or \
                        like[s.param].shape[s.dim] != group.size * s.width * s.blocks:
                    raise ValueError(f"`like` must hold the full-size parameter {s.param!r} of "
                                     f"unit group {name!r} ({group.size} units); give the "
                                     "model's full parameters")
                device = like[s.param].device
                self.dims.setdefault(s.param, {})[s.dim] = _expand(units.to(device), s.width,
                                                                   s.blocks, group.size)
        self._index = {p: self._index_tuple(d) for p, d in self.dims.items()}
        # shapes and dtypes only (meta tensors), to check the trees handed to the views
        self._like = {k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in like.items()}
        self._sub_like = {k: torch.empty(self._sliced_shape(k, v.shape), dtype=v.dtype,
                                         device="meta") for k, v in like.items()}

    def _sliced_shape(self, name: str, shape: torch.Size) -> tuple[int, ...]:
        out = list(shape)
        for d, idx in self.dims.get(name, {}).items():
            out[d] = int(idx.numel())
        return tuple(out)

    @staticmethod
    def _index_tuple(dims: dict[int, torch.Tensor]) -> tuple:
        if set(dims) == {0, 1}:
            return dims[0][:, None], dims[1][None, :]
        if 0 in dims:
            return (dims[0],)
        return slice(None), dims[1]

    def index(self, name: str) -> tuple:
        """Index of the kept entries of parameter ``name`` (for ``full[index] = sliced``)."""
        return self._index[name]

    def slice(self, params: Params) -> Params:
        """The submodel's parameters: sliced where units own them, shared ones as they are."""
        check_tree("params", params, self._like)
        out = {}
        for k, v in params.items():
            dims = self.dims.get(k)
            if dims is None:
                out[k] = v
                continue
            for d, idx in sorted(dims.items()):
                v = v.index_select(d, idx)
            out[k] = v
        return out

    def scatter(self, full: Params, sub: Params) -> Params:
        """Full-size parameters equal to ``full`` with ``sub`` written into its positions.

        Parameters not touched by the selection are taken from ``sub`` whole.
        """
        check_tree("full", full, self._like)
        check_tree("sub", sub, self._sub_like)
        out = {}
        for k, v in full.items():
            if k not in self._index:
                out[k] = sub[k]
                continue
            t = v.clone()
            t[self._index[k]] = sub[k]
            out[k] = t
        return out

    def mask(self, like: Params) -> Params:
        """0/1 masks of full size: 1 on the kept entries of sliced parameters, 1 on shared ones."""
        check_tree("like", like, self._like)
        out = {}
        for k, v in like.items():
            if k not in self._index:
                out[k] = torch.ones_like(v)
                continue
            m = torch.zeros_like(v)
            m[self._index[k]] = 1.0
            out[k] = m
        return out

    def num_params(self, like: Params) -> int:
        """Number of parameters of the sliced submodel."""
        check_tree("like", like, self._like, finite=False)
        return sum(int(v.numel()) for v in self._sub_like.values())


def random_disjoint_selections(groups: Sequence[UnitGroup], sizes: Sequence[Sequence[int]],
                               rng: np.random.Generator) -> list[dict[str, torch.Tensor]]:
    """Disjoint, covering selections with given sizes (``docs/papers/hist.md`` §4.4).

    For each group draw a uniform random permutation of its K units and cut it into
    consecutive blocks of the requested sizes.

    Parameters
    ----------
    groups : sequence of UnitGroup
        The groups to split (e.g. the model's ``hist_groups``).
    sizes : sequence of sequence of int, shape (len(groups), N)
        Units per cell for each group; each row must sum to that group's K.
    rng : numpy.random.Generator
        The masks stream.

    Returns
    -------
    list of dict
        One selection per cell.
    """
    check_rng(rng)
    try:
        rows = [np.asarray(s) for s in sizes]
        if any(r.ndim != 1 or r.dtype.kind not in "iu" for r in rows):
            raise TypeError
    except TypeError:
        raise TypeError("`sizes` must be rows of integers, one row per group") from None
    sizes = [r.tolist() for r in rows]
    n_cells = {len(s) for s in sizes}
    if len(sizes) != len(groups) or len(n_cells) != 1:
        raise ValueError("`sizes` must have one row per group, all rows of the same length")
    out: list[dict[str, torch.Tensor]] = [{} for _ in range(n_cells.pop())]
    for g, row in zip(groups, sizes):
        if sum(row) != g.size or min(row) < 0:
            raise ValueError(f"sizes {row} for group {g.name!r} must be >= 0 and sum to {g.size}")
        perm = torch.from_numpy(rng.permutation(g.size))
        for j, block in enumerate(torch.split(perm, row)):
            out[j][g.name] = block.sort().values
    return out
