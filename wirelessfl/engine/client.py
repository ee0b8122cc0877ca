"""Client local training, written as pure functions: the contract every executor runs.

Local training is three functions (``specs`` of every paper reduce to this shape):

- ``client_init(params, state) -> carry`` — start from the model the server sent and the
  client's persistent state (e.g. Adam moments for FAdamGC, control variates for SCAFFOLD);
- ``client_step(carry, x, y) -> carry`` — one mini-batch step;
- ``client_final(carry) -> ClientResult`` — the pseudo-gradient ``start − end``, the new
  persistent state and metrics.

:class:`LocalSGD` implements them for SGD (momentum, weight decay) and Adam; algorithms
subclass it to change the step (FAdamGC's corrected moments, FedProx's proximal term).
An *executor* (:mod:`wirelessfl.engine.loop`) decides how the functions run over many
clients: :class:`~wirelessfl.engine.loop.LoopExecutor` one after another (the reference);
a batched executor (stacked clients) plugs in behind the same
:class:`~wirelessfl.engine.loop.Executor` interface. A round's clients go to it as one
:class:`~wirelessfl.engine.batch.ClientBatch` and come back as
:class:`~wirelessfl.engine.batch.ClientResults` (:mod:`wirelessfl.engine.batch`).

Mini-batch order: :mod:`wirelessfl.engine.schedule`.
"""

from __future__ import annotations

import contextlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call
from typing_extensions import override

from channels.validation import as_float, as_int
from wirelessfl.data.arrays import ArrayDataset
from wirelessfl.engine.schedule import batch_schedule, steps_per_call  # noqa: F401 - re-exported
from wirelessfl.errors import short
from wirelessfl.models.base import FLModel, Params
from wirelessfl.models.lowrank import LowRankDelta
from wirelessfl.models.noise import client_noise, step_key

#: Most local steps one call may run (the batch schedule of a call is held in memory).
MAX_LOCAL_STEPS = 100_000
#: The autocast dtype of each ``local.precision`` other than ``fp32`` and ``tf32``.
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: The values of ``local.precision``.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: fp16's dynamic loss scale: its start, and the overflow-free steps after which it doubles
#: (``torch.amp.GradScaler``'s defaults); an overflowing step halves it.
SCALE_INIT, SCALE_GROWTH_INTERVAL = 2.0**16, 2000


@dataclass(frozen=True)
class LocalHParams:
    """Hyperparameters of local training.

    Attributes
    ----------
    lr : float
        Client step size γ.
    batch_size : int
        Mini-batch size B.
    steps : int
        Local steps H per call (ignored when ``epochs`` is set).
    epochs : int or None
        If set, run this many local epochs per call instead of ``steps``.
    drop_last : bool
        Drop each epoch's last incomplete batch.
    optimizer : str
        ``"sgd"`` or ``"adam"``.
    momentum : float
        SGD momentum (state is reset every call, ``docs/papers/hist.md`` §2.4 [default]).
    weight_decay : float
        L2 coefficient added to the gradient.
    betas : tuple of float
        Adam's (β1, β2).
    eps : float
        Adam's ε.
    schedule : str
        Client learning rate over rounds: ``constant`` or ``poly`` (γ_t = (γ − γ_min)(1 −
        t/T)^p + γ_min, restarted on demand, e.g. at each session of ``docs/papers/dynamic_clients.md``
        §4.3).
    schedule_power, schedule_rounds : float, int
        p and T of ``poly`` (T is required for it).
    schedule_floor : float
        ρ = γ_min / γ of ``poly`` (0: decay to zero; ``lr_poly.json``'s second value).
    precision : str
        ``fp32`` (default; on a GPU IEEE float32 also in cuDNN's convolutions, which PyTorch
        otherwise runs in TF32), ``tf32`` (opt-in: float32 tensors, matmuls and
        convolutions on a GPU in TensorFloat-32, :func:`float32_arithmetic`; the same as
        ``fp32`` on the CPU), ``bf16`` or ``fp16``: the forward and backward passes under
        ``torch.autocast`` in that type, the weights, optimiser state and updates in float32
        (master weights). ``fp16`` scales the loss per client (:data:`SCALE_INIT`, halved and
        the step skipped on an overflow, doubled after :data:`SCALE_GROWTH_INTERVAL` clean
        steps; a skipped step still uses up its mini-batch).
    """

    lr: float = 0.01
    batch_size: int = 50
    steps: int = 20
    epochs: int | None = None
    drop_last: bool = False
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    schedule: str = "constant"
    schedule_power: float = 0.9
    schedule_rounds: int | None = None
    schedule_floor: float = 0.0
    precision: str = "fp32"

    def __post_init__(self) -> None:
        as_float("lr", self.lr, lo=0, hi=1e6, lo_open=True)
        as_int("batch_size", self.batch_size, lo=1, hi=10**6)
        if self.epochs is not None:
            as_int("epochs", self.epochs, lo=1, hi=10**4)
        else:  # zero steps would train nothing
            as_int("steps", self.steps, lo=1, hi=MAX_LOCAL_STEPS)
        as_float("momentum", self.momentum, lo=0, hi=1, hi_open=True)
        as_float("weight_decay", self.weight_decay, lo=0, hi=1e3)
        if len(self.betas) != 2:
            raise ValueError(f"`betas` must be two numbers, got {self.betas}")
        for k, b in zip(("betas[0]", "betas[1]"), self.betas):
            as_float(k, b, lo=0, hi=1, hi_open=True)
        as_float("eps", self.eps, lo=0, hi=1, lo_open=True)
        if self.schedule not in ("constant", "poly"):
            raise ValueError(f"`schedule` must be constant or poly, got {self.schedule!r}")
        as_float("schedule_power", self.schedule_power, lo=0, hi=100)
        if self.schedule == "poly" and self.schedule_rounds is None:
            raise ValueError("`schedule_rounds` (T of the poly schedule) must be set for poly")
        if self.schedule_rounds is not None:
            as_int("schedule_rounds", self.schedule_rounds, lo=1, hi=10**8)
        as_float("schedule_floor", self.schedule_floor, lo=0, hi=1)
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"`optimizer` must be 'sgd' or 'adam', got {self.optimizer!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"`precision` must be {', '.join(PRECISIONS[:-1])} or {PRECISIONS[-1]}, "
                             f"got {self.precision!r}")


