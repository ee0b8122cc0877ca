"""Linear and convolution layers with a fast rule for clients stacked by ``vmap``.

Under ``torch.func.vmap`` over stacked client parameters (the batched client engine), PyTorch
maps ``nn.Linear`` to ``x @ W^T`` whose backward builds each weight gradient transposed
(``x^T g``, 784 × 300 for the FCNN) and ``nn.Conv2d`` to a grouped convolution in NCHW. On
CPU both are slow: the transposed gradient makes the GEMM and the optimiser update that reads
it strided. :class:`Linear` and :class:`Conv2d` compute the same functions and the same
gradients, and give ``vmap`` its own rule:

- linear: ``y = (W x^T)^T`` per client, one ``bmm``, so the weight gradient ``g^T x`` comes
  out in W's layout (measured on 60 stacked FCNN clients: forward + weight gradient 24 ms,
  the SGD update after it 4.7 ms instead of 11.5 ms);
- convolution: clients as groups of one grouped convolution in channels-last layout (60
  stacked LeNet-5 clients: a full step 184 ms instead of 221 ms);
- a linear weight shared by every client (unbatched under ``vmap``: the round's received
  model, which MOON's anchor features read) runs as one ``F.linear`` over all the clients'
  rows;
- max pooling (:func:`max_pool2d`): the clients' channels pooled where the convolution left
  them, without PyTorch's copy of the clients to the front (60 stacked LeNet-5 clients: a
  step of forward and backward 79 ms instead of 159 ms; LeNet-5 batched rounds went from
  1.6x to 2.7-2.9x the loop on 2 cores).

Outside ``vmap`` they are ``F.linear`` / ``F.conv2d`` with hand-written first derivatives
(no double backward, which no algorithm here needs). State-dict names and initialisation
are those of ``nn.Linear`` / ``nn.Conv2d``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from typing_extensions import override

from wirelessfl.models import vmap_rules
from wirelessfl.models.lowrank import LowRankLinearFn, LowRankWeight
from wirelessfl.openmp import cpu_info


def _front(t: torch.Tensor | None, dim: int | None, n: int) -> torch.Tensor | None:
    """``t`` with its client dimension first (broadcast to ``n`` clients if it has none)."""
    if t is None:
        return None
    return t.movedim(dim, 0) if dim is not None else t.expand(n, *t.shape)


class _LayerFn(torch.autograd.Function):
    """Saves the input and weight, whether there is a bias, and the layer's other arguments."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        x, w, b, *ctx.args = inputs
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None


class _LinearFn(_LayerFn):
    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return F.linear(x, w, b)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        x, w = ctx.saved_tensors
        x, w = x.to(g.dtype), w.to(g.dtype)  # autocast: the gradient's type (autograd casts back)
        need_x, need_w, need_b = ctx.needs_input_grad
        g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
        return (g @ w if need_x else None, g2.T @ x2 if need_w else None,
                g2.sum(0) if ctx.has_bias and need_b else None)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: torch.Tensor, w: torch.Tensor,
             b: torch.Tensor | None) -> tuple[torch.Tensor, int]:
        n = info.batch_size
        low = _low_rank(w) if in_dims[1] is None else None
        if low is None and in_dims[1] is None and in_dims[2] is None:
            return _LinearFn.apply(_front(x, in_dims[0], n), w, b), 0  # one weight: one GEMM
        x, b = _front(x, in_dims[0], n), _front(b, in_dims[2], n)
        rows = x.reshape(n, -1, x.shape[-1])
        if low is not None:  # a start shared by all plus each client's steps, low-rank
            y = LowRankLinearFn.apply(rows, w, low)
        else:
            w = _front(w, in_dims[1], n)
            use = _fused_use(w)
            y = _stacked_matmul(rows, w) if use is None else _SGDLinearFn.apply(rows, w, use)
        if b is not None:
            y = y + b.unsqueeze(1).to(y.dtype)
        return y.reshape(*x.shape[:-1], y.shape[-1]), 0


def _column_major(w: torch.Tensor) -> bool:
    """Whether stacked weights ``(n, out, in)`` lie in memory as ``(n, in, out)``."""
    return w.stride(1) == 1 and w.stride(2) != 1


