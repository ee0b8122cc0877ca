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
- the step appends (X, −γ G) to the factors: no weight gradient is formed;
- the pseudo-gradient Δ_i = W₀ − W_end = −Ĝ_iᵀ X̂_i (:class:`LowRankDelta`), and a round's
  weighted sum of them, Σ_i c_i Δ_i, is one GEMM over all clients' factors.

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

    Parameters
    ----------
    start : Tensor
        W₀ (out × in), shared by every client.
    clients : int
        Clients stacked.
    capacity : int
        Rows of factors it holds before it grows: the sum of the steps' batch widths.
    lr : float
        γ of every step.
    """

    def __init__(self, start: torch.Tensor, clients: int, capacity: int, lr: float) -> None:
        if start.dim() != 2:
            raise ValueError(f"a low-rank weight starts from one 2-D weight, got {tuple(start.shape)}")
        if clients < 1 or capacity < 1:
            raise ValueError(f"clients and capacity must be >= 1, got {clients} and {capacity}")
        out, cols = start.shape
        self.start, self.lr = start, float(lr)
        self.x = start.new_empty(clients, capacity, cols)  # X̂: the steps' input rows
        self.g = start.new_empty(clients, capacity, out)   # Ĝ: their output gradients × −γ
        self.rank = 0  # rows of factors recorded so far

    def record(self, rows: torch.Tensor, grad: torch.Tensor) -> None:
        """One step of every client: ``W_i ← W_i − γ grad_iᵀ rows_i`` (appends the factors)."""
        width = rows.shape[1]
        if self.rank + width > self.x.shape[1]:  # a weight used twice a step: room for more
            more = max(self.rank + width, 2 * self.x.shape[1]) - self.x.shape[1]
            n = self.x.shape[0]
            self.x = torch.cat([self.x, self.x.new_empty(n, more, self.x.shape[2])], 1)
            self.g = torch.cat([self.g, self.g.new_empty(n, more, self.g.shape[2])], 1)
        self.x[:, self.rank:self.rank + width].copy_(rows)
        torch.mul(grad, -self.lr, out=self.g[:, self.rank:self.rank + width])
        self.rank += width

    def forward(self, rows: torch.Tensor, rank: int) -> torch.Tensor:
        """``rows_i W_iᵀ`` for every client with the first ``rank`` rows of factors, (n, B, out)."""
        n, b, cols = rows.shape
        y = (rows.reshape(n * b, cols) @ self.start.t()).view(n, b, -1)
        if rank:
            y.baddbmm_(torch.bmm(rows, self.x[:, :rank].transpose(1, 2)), self.g[:, :rank])
        return y

    def input_grad(self, grad: torch.Tensor, rank: int) -> torch.Tensor:
        """``grad_i W_i`` for every client with the first ``rank`` rows of factors, (n, B, in)."""
        n, b, out = grad.shape
        gx = (grad.reshape(n * b, out) @ self.start).view(n, b, -1)
        if rank:
            gx.baddbmm_(torch.bmm(grad, self.g[:, :rank].transpose(1, 2)), self.x[:, :rank])
        return gx

    def delta(self) -> LowRankDelta:
        """Each client's Δ_i = W₀ − W_i = −Ĝ_iᵀ X̂_i, kept factored."""
        return LowRankDelta(self.g[:, :self.rank], self.x[:, :self.rank])


class LowRankDelta:
    """Stacked pseudo-gradients Δ_i = −G_iᵀ X_i, shape (clients, out, in), kept factored.

    Parameters
    ----------
    g : Tensor
        The output gradients times −γ, one (R, out) matrix per client.
    x : Tensor
        The input rows, one (R, in) matrix per client.
    """

    def __init__(self, g: torch.Tensor, x: torch.Tensor) -> None:
        if g.dim() != 3 or x.dim() != 3 or g.shape[:2] != x.shape[:2]:
            raise ValueError(f"factors of shapes {tuple(g.shape)} and {tuple(x.shape)} do not "
                             "stack the same clients and rows")
        self.g, self.x = g, x

    @property
    def shape(self) -> torch.Size:
        """(clients, out, in), as the dense stack's."""
        return torch.Size((self.g.shape[0], self.g.shape[2], self.x.shape[2]))

    @property
    def dtype(self) -> torch.dtype:  # noqa: D102
        return self.g.dtype

    @property
    def device(self) -> torch.device:  # noqa: D102
        return self.g.device

    def dense(self) -> torch.Tensor:
        """The stacked Δ_i, (clients, out, in) contiguous."""
        return torch.bmm(self.g.transpose(1, 2), self.x).neg_()

    def weighted_sum(self, coef: torch.Tensor) -> torch.Tensor:
        """Σ_i coef_i Δ_i, (out, in): one GEMM over every client's factor rows."""
        n, r, out = self.g.shape
        scaled = self.g * coef.to(self.g.dtype).view(n, 1, 1)
        return (scaled.reshape(n * r, out).t() @ self.x.reshape(n * r, -1)).neg_()

    def index_select(self, dim: int, index: torch.Tensor) -> LowRankDelta:
        """The clients at ``index`` (``dim`` must be 0, the clients')."""
        if dim != 0:
            raise ValueError(f"a low-rank delta selects clients (dim 0), not dim {dim}")
        return LowRankDelta(self.g.index_select(0, index), self.x.index_select(0, index))


class LowRankLinearFn(torch.autograd.Function):
    """``rows_i W_iᵀ`` of a :class:`LowRankWeight`; the backward records the step, eq. (1).

    The forward and the input gradient use the factors recorded before this forward pass
    (the step's own go after them), so a weight the forward pass uses twice steps once with
    both uses' factors, as the stacked step would sum their gradients.
    """

    @staticmethod
    def forward(rows: torch.Tensor, start: torch.Tensor, weight: LowRankWeight) -> torch.Tensor:
        return weight.forward(rows, weight.rank)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        rows, _, ctx.weight = inputs
        ctx.rank = ctx.weight.rank
        ctx.save_for_backward(rows)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        (rows,) = ctx.saved_tensors
        g_rows = ctx.weight.input_grad(grad, ctx.rank) if ctx.needs_input_grad[0] else None
        ctx.weight.record(rows, grad)
        return g_rows, None, None