#: The GPU back ends whose float32 arithmetic ``local.precision`` sets (PyTorch ≥ 2.9 names).
_FP32_BACKENDS = ("cuda.matmul", "cudnn.conv", "cudnn.rnn")


@contextlib.contextmanager
def float32_arithmetic(precision: str):
    """Within the block, float32 matmuls and convolutions on a GPU in IEEE float32, or TF32.

    ``precision`` ``tf32``: TensorFloat-32 (10-bit mantissa products, float32 accumulation)
    for both; any other: IEEE float32, also for cuDNN's convolutions, which PyTorch
    otherwise lets use TF32 by default (so ``fp32`` convolutions on a GPU give the CPU's
    numbers to float32 rounding, not to TF32's ~1e-3). The settings are restored on exit.
    Nothing changes on the CPU.
    """
    mode = "tf32" if precision == "tf32" else "ieee"
    owners = []
    for name in _FP32_BACKENDS:
        owner = torch.backends
        for part in name.split("."):
            owner = getattr(owner, part, None)
        if owner is not None and hasattr(owner, "fp32_precision"):
            owners.append(owner)
    if owners:  # PyTorch >= 2.9
        before = [o.fp32_precision for o in owners]
        for o in owners:
            o.fp32_precision = mode
    else:  # the legacy flags
        before = [torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32]
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
    try:
        yield
    finally:
        if owners:
            for o, b in zip(owners, before):
                o.fp32_precision = b
        else:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def forked_rng(device: torch.device) -> contextlib.AbstractContextManager:
    """``torch.random.fork_rng`` of ``device``'s generators: the CPU's, and the GPU's on CUDA."""
    return torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else [],
                                 device_type=device.type)


def weighted_cross_entropy(logits: torch.Tensor, y: torch.Tensor,
                           w: torch.Tensor) -> torch.Tensor:
    """``Σ_b w_b CE(logits_b, y_b)``: the samples' cross-entropies, weighted and summed.

    The local objectives' data term, in both engines (the batched one under ``vmap``); ``w``
    holds the batch's sample weights (``1/B``, zero for padding).
    """
    return (F.cross_entropy(logits, y, reduction="none") * w).sum()


def scheduled_lr(hp: LocalHParams, rounds_since_restart: int) -> float:
    """The client learning rate ``rounds_since_restart`` rounds after the schedule (re)started.

    >>> hp = LocalHParams(lr=0.1, schedule="poly", schedule_power=1.0, schedule_rounds=10)
    >>> [round(scheduled_lr(hp, t), 3) for t in (0, 5, 10, 20)]
    [0.1, 0.05, 0.0, 0.0]
    >>> floor = LocalHParams(lr=0.1, schedule="poly", schedule_power=1.0, schedule_rounds=10,
    ...                      schedule_floor=0.3)
    >>> [round(scheduled_lr(floor, t), 3) for t in (0, 5, 10)]
    [0.1, 0.065, 0.03]
    """
    if hp.schedule == "constant":
        return hp.lr
    frac = min(max(rounds_since_restart, 0), hp.schedule_rounds) / hp.schedule_rounds
    if hp.schedule_floor == 0:
        return hp.lr * (1.0 - frac) ** hp.schedule_power
    low = hp.schedule_floor * hp.lr
    return (hp.lr - low) * (1.0 - frac) ** hp.schedule_power + low


def task_lr(task: ClientTask, hp: LocalHParams) -> float:
    """The task's own step size, else the hyperparameters' (a scheduled 0 stays 0)."""
    return hp.lr if task.lr is None else task.lr