#: Fewest outputs for which a row-major stacked weight's forward GEMM is ``rows W^T`` (the
#: output in rows) rather than ``(W rows^T)^T``.
ROWS_FIRST_MIN_OUT = 64


def _stacked_matmul(rows: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``rows W^T`` per client, ``(n, B, in)`` by ``(n, out, in)``.

    A column-major stack (:func:`column_major`), or a row-major one with at least
    :data:`ROWS_FIRST_MIN_OUT` outputs, gives the output in rows, ``(n, B, out)``
    contiguous, for the bias, activation and next layer after it. A narrower row-major
    one is computed as ``(W rows^T)^T``. Measured on 2 AVX2 cores, 30 clients, batch 50,
    GEMM and bias: 784 → 300 6.7 against 7.6 ms, 400 → 120 1.46 against 1.74 ms, 120 → 84
    0.29 against 0.31 ms, but 300 → 10 0.24 against 0.16 ms.
    """
    if _column_major(w) or w.shape[1] >= ROWS_FIRST_MIN_OUT:
        return torch.bmm(rows, w.transpose(1, 2))
    return torch.bmm(w, rows.transpose(1, 2)).transpose(1, 2)


class _SGDLinearFn(torch.autograd.Function):
    """Stacked ``rows W^T`` whose backward takes W's SGD step in place (:func:`sgd_in_backward`).

    The backward computes the input's gradient with the old W, then ``W ← W − γ gᵀ rows`` as
    one ``baddbmm_`` (the weight gradient is never stored), and gives W no gradient. A W
    that the forward pass used more than once (a recurrent layer) gets its gradient instead.
    """

    @staticmethod
    def forward(rows: torch.Tensor, w: torch.Tensor, use: _FusedUse) -> torch.Tensor:
        return _stacked_matmul(rows, w)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        rows, w, ctx.use = inputs
        ctx.save_for_backward(rows, w)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        rows, w = ctx.saved_tensors
        g_rows = torch.bmm(g, w) if ctx.needs_input_grad[0] else None  # before the step
        column = _column_major(w)
        if ctx.use.count > 1:  # used again: the gradient, in W's layout, summed by autograd
            g_w = (torch.bmm(rows.transpose(1, 2), g).transpose(1, 2) if column
                   else torch.bmm(g.transpose(1, 2), rows))
            return g_rows, g_w, None
        w = w.detach()
        if ctx.use.before is not None:  # the rule's own part of the step (a drift), in place
            ctx.use.before(w)
        ctx.use.stepped = True
        if column:
            w.transpose(1, 2).baddbmm_(rows.transpose(1, 2), g, alpha=-ctx.use.lr)
        else:
            w.baddbmm_(g.transpose(1, 2), rows, alpha=-ctx.use.lr)
        return g_rows, None, None


class _FusedUse:
    """A weight of :func:`sgd_in_backward`: step size, uses, drift, whether it was stepped.

    The uses are counted in this forward pass; the drift is the in-place map taken before
    the gradient step.
    """

    def __init__(self, lr: float, before: Callable[[torch.Tensor], None] | None) -> None:
        self.lr, self.count, self.before, self.stepped = lr, 0, before, False


_fused = threading.local()


@contextlib.contextmanager
def sgd_in_backward(params: dict[str, torch.Tensor], lr: float,
                    before: Callable[[str, torch.Tensor], None] | None = None,
                    low_rank: dict[str, LowRankWeight] | None = None) -> Iterator[set[str]]:
    """Stacked :class:`Linear` weights among ``params`` take their SGD step in the backward pass.

    Within the block (one forward and backward pass), a :class:`Linear` under ``vmap`` whose
    stacked weight is one of ``params`` (the same storage, shape and strides, 3-D) computes
    its forward pass as usual, but its backward pass updates that tensor in place,
    ``W ← W − lr ∇W``, fused into the weight-gradient GEMM, and gives W no gradient
    (``autograd.grad`` needs ``allow_unused=True`` and returns None for it). A weight the
    forward pass used more than once (an LSTM's, at every time step) gets its gradient as
    usual instead. For a plain SGD step only (no momentum, decay, correction or penalty on
    W), on parameters the caller owns. The fusion saves two of the five passes over the
    stacked weights per step (the gradient's write and the update's read of it): 60
    stacked FCNN clients on 2 cores, weight gradient and update 13 ms → 6 ms per step.

    ``before(name, W)``, if given, changes W in place between its input gradient and its
    gradient step: a rule's step ``W ← W − lr (∇W + d(W))`` with ``d`` independent of the
    gradient is ``before`` taking ``W ← W − lr d(W)`` (FedProx's pull towards the start).
    The block yields the set of names whose weights the backward pass stepped (``before``
    included); the caller steps the others.

    ``low_rank`` maps names of 2-D entries of ``params`` (a start shared by every client,
    unstacked under ``vmap``) to their :class:`~wirelessfl.models.lowrank.LowRankWeight`:
    a :class:`Linear` reading such a weight computes each client's own weight from the start
    and the factors of its steps, and its backward pass records the step as new factors
    (:mod:`wirelessfl.models.lowrank`); those names are among the stepped ones.
    """
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0):
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
    if not all(isinstance(v, torch.Tensor) for v in params.values()):
        raise TypeError("params must map names to tensors")
    if before is not None and not callable(before):
        raise TypeError(f"before must be a function (name, tensor) or None, got {before!r}")
    uses = {name: _FusedUse(float(lr), None if before is None else functools.partial(before, name))
            for name, v in params.items() if v.dim() == 3}
    low_rank = low_rank or {}
    if any(name not in params or params[name].dim() != 2 or not isinstance(v, LowRankWeight)
           for name, v in low_rank.items()):
        raise ValueError("low_rank must map names of 2-D entries of params to LowRankWeight")
    previous = getattr(_fused, "state", None), getattr(_fused, "low_rank", None)
    _fused.state = {_where(v): uses[name] for name, v in params.items() if name in uses}
    _fused.low_rank = {_where(params[name]): v for name, v in low_rank.items()}
    stepped: set[str] = set()
    try:
        yield stepped
    finally:
        _fused.state, _fused.low_rank = previous
        stepped.update(name for name, use in uses.items() if use.stepped)
        stepped.update(low_rank)


def _where(w: torch.Tensor) -> tuple:
    """A tensor's storage, shape and strides: how a layer recognises a registered weight."""
    return w.data_ptr(), tuple(w.shape), w.stride()


def _low_rank(w: torch.Tensor) -> LowRankWeight | None:
    """The :class:`~wirelessfl.models.lowrank.LowRankWeight` registered for ``w``, or None."""
    state = getattr(_fused, "low_rank", None)
    if not state or w.dim() != 2:
        return None
    try:
        return state.get(_where(w))
    except RuntimeError:  # a wrapper of an inner vmap (no storage)
        return None


def _fused_use(w: torch.Tensor) -> _FusedUse | None:
    """The :func:`sgd_in_backward` record of ``w`` (its use counted), or None."""
    state = getattr(_fused, "state", None)
    if state is None or w.dim() != 3:
        return None
    try:
        use = state.get(_where(w))
    except RuntimeError:  # a wrapper of an inner vmap (no storage): not a stacked parameter
        return None
    if use is not None:
        use.count += 1
    return use


class _Conv2dFn(_LayerFn):
    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: tuple,
                padding: tuple, channels_last: bool) -> torch.Tensor:
        return F.conv2d(x, w, b, stride, padding)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        x, w = ctx.saved_tensors
        x, w = x.to(g.dtype), w.to(g.dtype)  # autocast: the gradient's type (autograd casts back)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        stride, padding, _ = ctx.args
        gx, gw, gb = torch.ops.aten.convolution_backward(
            g, x, w, [w.shape[0]] if ctx.has_bias else None, list(stride), list(padding),
            [1, 1], False, [0, 0], 1,
            [need_x, need_w, ctx.has_bias and need_b])
        return gx, gw, gb, None, None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: torch.Tensor, w: torch.Tensor,
             b: torch.Tensor | None, stride: tuple, padding: tuple,
             channels_last: bool) -> tuple[torch.Tensor, int]:
        n = info.batch_size
        x, w, b = _front(x, in_dims[0], n), _front(w, in_dims[1], n), _front(b, in_dims[2], n)
        if STACKED_CONV.get(x.device.type, "grouped") == "gemm" \
                and _patch_bytes(x, w, stride, padding) <= GEMM_MAX_PATCH_BYTES:
            return gemm_conv2d(x, w, b, stride, padding, channels_last), 0
        return grouped_conv2d(x, w, b, stride, padding, channels_last), 1


#: How a stacked convolution (clients under ``vmap``) is computed, by device type:
#: ``"grouped"``, the clients as the groups of one grouped convolution
#: (:func:`grouped_conv2d`), or ``"gemm"``, patches and one batched matrix product
#: (:func:`gemm_conv2d`). Both give the same function and gradients (tested); they differ in
#: what the device launches. On the CPU oneDNN runs a grouped convolution as one operator, and
#: it is the faster (60 LeNet-5 clients, batch 50, on 2 cores: a step of forward and
#: backward 77 ms grouped, 348 ms as GEMMs). On CUDA a grouped
#: convolution of n clients launched one cuDNN kernel per client and step (6,000 a LeNet-5
#: round); the GEMM form launches the same few kernels for any number of clients (its time
#: on a GPU is not yet measured: ``benchmarks/gpu_suite.py``'s ``conv`` part times both). A device
#: type not listed takes ``"grouped"``, and so does a layer whose patches would take more than
#: :data:`GEMM_MAX_PATCH_BYTES` (a ResNet's wide 3 × 3 layers: nine times their input, kept
#: for the backward).
STACKED_CONV: dict[str, str] = {"cpu": "grouped", "cuda": "gemm"}
#: Largest patch matrix (bytes) a ``"gemm"`` stacked convolution builds (256 MiB).
GEMM_MAX_PATCH_BYTES = 2**28


def _patch_bytes(x: torch.Tensor, w: torch.Tensor, stride: tuple, padding: tuple) -> int:
    """Bytes of :func:`gemm_conv2d`'s patch matrix for ``x`` ``(n, B, C, H, W)``."""
    kh, kw = w.shape[-2:]
    h_out = (x.shape[3] + 2 * padding[0] - kh) // stride[0] + 1
    w_out = (x.shape[4] + 2 * padding[1] - kw) // stride[1] + 1
    return x.shape[0] * x.shape[1] * x.shape[2] * kh * kw * h_out * w_out * x.element_size()


def grouped_conv2d(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: tuple,
                   padding: tuple, channels_last: bool = True) -> torch.Tensor:
    """The convolutions of n clients as the groups of one grouped convolution.

    ``x`` is ``(n, B, C, H, W)``, ``w`` ``(n, O, C, k, k)``. Returns ``(B, n, O, H', W')``
    (clients second, where the grouped convolution leaves them; channels-last when
    ``channels_last``).
    """
    n = x.shape[0]
    batch, c_in, height, width = x.shape[1:]
    grouped = x.transpose(0, 1).reshape(batch, n * c_in, height, width)
    try:
        grouped = grouped.contiguous(memory_format=torch.channels_last if channels_last
                                     else torch.contiguous_format)
    except RuntimeError:  # inside an outer vmap (MOON's anchors): no layout to choose
        grouped = grouped.contiguous()
    y = F.conv2d(grouped, w.reshape(-1, *w.shape[2:]),
                 None if b is None else b.reshape(-1), stride, padding, 1, n)
    return y.reshape(batch, n, w.shape[1], *y.shape[2:])


def gemm_conv2d(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: tuple,
                padding: tuple, channels_last: bool = True) -> torch.Tensor:
    """The convolutions of n clients as one batched GEMM over their patches (im2col by views).

    ``x`` ``(n, B, C, H, W)``, ``w`` ``(n, O, C, kh, kw)``; returns ``(n, B, O, H', W')``
    (channels-last in memory; NCHW-contiguous when not ``channels_last``). The input is
    zero-padded, its patches taken as a strided view (``Tensor.unfold``, no kernel) and laid
    out once as ``(n, B·H'·W', C·kh·kw)``; then ``y_n = patches_n w_nᵀ + b_n`` is one
    ``baddbmm`` for all clients. Forward and backward launch a fixed number of kernels
    whatever n is (pad, one copy, one GEMM; two GEMMs, the unfold's and the pad's backward),
    where the pad-free ``F.unfold`` would launch one im2col kernel per image on CUDA. It
    holds the patches, ``kh·kw`` times the input, for the backward.
    """
    n, batch, c_in = x.shape[:3]
    c_out, kh, kw = w.shape[1], w.shape[3], w.shape[4]
    (sh, sw), (ph, pw) = stride, padding
    flat = x.reshape(n * batch, c_in, *x.shape[3:])
    if ph or pw:
        flat = F.pad(flat, (pw, pw, ph, ph))
    patches = flat.unfold(2, kh, sh).unfold(3, kw, sw)  # (nB, C, H', W', kh, kw), a view
    h_out, w_out = patches.shape[2:4]
    cols = patches.permute(0, 2, 3, 1, 4, 5).reshape(n, batch * h_out * w_out, c_in * kh * kw)
    weight = w.reshape(n, c_out, -1).transpose(1, 2)
    y = torch.bmm(cols, weight) if b is None else torch.baddbmm(b.unsqueeze(1), cols, weight)
    y = y.view(n, batch, h_out, w_out, c_out).permute(0, 1, 4, 2, 3)
    return y if channels_last else y.contiguous()


class _MaxPool2dFn(torch.autograd.Function):
    """Max pooling (kernel = stride, no padding) with indices for its own backward."""

    @staticmethod
    def forward(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return F.max_pool2d(x, k, return_indices=True)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(inputs[0], output[1])
        ctx.k = inputs[1]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: torch.Tensor, _g_index: torch.Tensor) -> tuple:
        x, index = ctx.saved_tensors
        k = ctx.k
        return torch.ops.aten.max_pool2d_with_indices_backward(
            g, x, [k, k], [k, k], [0, 0], [1, 1], False, index), None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: torch.Tensor, k: int) -> tuple[tuple, tuple]:
        # clients folded into channels where they lie (the stacked convolution leaves them
        # beside the channels, channels-last): pooling is per channel, so no copy is needed
        n = info.batch_size
        x = _front(x, in_dims[0], n).transpose(0, 1)  # (batch, n, C, H, W)
        b, _, c, h, w = x.shape
        y, index = F.max_pool2d(x.reshape(b, n * c, h, w), k, return_indices=True)
        shape = (b, n, c, *y.shape[-2:])
        return (y.reshape(shape), index.reshape(shape)), (1, 1)


