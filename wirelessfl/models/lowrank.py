"""Stacked clients' linear weights kept as one shared start plus their low-rank SGD steps.

A plain SGD step on a linear layer ``y = x Wᵀ`` changes client i's weight by
``−γ G_iᵀ X_i``: the layer's input rows X_i (B × in) and the gradient of the client's loss at
its output G_i (B × out), a matrix of rank at most B. After s steps from a start W₀ shared
by every client (FedAvg's global model),

    W_i = W₀ − γ Σ_{r<s} G_{i,r}ᵀ X_{i,r} = W₀ + Ĝ_iᵀ X̂_i,                           (1)

with X̂_i the s·B input rows of the client's steps so far and Ĝ_i their output gradients
times −γ. The batched engine may keep such a weight as (1) instead of as a stack of
clients × out × in numbers (:class:`LowRankWeight`), when s·B is small beside the layer
(:data:`~wirelessfl.engine.batched.LOWRANK_MAX_SHARE`; many clients with a few small-batch
steps each, the cross-device regime):

- forward: ``x W_iᵀ = x W₀ᵀ + (x X̂_iᵀ) Ĝ_i``: one GEMM over every client's rows with the
  shared W₀ (the fast shape, where a stacked ``x W_iᵀ`` of B rows a client is not) and two
  small batched products;
- input gradient: ``g W_i = g W₀ + (g Ĝ_iᵀ) X̂_i`` likewise;
- the step keeps (X, G) as factors, the very tensors of its forward and backward passes (no
  copy; −γ enters each product as its ``alpha``): no weight gradient is formed;
- the pseudo-gradient Δ_i = W₀ − W_end = −Ĝ_iᵀ X̂_i (:class:`LowRankDelta`), and a round's
  weighted sum of them, Σ_i c_i Δ_i, is one GEMM a step over all clients' factors.

The numbers are those of the stacked weights to float rounding (the same products, summed in
another order; tested against the stacked engine and the loop to 1e-5 relative). Measured
on 2 cores of an AMD EPYC (AVX-512), FedAvg on the FCNN with 1,000 clients × 3 steps of batch
20: the docs' performance page gives the numbers.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["LowRankDelta", "LowRankWeight"]


class LowRankWeight:
    """A stacked linear weight as its shared start and its steps' factors, eq. (1).

    The factors are the steps' own tensors, kept by reference: the layer's input rows (which
    its forward pass saved anyway) and its output gradients, unscaled; −γ enters each product
    as its ``alpha``. Nothing is copied per step.

    Parameters
    ----------
    start : Tensor
        W₀ (out × in), shared by every client.
    clients : int
        Clients stacked.
    lr : float
        γ of every step.
    """

    def __init__(self, start: torch.Tensor, clients: int, lr: float) -> None:
        if start.dim() != 2:
            raise ValueError(f"a low-rank weight starts from one 2-D weight, got {tuple(start.shape)}")
        if clients < 1:
            raise ValueError(f"clients must be >= 1, got {clients}")
        self.start, self.clients, self.lr = start, int(clients), float(lr)
        self.x: list[torch.Tensor] = []  # X̂ by use: (clients, B, in) input rows
        self.g: list[torch.Tensor] = []  # Ĝ/(−γ) by use: (clients, B, out) output gradients

    @property
    def rank(self) -> int:
        """Rows of factors recorded so far (Σ of the recorded uses' batch widths)."""
        return sum(x.shape[1] for x in self.x)

    @property
    def uses(self) -> int:
        """Uses recorded so far (a step of a layer used once a forward pass is one use)."""
        return len(self.x)

    def record(self, rows: torch.Tensor, grad: torch.Tensor) -> None:
        """One step of every client: ``W_i ← W_i − γ grad_iᵀ rows_i`` (keeps the factors)."""
        if rows.shape[:2] != grad.shape[:2] or rows.shape[0] != self.clients:
            raise ValueError(f"factors of shapes {tuple(rows.shape)} and {tuple(grad.shape)} do "
                             f"not stack {self.clients} clients' rows")
        self.x.append(rows)
        self.g.append(grad)

    def forward(self, rows: torch.Tensor, uses: int) -> torch.Tensor:
        """``rows_i W_iᵀ`` for every client with the first ``uses`` recorded uses, (n, B, out)."""
        n, b, cols = rows.shape
        y = (rows.reshape(n * b, cols) @ self.start.t()).view(n, b, -1)
        for x, g in zip(self.x[:uses], self.g[:uses]):
            y.baddbmm_(torch.bmm(rows, x.transpose(1, 2)), g, alpha=-self.lr)
        return y

    def input_grad(self, grad: torch.Tensor, uses: int) -> torch.Tensor:
        """``grad_i W_i`` for every client with the first ``uses`` recorded uses, (n, B, in)."""
        n, b, out = grad.shape
        gx = (grad.reshape(n * b, out) @ self.start).view(n, b, -1)
        for x, g in zip(self.x[:uses], self.g[:uses]):
            gx.baddbmm_(torch.bmm(grad, g.transpose(1, 2)), x, alpha=-self.lr)
        return gx

    def delta(self) -> LowRankDelta:
        """Each client's Δ_i = W₀ − W_i = γ Σ_r G_{i,r}ᵀ X_{i,r}, kept factored."""
        return LowRankDelta(self.g, self.x, self.lr)


class LowRankDelta:
    """Stacked pseudo-gradients Δ_i = scale · Σ_r G_{i,r}ᵀ X_{i,r}, kept factored.

    Shape (clients, out, in), as the dense stack's.

    Parameters
    ----------
    g : list of Tensor
        Output gradients, one (clients, B_r, out) stack per recorded use r.
    x : list of Tensor
        Input rows, one (clients, B_r, in) stack per use.
    scale : float
        The factor of every product (γ for SGD steps).
    """

    def __init__(self, g: list[torch.Tensor], x: list[torch.Tensor], scale: float = 1.0) -> None:
        if not g or len(g) != len(x) or any(
                a.dim() != 3 or b.dim() != 3 or a.shape[:2] != b.shape[:2]
                or a.shape[0] != g[0].shape[0] for a, b in zip(g, x)):
            raise ValueError("factors of shapes "
                             f"{[tuple(a.shape) for a in g]} and {[tuple(b.shape) for b in x]} "
                             "do not stack the same clients and rows")
        self.g, self.x, self.scale = list(g), list(x), float(scale)

    @property
    def shape(self) -> torch.Size:
        """(clients, out, in), as the dense stack's."""
        return torch.Size((self.g[0].shape[0], self.g[0].shape[2], self.x[0].shape[2]))

    @property
    def dtype(self) -> torch.dtype:  # noqa: D102
        return self.g[0].dtype

    @property
    def device(self) -> torch.device:  # noqa: D102
        return self.g[0].device

    def dense(self) -> torch.Tensor:
        """The stacked Δ_i, (clients, out, in) contiguous."""
        out = torch.bmm(self.g[0].transpose(1, 2), self.x[0]).mul_(self.scale)
        for g, x in zip(self.g[1:], self.x[1:]):
            out.baddbmm_(g.transpose(1, 2), x, alpha=self.scale)
        return out

    def row_norms_sq(self) -> torch.Tensor:
        """‖Δ_i‖²_F of every client, shape (clients,), float64, from the factors (never dense).

        With G_i and X_i the client's recorded rows of all uses stacked, Δ_i = s·G_iᵀX_i and
        ‖Δ_i‖²_F = s²·Σ (G_iG_iᵀ) ∘ (X_iX_iᵀ): two small Gram matrices a client.
        """
        g = torch.cat(self.g, 1).double()
        x = torch.cat(self.x, 1).double()
        gram = torch.bmm(g, g.transpose(1, 2)) * torch.bmm(x, x.transpose(1, 2))
        return gram.sum((1, 2)).clamp_min(0.0) * self.scale ** 2

    def weighted_sum(self, coef: torch.Tensor) -> torch.Tensor:
        """Σ_i coef_i Δ_i, (out, in): one GEMM a use over every client's factor rows."""
        n, _, out = self.g[0].shape
        coef = coef.to(self.dtype).view(n, 1, 1)
        total = None
        for g, x in zip(self.g, self.x):
            scaled = (g * coef).reshape(-1, out).t()
            rows = x.reshape(-1, x.shape[2])
            total = (torch.mm(scaled, rows).mul_(self.scale) if total is None
                     else total.addmm_(scaled, rows, alpha=self.scale))
        return total

    def index_select(self, dim: int, index: torch.Tensor) -> LowRankDelta:
        """The clients at ``index`` (``dim`` must be 0, the clients')."""
        if dim != 0:
            raise ValueError(f"a low-rank delta selects clients (dim 0), not dim {dim}")
        return LowRankDelta([g.index_select(0, index) for g in self.g],
                            [x.index_select(0, index) for x in self.x], self.scale)


class LowRankLinearFn(torch.autograd.Function):
    """``rows_i W_iᵀ`` of a :class:`LowRankWeight`; the backward records the step, eq. (1).

    The forward and the input gradient use the factors recorded before this forward pass
    (the step's own go after them), so a weight the forward pass uses twice steps once with
    both uses' factors, as the stacked step would sum their gradients.
    """

    @staticmethod
    def forward(rows: torch.Tensor, start: torch.Tensor, weight: LowRankWeight) -> torch.Tensor:
        return weight.forward(rows, weight.uses)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        rows, _, ctx.weight = inputs
        ctx.uses = ctx.weight.uses
        ctx.save_for_backward(rows)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        (rows,) = ctx.saved_tensors
        g_rows = ctx.weight.input_grad(grad, ctx.uses) if ctx.needs_input_grad[0] else None
        ctx.weight.record(rows, grad)
        return g_rows, None, None