@dataclass(frozen=True)
class ClientTask:
    """One client's share of a round.

    Attributes
    ----------
    client : int
        Client id.
    params : Params
        Start model (full or sliced submodel).
    indices : ndarray, shape (n_i,), int64
        The client's samples in the training set.
    seed : int
        Seed of its mini-batch order and dropout (from the ``local`` stream).
    state : Any
        Its persistent state, or None.
    lr : float or None
        Per-client step size overriding ``LocalHParams.lr``.
    broadcast : Any
        Values the server sends to every client of the round with the model (SCAFFOLD's c,
        a teacher, ...), or None.
    buffers : Params or None
        The model's buffers (BatchNorm running statistics) the client starts from; it
        updates its own copy and returns it.
    """

    client: int
    params: Params
    indices: np.ndarray
    seed: int
    state: Any = None
    lr: float | None = None
    broadcast: Any = None
    buffers: Params | None = None


@dataclass(frozen=True)
class ClientResult:
    """What a client returns.

    Attributes
    ----------
    client : int
        Client id.
    delta : Params
        Pseudo-gradient ``start − end`` (same shapes as the task's params); empty when the
        executor folded it into a :class:`DeltaFold`.
    num_samples : int
        Local data size n_i.
    num_steps : int
        Local steps taken.
    loss : float
        Mean training loss over the steps (NaN if none).
    state : Any
        New persistent state.
    buffers : Params or None
        The client's buffers after local training (BatchNorm running statistics).
    """

    client: int
    delta: Params
    num_samples: int
    num_steps: int
    loss: float
    state: Any = None
    buffers: Params | None = None


@dataclass
class Carry:
    """Mutable-free record passed between the three client functions.

    ``ctx`` holds the per-client tensors the update's loss and gradient correction use
    (:meth:`LocalSGD.context`); the batched engine stacks it along the client dimension.
    ``batch_dims`` is the number of leading client dimensions of every tensor (0 for one
    client, 1 on the batched engine): a rule that reduces over a whole client's model (a
    norm) reduces over the other dimensions.
    """

    start: Params
    params: Params
    lr: float
    opt: dict[str, Any] = field(default_factory=dict)
    state: Any = None
    step: int = 0
    loss_sum: float = 0.0
    ctx: dict[str, Params] = field(default_factory=dict)
    buffers: Params = field(default_factory=dict)
    seed: int = 0
    batch_dims: int = 0


class ClientUpdate(ABC):
    """Local training as ``client_init`` / ``client_step`` / ``client_final``."""

    @abstractmethod
    def client_init(self, task: ClientTask) -> Carry:
        """Carry at the start of local training."""

    @abstractmethod
    def client_step(self, carry: Carry, x: torch.Tensor, y: torch.Tensor) -> Carry:
        """Carry after one mini-batch step on ``(x, y)``."""

    def client_final(self, task: ClientTask, carry: Carry) -> ClientResult:
        """Pseudo-gradient, new state and metrics."""
        delta = {k: carry.start[k] - carry.params[k] for k in carry.start}
        return ClientUpdate.result(task, delta, carry.step, float(carry.loss_sum),
                                   dict(carry.buffers), carry.state)

    @staticmethod
    def result(task: ClientTask, delta: Params, steps: int, loss_sum: float,
               buffers: Params, state: Any = None) -> ClientResult:
        """The default final step's result from its pseudo-gradient ``delta``.

        The mean loss over the client's ``steps`` (NaN without a step), its buffers, its
        unchanged state. The batched engine builds it from a whole stack's Δ at once.
        """
        loss = loss_sum / steps if steps else float("nan")
        return ClientResult(task.client, delta, len(task.indices), steps, loss, state,
                            buffers or None)


def check_corrected(rule: type, got: Any, grads: Params) -> None:
    """Refuse a ``correct()`` that does not return one tensor of each gradient's shape.

    A rule returning shape (1,) tensors used to train silently by broadcasting, and one
    returning ``{}`` failed with a bare key error. Shapes are metadata: checking them reads
    nothing from the device (under ``vmap`` they are each client's own shapes).
    """
    where = f"local rule {rule.__name__}: correct()"
    if not isinstance(got, dict) or got.keys() != grads.keys():
        keys = sorted(got)[:3] if isinstance(got, dict) else type(got).__name__
        raise ValueError(f"{where} returned {keys}, not one tensor per parameter "
                         f"({', '.join(sorted(grads)[:3])}, ...): return a dict with the "
                         "gradient's keys")
    for k, g in grads.items():
        v = got[k]
        if not isinstance(v, torch.Tensor) or v.shape != g.shape:
            shape = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
            raise ValueError(f"{where} returned {shape} for {k!r}, whose gradient has shape "
                             f"{tuple(g.shape)}: return a tensor of the gradient's shape "
                             "(it would be broadcast silently)")