def max_pool2d(x: torch.Tensor, k: int) -> torch.Tensor:
    """``F.max_pool2d(x, k)`` (stride k, no padding) with a stacked-client rule.

    Under ``vmap`` the clients' channels are pooled as one tensor in the layout the stacked
    convolution left them in (60 LeNet-5 clients: conv1's pooling, forward and backward,
    37 ms against 56 ms through PyTorch's own rule, which first copies clients to the front).
    """
    return vmap_rules.apply(_MaxPool2dFn, x, int(k))[0]


#: Fewest outputs for which :func:`column_major` stacks a :class:`Linear` weight column-major.
COLUMN_MAJOR_MIN_OUT = 128
#: CPU kernel capabilities (``torch.backends.cpu.get_cpu_capability()``) on which
#: :func:`column_major` stacks pay; on the others the weights stay row-major.
COLUMN_MAJOR_CAPABILITIES = frozenset({"AVX512"})
#: CPU vendors (``vendor_id`` of ``/proc/cpuinfo``) on which they pay, with such a capability.
COLUMN_MAJOR_VENDORS = frozenset({"GenuineIntel"})


def cpu_vendor() -> str:
    """The CPU vendor of this machine (``GenuineIntel``, ``AuthenticAMD``; ``""``: unknown)."""
    return cpu_info("vendor_id")


