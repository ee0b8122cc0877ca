"""A client's local-training hyperparameters (``local:`` of a run config) and its step-size schedule."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from channels.validation import as_float, as_int
from wirelessfl.engine.schedule import BATCH_ORDERS

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
    batch_order : str
        Where each epoch's permutation comes from (:mod:`wirelessfl.engine.schedule`):
        ``counter`` (default: a keyed hash of the client's seed, epoch and position, computed
        for all clients at once) or ``pcg64`` (a NumPy generator per client; the runs made
        before 2026-11-26, which keep it in their run keys).
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
    batch_order: str = "counter"

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
        if self.batch_order not in BATCH_ORDERS:
            raise ValueError(f"`batch_order` must be {' or '.join(BATCH_ORDERS)}, "
                             f"got {self.batch_order!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"`precision` must be {', '.join(PRECISIONS[:-1])} or {PRECISIONS[-1]}, "
                             f"got {self.precision!r}")


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