class LocalSGD(ClientUpdate):
    """Mini-batch SGD (momentum, weight decay) or Adam on the cross-entropy loss.

    The one client contract every executor runs. A local rule subclasses this and changes
    only the hooks below; the loop and the batched engine then run the rule's own loss,
    gradient correction and final step (the batched engine ``vmap``-s them over stacked
    clients), so every rule stays batched:

    - :meth:`context` — per-client tensors the rule needs (from the task: its state, the
      round's broadcast values), stacked along the client dimension by the batched engine;
    - :meth:`penalty` — extra loss terms of ``(params, start, ctx)``;
    - :meth:`objective` — the whole loss of a batch, for rules whose extra terms need the
      batch itself (MOON's contrastive term on the model's features);
    - :meth:`correct` — an elementwise transform of the gradient, given the iterate and the
      start (SCAFFOLD's control variates, FedProx's proximal gradient μ(w − w_start));
    - :meth:`drift_step` — with :attr:`drifts`, the in-place form of a correction
      ``g + d(p)`` that does not depend on ``g``, so that the batched engine keeps its fused
      plain-SGD step (:attr:`plain_sgd`);
    - :meth:`client_final` — the pseudo-gradient and the new client state.

    :meth:`correct` and :meth:`descend` see the *stacked* clients on the batched engine, so
    they must act entry by entry (a per-tensor norm would mix clients). A rule says so with
    the class attribute :attr:`elementwise`: ``True`` (batched), ``False`` (always run one
    client at a time), or ``None`` (not declared: a rule that overrides those hooks is
    checked against the loop on its first call and falls back to it, with a one-line
    notice, when the numbers differ).

    Parameters
    ----------
    model : FLModel
        Architecture (its own parameters are not used; the task's params are).
    hp : LocalHParams
        Local hyperparameters.
    """

    #: Whether :meth:`correct`/:meth:`descend` act entry by entry (None: not declared).
    elementwise: bool | None = None
    #: Whether an overridden :meth:`objective` uses the parameters only as the model's (in
    #: ``functional_call``), so that its plain SGD steps may be fused (:attr:`plain_sgd`).
    params_only_in_model: bool = False

    def __init__(self, model: FLModel, hp: LocalHParams) -> None:
        self.model, self.hp = model, hp

    # ------------------------------------------------------------------ the rule's hooks
    def context(self, task: ClientTask) -> dict[str, Params]:
        """Per-client tensors of the rule (none for plain SGD)."""
        return {}

    def stacked_context(self, batch: Any, device: torch.device) -> dict[str, Params] | None:
        """Every client's :meth:`context` at once, stacked ``(C, …)`` on ``device``, or None.

        ``batch`` is the round's :class:`~wirelessfl.engine.batch.ClientBatch`. None (the
        default): the batched engine asks :meth:`context` client by client. A rule that
        gives its contexts here must give what :meth:`context` gives, row by row.
        """
        return None

    def stacked_states(self, batch: Any, carry: Carry, deltas: Params,
                       steps: np.ndarray) -> list[Any] | None:
        """The clients' new states from the stacked carry (a final step that only sets the state).

        Called by the batched engine instead of :meth:`client_final` client by client when a
        rule overrides it (its Δ then is the default ``start − end``): ``batch`` is the
        round's :class:`~wirelessfl.engine.batch.ClientBatch`, ``carry`` the group's stacked
        carry (its ``ctx``, ``opt`` and ``lr``), ``deltas`` the stacked Δ and ``steps`` each
        client's steps. It returns one state per client (None: no client has one), what
        :meth:`client_final` would return as ``state``, row by row.
        """
        raise NotImplementedError

    def penalty(self, params: Params, start: Params, ctx: dict[str, Params]) -> torch.Tensor | float:
        """Extra loss terms added to the data loss of every step (none for plain SGD)."""
        return 0.0

    def correct(self, grads: Params, params: Params, start: Params,
                ctx: dict[str, Params]) -> Params:
        """The gradient the optimiser uses (elementwise; the plain gradient here)."""
        return grads

    def objective(self, params: Params, buffers: Params, start: Params, x: torch.Tensor,
                  y: torch.Tensor, w: torch.Tensor, ctx: dict[str, Params]
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss to differentiate, data loss) of one client's batch with sample weights ``w``.

        The default is Σ_b w_b CE(f(x_b), y_b) + :meth:`penalty`. ``buffers`` are updated in
        place by BatchNorm layers; both engines call this (the batched one under ``vmap``).
        """
        out = functional_call(self.model, {**params, **buffers}, (x,))
        data = weighted_cross_entropy(out, y, w)
        return data + self.penalty(params, start, ctx), data

    @property
    def drifts(self) -> bool:
        """Whether :meth:`correct` is ``g + d(p)`` with ``d`` taken by :meth:`drift_step`.

        ``d`` must not depend on the gradient ``g``. False here; a rule that says True
        implements both (FedProx, FedDyn, SCAFFOLD with β = 1).
        """
        return False

    def drift_step(self, name: str, p: torch.Tensor, start: Params, ctx: dict[str, Params],
                   lr: float) -> None:
        """``p ← p − lr · d(p)`` in place: :meth:`correct`'s part of the step without ``g``.

        ``p`` is parameter ``name``, stacked or not (:attr:`drifts`). The batched engine
        takes it just before the gradient step, inside the backward pass for stacked linear
        weights, so that a rule such as FedProx keeps the fused step of :attr:`plain_sgd`.
        ``start`` may be one tensor for every client (lower rank).
        """
        raise NotImplementedError(f"{type(self).__name__} has no drift step (drifts is False)")

    # ------------------------------------------------------------------ shared machinery
    @property
    def plain_sgd(self) -> bool:
        """Whether a step is exactly ``p ← p − γ (∇ loss + d(p))``.

        ``p`` is in the loss only as the model's, and ``d`` is the rule's
        :meth:`drift_step` (none for plain SGD): SGD without momentum, weight decay or loss
        scaling (``precision`` fp32 or tf32), in a rule that overrides none of the hooks that
        change the gradient or the step, nor :meth:`penalty`; :meth:`objective` only if it
        declares :attr:`params_only_in_model` (MOON, distillation) and :meth:`correct` only
        if it :attr:`drifts` (FedProx, FedDyn, SCAFFOLD with β = 1). The batched engine then
        takes the step of stacked linear weights inside the backward pass
        (:func:`~wirelessfl.models.layers.sgd_in_backward`).
        """
        hp, rule = self.hp, type(self)
        # a drift counts only beside the correct() it was written for (not a subclass's)
        drifts = self.drifts and _owner(rule, "correct") is _owner(rule, "drift_step")
        hooks = [name for name in _STEP_HOOKS
                 if not (name == "objective" and rule.params_only_in_model)
                 and not (name == "correct" and drifts)]
        return (hp.optimizer == "sgd" and not hp.momentum and not hp.weight_decay
                and hp.precision in ("fp32", "tf32")
                and all(getattr(rule, name) is getattr(LocalSGD, name) for name in hooks))

    def loss(self, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the model with ``params`` on one batch."""
        return F.cross_entropy(functional_call(self.model, params, (x,)), y)

    def finish_gradients(self, grads: Params, params: Params, start: Params,
                         ctx: dict[str, Params]) -> Params:
        """Weight decay, then the rule's correction (stacked or not)."""
        wd = self.hp.weight_decay
        if wd:
            grads = {k: torch.add(g, params[k], alpha=wd) for k, g in grads.items()}
        out = self.correct(grads, params, start, ctx)
        if out is not grads:  # a rule's correction: one tensor of each gradient's shape
            check_corrected(type(self), out, grads)
        return out

    def gradient(self, carry: Carry, x: torch.Tensor, y: torch.Tensor
                 ) -> tuple[Params, torch.Tensor]:
        """Stochastic gradient at ``carry.params`` (decay and correction included), batch loss.

        The loss stays a tensor on the device (read once, in :meth:`client_final`): reading it
        every step would make the host wait for the device at every step.
        """
        params = {k: v.detach().requires_grad_(True) for k, v in carry.params.items()}
        w = torch.full((len(y),), 1.0 / len(y), device=y.device)
        with client_noise(step_key(carry.seed, carry.step)), self.autocast(y.device.type):
            loss, data_loss = self.objective(params, carry.buffers, carry.start, x, y, w, carry.ctx)
        grads = self.unscaled_gradients(carry, loss, params)
        return (self.finish_gradients(grads, carry.params, carry.start, carry.ctx),
                data_loss.detach())

    # ------------------------------------------------------------------ mixed precision
    def autocast(self, device_type: str) -> contextlib.AbstractContextManager:
        """``torch.autocast`` in ``local.precision`` (nothing for ``fp32``)."""
        dtype = AUTOCAST.get(self.hp.precision)
        return torch.autocast(device_type, dtype=dtype) if dtype else contextlib.nullcontext()

    def unscaled_gradients(self, carry: Carry, loss: torch.Tensor, params: Params) -> Params:
        """Gradients of ``loss`` (per client, summed) in float32; fp16 scales the loss first.

        ``loss`` has the client dimensions of ``carry`` (none in the loop, one when stacked).
        """
        amp = self._amp_state(carry, loss)
        if amp is not None:
            loss = loss * amp["scale"]
        grads = torch.autograd.grad(loss.sum(), list(params.values()))
        if amp is not None:
            grads = [g / _expand_to(amp["scale"], g) for g in grads]
        return dict(zip(params, grads))

    def _amp_state(self, carry: Carry, loss: torch.Tensor) -> Params | None:
        """fp16's loss scale and clean-step count, per client, kept in ``carry.opt["amp"]``."""
        if self.hp.precision != "fp16":
            return None
        if "amp" not in carry.opt:
            carry.opt["amp"] = {"scale": torch.full(loss.shape, SCALE_INIT, device=loss.device),
                                "clean": torch.zeros(loss.shape, device=loss.device)}
        return carry.opt["amp"]

    def take_step(self, carry: Carry, grads: Params, loss: torch.Tensor | float) -> Carry:
        """:meth:`descend`, and for fp16 the loss-scale bookkeeping.

        A client whose gradients overflowed (a non-finite entry) keeps its parameters and
        optimiser state, and its scale halves; otherwise the step is taken and after
        :data:`SCALE_GROWTH_INTERVAL` clean steps the scale doubles. All on the device (no
        host sync), per client when stacked; both engines call this.
        """
        amp = carry.opt.get("amp")
        if amp is None:
            return self.descend(carry, grads, loss)
        finite = torch.stack([torch.isfinite(g).flatten(carry.batch_dims).all(-1)
                              for g in grads.values()]).all(0)
        old_params = carry.params
        old_opt = {n: {k: v.clone() for k, v in t.items()}  # descend may update them in place
                   for n, t in carry.opt.items() if isinstance(t, dict) and n != "amp"}
        grads = {k: torch.where(_expand_to(finite, g), g, torch.zeros_like(g))
                 for k, g in grads.items()}
        carry = self.descend(carry, grads, loss)
        carry.params = keep_where(finite, carry.params, old_params)
        for name, before in old_opt.items():
            carry.opt[name] = keep_where(finite, carry.opt[name], before)
        clean = torch.where(finite, amp["clean"] + 1, torch.zeros_like(amp["clean"]))
        grow = clean >= SCALE_GROWTH_INTERVAL
        scale = torch.where(finite, torch.where(grow, amp["scale"] * 2, amp["scale"]),
                            amp["scale"] / 2)
        carry.opt["amp"] = {"scale": scale, "clean": torch.where(grow, 0.0, clean)}
        return carry

    @override
    def client_init(self, task: ClientTask) -> Carry:
        self.model.train()
        params = {k: v.detach() for k, v in task.params.items()}
        buffers = {k: v.detach().clone() for k, v in (task.buffers or {}).items()}
        return Carry(start=params, params=params, lr=task_lr(task, self.hp), state=task.state,
                     ctx=self.context(task), buffers=buffers, seed=task.seed)

    @override
    def client_step(self, carry: Carry, x: torch.Tensor, y: torch.Tensor) -> Carry:
        grads, loss = self.gradient(carry, x, y)
        return self.take_step(carry, grads, loss)

    def descend(self, carry: Carry, grads: Params, loss: float) -> Carry:
        """The optimiser step from ``grads`` (elementwise, so it also runs on stacked clients).

        Each update is one fused pass per tensor (``add``/``lerp``/``addcmul``): on stacked
        clients these tensors are large and memory traffic, not arithmetic, sets their cost.
        """
        hp, opt = self.hp, carry.opt
        if hp.optimizer == "sgd":
            if hp.momentum:
                buf = opt.get("m")
                buf = grads if buf is None else {k: torch.add(grads[k], buf[k], alpha=hp.momentum)
                                                 for k in grads}
                opt["m"], grads = buf, buf
            carry.params = {k: torch.add(carry.params[k], grads[k], alpha=-carry.lr) for k in grads}
        else:
            b1, b2 = hp.betas
            t = carry.step + 1
            m0, v0 = opt.get("m", {}), opt.get("v", {})
            m = {k: torch.lerp(m0[k], g, 1 - b1) if k in m0 else (1 - b1) * g
                 for k, g in grads.items()}
            v = {k: torch.addcmul(b2 * v0[k], g, g, value=1 - b2) if k in v0
                 else (1 - b2) * g * g for k, g in grads.items()}
            opt["m"], opt["v"] = m, v
            c1, c2 = 1 - b1**t, (1 - b2**t) ** 0.5
            carry.params = {k: torch.addcdiv(carry.params[k], m[k], (v[k].sqrt() / c2).add_(hp.eps),
                                             value=-carry.lr / c1) for k in grads}
        carry.step += 1
        carry.loss_sum += loss
        return carry