def column_major(model: nn.Module, capability: str | None = None,
                 vendor: str | None = None) -> frozenset[str]:
    """Names of the weights the batched engine stacks column-major on the CPU.

    Those of :class:`Linear` layers with at least :data:`COLUMN_MAJOR_MIN_OUT` outputs, on a CPU
    whose kernel capability (``capability``, default this machine's
    ``torch.backends.cpu.get_cpu_capability()``) is in :data:`COLUMN_MAJOR_CAPABILITIES` and
    whose vendor (``vendor``, default :func:`cpu_vendor`) is in :data:`COLUMN_MAJOR_VENDORS`;
    none elsewhere. A weight stacked as ``(clients, in, out)`` in memory (viewed as ``(clients,
    out, in)``) makes the stacked forward pass ``x W^T`` and its weight gradient ``x^T g`` GEMMs
    on unit-stride operands, and the gradient comes out in the same layout, so the update stays
    one contiguous pass. Which layout the BLAS runs faster depends on its kernels. Measured on 2
    cores of an AVX-512 machine (matmul 2048² at 340-440 GFLOP/s), 60 stacked clients, batch 50:
    the FCNN's 784 → 300 layer's forward 7.3 → 4.9 ms and weight gradient 10.6 → 8.0 ms; a
    forward and backward with update 38 → 27 ms; narrow layers (10 outputs) were slower this way
    (0.56 → 0.72 ms), layers of 120 and more the same or faster. On 2 cores of an AVX2 machine
    (AMD EPYC, matmul 2048² at 140-160 GFLOP/s), 30 stacked clients: the weight gradient took
    15.8 ms column-major against 7.8 ms row-major (forward 9.2 against 8.9 ms), and the FCNN
    HFedAvg round of ``benchmarks/engine.py`` 4.95 s against 3.64 s; so row-major there. On 2
    cores of an AMD EPYC with AVX-512 (matmul 2048² at 192 GFLOP/s; 2026-11-26) row-major was
    faster too: FedAvg rounds of 60 clients × 20 steps 0.482 → 0.465 s, of 1,000 clients × 3
    steps 0.668 → 0.618 s; hence the vendor as well as the capability. The choice is fixed by
    the machine (same seed, same numbers on it); the two layouts' weight gradients may differ in
    the last bits.
    """
    for name, value in (("capability", capability), ("vendor", vendor)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a string such as 'AVX512' or 'GenuineIntel', "
                            f"got {type(value).__name__}")
    if (capability or torch.backends.cpu.get_cpu_capability()) not in COLUMN_MAJOR_CAPABILITIES \
            or (cpu_vendor() if vendor is None else vendor) not in COLUMN_MAJOR_VENDORS:
        return frozenset()
    return frozenset(f"{name}.weight" if name else "weight" for name, m in model.named_modules()
                     if isinstance(m, Linear) and m.out_features >= COLUMN_MAJOR_MIN_OUT)


