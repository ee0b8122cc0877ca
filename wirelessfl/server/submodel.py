"""Submodels: slicing the units a client keeps out of the global parameters, and back.

A *selection* maps unit-group names to the indices of the units kept. HIST draws disjoint
selections, one per cell (``docs/papers/hist.md`` §1.3(b), §4.4); RA-Fed draws one per client
(``docs/papers/rafed.md`` §2.1). :class:`Submodel` turns a selection into per-parameter index
tuples and offers three views of the same thing:

- :meth:`Submodel.slice` — the physically smaller parameters (the fast, sliced form);
- :meth:`Submodel.scatter` — write sliced parameters back into full-size ones;
- :meth:`Submodel.mask` — 0/1 masks of full size (the masked form of eq. (5)).

:class:`SubmodelStack` holds the submodels of C clients that keep equally many units of
every group (RA-Fed's clients of one ratio) with a leading client dimension: each view is
one indexing operator per parameter for all C clients, and :meth:`SubmodelStack.add_into`
adds their sliced updates into one full-size tree (one accumulating ``index_put_``).
:class:`Submodels` is a round's clients in such stacks.

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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from channels.validation import check_rng
from wirelessfl.models.base import Params, UnitGroup, check_tree

Selection = Mapping[str, torch.Tensor]


def _expand(units: torch.Tensor, width: int, blocks: int = 1, size: int = 0) -> torch.Tensor:
    """Entry indices of ``units`` (its last dimension) when each unit owns ``width`` consecutive entries.

    With ``blocks`` > 1 the dimension stacks that many blocks of ``size`` units (an LSTM's
    gates): unit j owns the same entries in every block. Leading dimensions (a stack's
    clients) are kept.
    """
    lead = units.shape[:-1]
    if width > 1:
        units = (units[..., :, None] * width
                 + torch.arange(width, device=units.device)).reshape(*lead, -1)
    if blocks > 1:
        offsets = torch.arange(blocks, device=units.device) * (size * width)
        units = (offsets[:, None] + units[..., None, :]).reshape(*lead, -1)
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


class SubmodelStack:
    """The submodels of C clients that keep equally many units of every group, stacked.

    Row c of ``selection[g]`` ``(C, k_g)`` is client c's kept units of group g: the views of
    :class:`Submodel`, for all C clients at once (one indexing operator per parameter).

    Parameters
    ----------
    groups : sequence of UnitGroup
        The model's unit groups (only those named in ``selection`` matter).
    selection : mapping of str to LongTensor, each of shape (C, k_g)
        Kept unit indices per group name and client, each row without repeats.
    like : Params
        Full-size parameters (for shapes and device).

    Examples
    --------
    >>> from wirelessfl.models import build_model
    >>> model = build_model("fcnn", (1, 28, 28), 10, seed=0)
    >>> subs = SubmodelStack(model.unit_groups, {"fc1": torch.tensor([[0, 1], [5, 9]])},
    ...                      model.params())
    >>> tuple(subs.slice(model.params())["fc2.weight"].shape)
    (2, 10, 2)
    """

    def __init__(self, groups: Sequence[UnitGroup], selection: Mapping[str, torch.Tensor],
                 like: Params) -> None:
        by_name = {g.name: g for g in groups}
        check_tree("like", like, finite=False)
        if not isinstance(selection, Mapping) or not selection:
            raise TypeError("`selection` must map unit-group names to (clients, units) indices")
        self.selection: dict[str, torch.Tensor] = {}
        for name, u in selection.items():
            got = torch.as_tensor(u)
            if name not in by_name:
                raise ValueError(f"selection names unit group {str(name)[:40]!r}; the model has "
                                 f"{sorted(by_name)}")
            if got.is_floating_point() or got.is_complex() or got.dtype == torch.bool \
                    or got.dim() != 2:
                raise ValueError(f"unit indices of {name!r} must be a (clients, units) array of "
                                 f"integers, got {got.dtype} of shape {tuple(got.shape)}")
            if got.numel() and (got.min() < 0 or got.max() >= by_name[name].size):
                raise ValueError(f"unit indices of {name!r} must lie in [0, {by_name[name].size})")
            ordered = got.sort(dim=1).values
            if (ordered[:, 1:] == ordered[:, :-1]).any():
                raise ValueError(f"unit indices of {name!r} repeat a unit in a row; give each "
                                 "kept unit once")
            self.selection[name] = got.to(torch.long)
        rows = {t.shape[0] for t in self.selection.values()}
        if len(rows) != 1:
            raise ValueError(f"every group's selection needs one row per client, got {sorted(rows)}")
        self.num_clients = rows.pop()
        dims: dict[str, dict[int, torch.Tensor]] = {}
        for name, units in self.selection.items():
            group = by_name[name]
            for s in group.slices:
                if s.param not in like or not 0 <= s.dim < like[s.param].dim() or \
                        like[s.param].shape[s.dim] != group.size * s.width * s.blocks:
                    raise ValueError(f"`like` must hold the full-size parameter {s.param!r} of "
                                     f"unit group {name!r} ({group.size} units)")
                device = like[s.param].device
                dims.setdefault(s.param, {})[s.dim] = _expand(units.to(device), s.width,
                                                              s.blocks, group.size)
        self.dims, self._groups, self._like = dims, tuple(groups), like
        self.shapes = {k: tuple(v.shape) for k, v in like.items()}
        #: per sliced parameter, the index of its (C, *sliced) entries in the full tensor
        self._index = {p: self._broadcast_index(d, self.shapes[p], like[p].device)
                       for p, d in dims.items()}
        self._sizes = {k: math.prod(self._sliced_shape(k)) for k in like}

    def _broadcast_index(self, dims: dict[int, torch.Tensor], shape: tuple[int, ...],
                         device: torch.device) -> tuple[torch.Tensor, ...]:
        n, out = len(shape), []
        for j, size in enumerate(shape):
            view = [1] * (n + 1)
            if j in dims:
                view[0], view[j + 1] = self.num_clients, dims[j].shape[1]
                out.append(dims[j].view(view))
            else:
                view[j + 1] = size
                out.append(torch.arange(size, device=device).view(view))
        return tuple(out)

    def _sliced_shape(self, name: str) -> tuple[int, ...]:
        out = list(self.shapes[name])
        for d, idx in self.dims.get(name, {}).items():
            out[d] = int(idx.shape[1])
        return tuple(out)

    def __len__(self) -> int:
        return self.num_clients

    def _rows(self, name: str, device: torch.device) -> tuple[torch.Tensor, ...]:
        """The index of the (C, *sliced) entries in a (C, *full) stack."""
        view = [self.num_clients] + [1] * len(self.shapes[name])
        return (torch.arange(self.num_clients, device=device).view(view), *self._index[name])

    def num_params(self) -> int:
        """Parameters of one client's submodel (all C alike)."""
        return sum(self._sizes.values())

    def slice(self, params: Params) -> Params:
        """Every client's submodel of the full ``params``: ``(C, *sliced)`` (shared ones expanded)."""
        return {k: v[self._index[k]] if k in self._index else v.expand(self.num_clients, *v.shape)
                for k, v in params.items()}

    def slice_rows(self, stack: Params) -> Params:
        """Row c of each ``(C, *full)`` stack sliced by client c's selection: ``(C, *sliced)``."""
        return {k: v[self._rows(k, v.device)] if k in self._index else v
                for k, v in stack.items()}

    def scatter_rows(self, stack: Params) -> Params:
        """``(C, *full)`` stacks, zero but where row c holds client c's ``(C, *sliced)`` entries."""
        out = {}
        for k, v in stack.items():
            if k not in self._index:
                out[k] = v
                continue
            full = v.new_zeros((self.num_clients, *self.shapes[k]))
            full[self._rows(k, v.device)] = v
            out[k] = full
        return out

    def write_rows(self, stack: Params, values: Params) -> Params:
        """``(C, *full)`` stacks with client c's entries of row c set to row c of ``values``.

        ``values`` are ``(C, *sliced)``; ``stack`` is written in place (a shared parameter
        is ``values``' own).
        """
        out = {}
        for k, v in stack.items():
            if k in self._index:
                v[self._rows(k, v.device)] = values[k].to(v.dtype)
                out[k] = v
            else:
                out[k] = values[k].to(v.dtype)
        return out

    def masks(self, like: Params) -> Params:
        """0/1 masks ``(C, *full)``: 1 on each client's kept entries (on every shared one)."""
        ones = {k: torch.ones((self.num_clients, *self._sliced_shape(k)), dtype=v.dtype,
                              device=v.device) for k, v in like.items()}
        return self.scatter_rows(ones)

    def add_into(self, acc: Params, stack: Params) -> None:
        """``acc`` (full size) += Σ_c of row c of ``stack`` ``(C, *sliced)`` at client c's entries.

        In place, one accumulating ``index_put_`` per sliced parameter (a shared one adds
        the rows' sum).
        """
        for k, v in stack.items():
            if k in self._index:
                acc[k].index_put_(self._index[k], v.to(acc[k].dtype), accumulate=True)
            else:
                acc[k] += v.sum(0).to(acc[k].dtype)

    def client(self, c: int) -> Submodel:
        """Client c's submodel as a :class:`Submodel` (for code that goes client by client)."""
        return Submodel(self._groups, {g: s[c] for g, s in self.selection.items()}, self._like)


@dataclass(frozen=True)
class Submodels(Sequence):
    """A round's submodels: its clients in :class:`SubmodelStack` s of equal sizes.

    ``stacks[j]`` holds the clients at positions ``rows[j]`` of the round (ascending). As a
    sequence, item i is the round's client i as a :class:`Submodel` (built on access, for
    code that goes client by client).
    """

    stacks: tuple[SubmodelStack, ...]
    rows: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return sum(len(r) for r in self.rows)

    @property
    def order(self) -> np.ndarray:
        """The round position of every stacked row, stack after stack."""
        return np.concatenate(self.rows) if self.rows else np.zeros(0, np.int64)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.client(j) for j in range(len(self))[i]]
        return self.client(range(len(self))[i])

    def client(self, i: int) -> Submodel:
        """The round's client i as a :class:`Submodel`."""
        for stack, rows in zip(self.stacks, self.rows):
            at = np.flatnonzero(rows == i)
            if len(at):
                return stack.client(int(at[0]))
        raise IndexError(f"the round has {len(self)} clients, not {i + 1}")


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