def _owner(cls: type, name: str) -> type | None:
    """The class of ``cls``'s method resolution order that defines ``name``."""
    return next((c for c in cls.__mro__ if name in vars(c)), None)


#: The :class:`LocalSGD` methods whose override makes a rule other than plain SGD.
_STEP_HOOKS = ("objective", "penalty", "correct", "finish_gradients", "unscaled_gradients",
               "take_step", "descend", "autocast")


def _expand_to(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-client value (shape () or (C,)) shaped to broadcast against ``like``."""
    return mask.reshape(*mask.shape, *[1] * (like.dim() - mask.dim()))


def keep_where(mask: torch.Tensor, new: Params, old: Params) -> Params:
    """``new`` where the per-client ``mask`` (shape () or (C,)) holds, else ``old``.

    Keys ``old`` lacks keep ``new``. For skipped fp16 steps and for stacked clients whose
    schedule ended.
    """
    return {k: torch.where(_expand_to(mask, v), v, old[k]) if k in old else v
            for k, v in new.items()}


def mover(device: torch.device) -> Callable[[Any], Any]:
    """A function that moves tensors, and dicts, lists and tuples of them, to ``device``.

    Each distinct tensor or container moves once (by identity, over all its calls), so
    objects that share a tensor keep sharing one; a container whose contents are already
    there is returned itself, and anything else is returned as it is.
    """
    moved: dict[int, Any] = {}

    def move(x: Any) -> Any:
        if id(x) in moved:
            return moved[id(x)]
        if isinstance(x, torch.Tensor):
            out = x.to(device)
        elif type(x) is dict:
            out = {k: move(v) for k, v in x.items()}
            out = x if all(out[k] is v for k, v in x.items()) else out
        elif type(x) in (list, tuple):
            items = [move(v) for v in x]
            out = x if all(a is b for a, b in zip(items, x)) else type(x)(items)
        else:
            return x  # anything else as it is (frozensets of ids, a rule's own objects)
        moved[id(x)] = out
        return out

    return move


def on_device(tasks: Sequence[ClientTask], device: torch.device) -> list[ClientTask]:
    """``tasks`` with their start models, buffers and broadcast tensors on ``device``.

    An executor trains on its own device whatever device a task's tensors come from (a
    server model kept on the host, a test's tasks built on the CPU): everything a rule
    reads in :meth:`LocalSGD.context` and :meth:`ClientUpdate.client_final` is then on the
    device of the round's parameters. Each distinct tensor moves once, so tasks that share
    a start keep sharing one tensor; tensors already there are not copied. A task's
    ``state`` stays where the client store keeps it (:mod:`wirelessfl.engine.client_store`
    loads it onto the parameters' device).
    """
    move = mover(device)
    out = []
    for t in tasks:  # a task already on the device is kept (1,000 tasks a round: no copies)
        params, buffers, broadcast = move(t.params), move(t.buffers), move(t.broadcast)
        out.append(t if params is t.params and buffers is t.buffers
                   and broadcast is t.broadcast
                   else replace(t, params=params, buffers=buffers, broadcast=broadcast))
    return out


class ClientError(RuntimeError):
    """A client failed; the message names the client and the stage."""


#: The loop engine folds its finished clients' pseudo-gradients in groups of at most this
#: many (one stacked sum each, as :func:`~wirelessfl.server.aggregation.weighted_mean` sums
#: its chunks) and at most :data:`FOLD_BYTES` of them.
FOLD_TREES, FOLD_BYTES = 256, 64 << 20


def tree_bytes(tree: Params) -> int:
    """Bytes of a parameter tree's tensors."""
    return sum(v.numel() * v.element_size() for v in tree.values())


def weighted_sum(coef: torch.Tensor, stack: torch.Tensor | LowRankDelta) -> torch.Tensor:
    """Σ_i coef_i stack_i over the first dimension, as one matrix-vector product.

    The product runs on the stack's memory layout (its dimensions after the first taken in
    the order of their strides, so a column-major stack of weights is read as it lies) and
    reads the stack once: on 35 stacked FCNN clients on a CPU, 2.5 ms against 18 ms for
    scaling the stack in place and summing it. The sum's order is the product's, fixed for a
    given stack; the result has the layout of the stack's rows. A factored stack
    (:class:`~wirelessfl.models.lowrank.LowRankDelta`) is summed as one GEMM of its factors.
    """
    if isinstance(stack, LowRankDelta):
        return stack.weighted_sum(coef)
    n = stack.shape[0]
    if stack.dim() == 1:
        return coef @ stack
    order = sorted(range(1, stack.dim()), key=lambda i: -stack.stride(i))
    lying = stack.permute(0, *order)
    part = (coef.unsqueeze(0) @ lying.reshape(n, math.prod(lying.shape[1:]))).view(lying.shape[1:])
    return part.permute(*[order.index(i) for i in range(1, stack.dim())])


class DeltaFold:
    """A round's weighted mean of pseudo-gradients, Σ_i w_i Δ_i / Σ_i w_i, summed as clients finish.

    Handed to :meth:`~wirelessfl.engine.loop.Executor.run` (``fold=``), it takes each group
    of finished clients' Δ_i as the executor produces them (a stacked chunk on the batched engine, up to
    :data:`FOLD_TREES` clients or :data:`FOLD_BYTES` on the loop), and their results come
    back with an empty ``delta``: a round holds one
    group's pseudo-gradients at a time instead of every client's (10,000 FCNN clients:
    9.5 GB of deltas otherwise). For a server that needs only this mean of the Δ_i (the
    exact mean of FedAvg and of the rules that keep its server step).

    A group's terms are summed in one stacked sum and the groups' sums added in the order
    they finish (deterministic for a given executor and chunking); another chunking sums in
    another order, equal to float tolerance.

    Parameters
    ----------
    weights : array_like, shape (S,)
        w_i of the round's tasks, in task order: finite, non-negative.
    normaliser : float or None
        Σ w_i of the whole round (None: the sum of ``weights``, which must be positive); a
        :meth:`share` of the round keeps the round's.

    Examples
    --------
    >>> fold = DeltaFold([1.0, 3.0])
    >>> fold.add([0, 1], {"w": torch.tensor([[1.0, 2.0], [3.0, 6.0]])})
    >>> fold.mean()["w"]
    tensor([2.5000, 5.0000])
    """

    def __init__(self, weights: Sequence[float] | np.ndarray,
                 normaliser: float | None = None) -> None:
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1 or not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("weights must be a 1-D array of finite non-negative numbers, got "
                             f"{short(w)}")
        total = float(w.sum()) if normaliser is None else as_float("normaliser", normaliser)
        if not total > 0:
            raise ValueError("the weights of a fold must have a positive sum")
        self.weights, self.normaliser = w, total
        self.total: Params | None = None
        self.folded = 0  # clients folded so far

    def check(self, tasks: Sequence[ClientTask]) -> None:
        """``ValueError`` unless this fold has one weight per task and nothing folded yet."""
        if len(self.weights) != len(tasks) or self.folded:
            raise ValueError(f"a fold of {len(self.weights)} weights ({self.folded} folded) "
                             f"cannot take a round of {len(tasks)} tasks: make a new "
                             "DeltaFold with one weight per task")

    def share(self, lo: int, hi: int) -> DeltaFold:
        """The fold of tasks ``lo:hi`` alone, normalised as the whole round (for a worker)."""
        return DeltaFold(self.weights[lo:hi], self.normaliser)

    def add(self, positions: Sequence[int], deltas: dict[str, torch.Tensor | LowRankDelta]
            ) -> None:
        """Fold a group: ``deltas[k]`` stacks the Δ of the tasks at ``positions`` (or factors them).

        Their weighted sum (:func:`weighted_sum`) joins :attr:`total`.
        """
        positions = np.asarray(positions, dtype=np.int64)
        scaled = self.weights[positions] / self.normaliser
        coefs: dict[tuple, torch.Tensor] = {}  # one upload per dtype and device, not per tensor
        for k, d in deltas.items():
            if d.shape[:1] != (len(positions),):
                raise ValueError(f"{k!r}: {tuple(d.shape)} does not stack {len(positions)} clients")
            where = (d.dtype, d.device)
            if where not in coefs:
                coefs[where] = torch.as_tensor(scaled, dtype=d.dtype, device=d.device)
            part = weighted_sum(coefs[where], d)
            if self.total is None or k not in self.total:
                self.total = {**(self.total or {}), k: part}
            else:
                self.total[k].add_(part)
        self.folded += len(positions)

    def add_results(self, positions: Sequence[int], results: Sequence[ClientResult]
                    ) -> list[ClientResult]:
        """Fold these results' deltas; the results without them (``delta`` empty)."""
        if results and results[0].delta:
            self.add(positions, {k: torch.stack([r.delta[k] for r in results])
                                 for k in results[0].delta})
        else:
            self.folded += len(results)
        return [replace(r, delta={}) for r in results]

    def merge(self, other: DeltaFold) -> None:
        """Add another share's sum (a worker's) to this one."""
        if other.total is not None:
            if self.total is None:
                self.total = {k: v.clone() for k, v in other.total.items()}
            else:
                for k, v in other.total.items():
                    self.total[k].add_(v.to(self.total[k].device))
        self.folded += other.folded

    def mean(self) -> Params:
        """Σ_i w_i Δ_i / Σ_i w_i over every task (``RuntimeError`` if some were not folded)."""
        if self.folded != len(self.weights) or self.total is None:
            raise RuntimeError(f"{self.folded} of {len(self.weights)} clients were folded")
        return {k: v.contiguous() for k, v in self.total.items()}


@torch.no_grad()
def evaluate(model: FLModel, params: Params, data: ArrayDataset, *, batch_size: int = 2000,
             device: torch.device | str = "cpu",
             buffers: Params | None = None) -> tuple[float, float]:
    """Test accuracy in [0, 1] and mean cross-entropy of ``params`` on ``data`` (eval mode).

    ``buffers`` (BatchNorm running statistics) default to the module's own. The sums stay on
    the device (the loss in float64) and are read once, after the last batch. Always in IEEE
    float32 (:func:`float32_arithmetic`), whatever the local training's precision.
    """
    params = {**params, **(buffers or {})}
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    with float32_arithmetic("fp32"):  # IEEE float32 on a GPU too: the CPU's numbers
        for i in range(0, len(data), batch_size):
            x, y = data.batch(slice(i, i + batch_size), device)
            out = functional_call(model, params, (x,))
            loss_sum += F.cross_entropy(out, y, reduction="sum").double()
            correct += (out.argmax(1) == y).sum()
    model.train(was_training)
    return int(correct) / len(data), float(loss_sum) / len(data)