class Linear(nn.Linear):
    """``nn.Linear`` with a batched-matmul rule for stacked clients (module docstring)."""

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return vmap_rules.apply(_LinearFn, x, self.weight, self.bias)


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` (no dilation, groups or padding modes) with a stacked-client rule.

    ``channels_last`` (default True) runs the stacked clients' grouped convolution in
    channels-last layout, faster on CPU (60 LeNet-5 clients, 5 steps: 1.9 s against 2.4 s in
    NCHW). Set it False for a convolution that feeds BatchNorm: PyTorch's CPU batch norm on
    channels-last tensors is less exact, and its backward amplifies that, so a ResNet-18-BN
    step's gradients came out about 3e-3 off (relative, against float64) where NCHW, as
    the loop, gave 5e-6, and loop and batched runs drifted apart by percents in a few steps.
    """

    def __init__(self, *args: Any, channels_last: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.channels_last = bool(channels_last)
        if self.dilation != (1, 1) or self.groups != 1 or self.padding_mode != "zeros" \
                or isinstance(self.padding, str):
            raise ValueError("wirelessfl Conv2d supports only integer zero padding, "
                             "dilation 1 and groups 1")

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return vmap_rules.apply(_Conv2dFn, x, self.weight, self.bias, self.stride,
                                self.padding, self.channels_last)


class GroupNorm(nn.GroupNorm):
    """``nn.GroupNorm`` written with reshapes and reductions, so it runs under ``vmap``.

    PyTorch's CPU group-norm kernel asks for the input's memory format, which ``vmap`` cannot
    answer for stacked clients; this form computes the same statistics (biased variance,
    ``eps`` inside the root) from the tensor's values. The channel count comes from the
    weight it is given, so sliced submodels (RA-Fed) normalise their own channels.
    """

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c = x.shape[0], x.shape[1]
        g = x.reshape(b, self.num_groups, -1)
        mean = g.mean(-1, keepdim=True)
        var = (g - mean).pow(2).mean(-1, keepdim=True)
        y = ((g - mean) / torch.sqrt(var + self.eps)).reshape(x.shape)
        if self.affine:
            shape = (1, c) + (1,) * (x.dim() - 2)
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        return y
