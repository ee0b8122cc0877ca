"""The local rule, written as pure functions: :class:`ClientUpdate` and :class:`LocalSGD`.

Local training is three functions (``specs`` of every paper reduce to this shape):

- ``client_init(task) -> carry`` — start from the model the server sent and the client's
  persistent state (e.g. Adam moments for FAdamGC, control variates for SCAFFOLD);
- ``client_step(carry, x, y) -> carry`` — one mini-batch step;
- ``client_final(task, carry) -> ClientResult`` — the pseudo-gradient ``start − end``, the new
  persistent state and metrics.

:class:`LocalSGD` implements them for SGD (momentum, weight decay) and Adam; algorithms
subclass it to change the step (FAdamGC's corrected moments, FedProx's proximal term). The
batched engine runs the same rule on stacked clients, through its stacked hooks
(:meth:`LocalSGD.stacked_context`, :meth:`LocalSGD.stacked_states`).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call
from typing_extensions import override

from wirelessfl.engine.hparams import AUTOCAST, SCALE_GROWTH_INTERVAL, SCALE_INIT, LocalHParams
from wirelessfl.engine.task import ClientResult, ClientTask, task_lr
from wirelessfl.models.base import FLModel, Params
from wirelessfl.models.noise import client_noise, step_key


def weighted_cross_entropy(logits: torch.Tensor, y: torch.Tensor,
                           w: torch.Tensor) -> torch.Tensor:
    """``Σ_b w_b CE(logits_b, y_b)``: the samples' cross-entropies, weighted and summed.

    The local objectives' data term, in both engines (the batched one under ``vmap``); ``w``
    holds the batch's sample weights (``1/B``, zero for padding).
    """
    return (F.cross_entropy(logits, y, reduction="none") * w).sum()


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
    #: Whether :meth:`stacked_states` reads the clients' end models (``carry.params``):
    #: the batched engine then computes Δ beside them, not over them (MOON keeps its model).
    state_reads_end: bool = False

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

    @property
    def stationary_step(self) -> bool:
        """Whether every step is the same function of its tensors and the rule's settings.

        Then a recorded step may replay it (:mod:`wirelessfl.engine.replay`): it reads no
        step count and no host value. Plain and momentum SGD are; Adam is not (its bias
        correction reads the step count). A rule that overrides how a step is taken
        (``take_step``, ``descend``, ``unscaled_gradients``) says so itself; by default not.
        """
        rule = type(self)
        own = all(getattr(rule, name) is getattr(LocalSGD, name)
                  for name in ("take_step", "descend", "unscaled_gradients"))
        return own and self.hp.optimizer == "sgd"

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
        dtype = next(iter(params.values())).dtype  # the model's, as the batched engine's weights
        w = torch.full((len(y),), 1.0 / len(y), dtype=dtype, device=y.device)
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

