"""The local rule of every submodel method (``docs/papers/rafed.md`` §2–3): :class:`SubmodelSGD`."""

from __future__ import annotations

import torch
from typing_extensions import override

from wirelessfl.algorithms.rafed.masks import kept_units
from wirelessfl.engine.batch import RowStack
from wirelessfl.engine.client import LocalHParams, LocalSGD
from wirelessfl.models import noise
from wirelessfl.models.base import FLModel, Params, UnitGroup


class SubmodelSGD(LocalSGD):
    """Local SGD on a submodel: masked gradients, HeteroFL's scaler, FjORD's step widths.

    Everything is elementwise on the client's own tensors (its ``context``), so the loop and
    the batched engine run the same rule; FjORD's width draw comes from the client's noise
    stream (:mod:`wirelessfl.models.noise`), the same in both engines.
    """

    elementwise = True  # its gradient hooks act entry by entry: safe on stacked clients

    def __init__(self, model: FLModel, hp: LocalHParams, groups: tuple[UnitGroup, ...],
                 scaler: bool, levels: tuple[float, ...] | None) -> None:
        super().__init__(model, hp)
        self.groups, self.scaler, self.levels = groups, scaler, levels
        self.consumers = {s.param for g in groups for s in g.slices if s.dim == 1}
        #: units each level keeps, per group (FjORD's per-step widths)
        self.kept = {g.name: [kept_units(g, r) for r in levels] for g in groups} if levels else {}

    @override
    def context(self, task):
        return task.broadcast or {}

    @override
    def stacked_context(self, batch, device):
        """The stacked broadcast (masks, 1/r, allowed widths) as it came: no Python per client."""
        if not isinstance(batch.broadcast, RowStack):
            return None
        return {name: {k: v.to(device) for k, v in tree.items()}
                for name, tree in batch.broadcast.tree.items()}

    @override
    def objective(self, params, buffers, start, x, y, w, ctx):
        if self.scaler:  # scaling a layer's inputs by 1/r = scaling the pruned outputs
            params = {k: v * ctx["rate"]["inv"] if k in self.consumers else v
                      for k, v in params.items()}
        if self.levels is not None:
            params = self._ordered_dropout(params, ctx["rate"]["allowed"])
        return super().objective(params, buffers, start, x, y, w, ctx)

    @override
    def correct(self, grads, params, start, ctx):
        if "mask" not in ctx:
            return grads
        return {k: g * ctx["mask"][k] for k, g in grads.items()}

    def _ordered_dropout(self, params: Params, allowed: torch.Tensor) -> Params:
        """The prefix of a width p drawn from the ``allowed`` levels (≤ r_n), this step."""
        u = noise.uniform((1,), allowed.device)[0]
        pick = torch.clamp((u * allowed).floor(), max=allowed - 1).long()
        out = dict(params)
        for g in self.groups:
            keep = torch.tensor(self.kept[g.name], device=allowed.device)
            for s in g.slices:
                v = out[s.param]
                units = v.shape[s.dim] // (s.width * s.blocks)
                line = (torch.arange(units, device=v.device) < keep[pick]).to(v.dtype)
                line = line.repeat_interleave(s.width).repeat(s.blocks)
                view = [1] * v.dim()
                view[s.dim] = -1
                out[s.param] = v * line.view(view)
        return out
