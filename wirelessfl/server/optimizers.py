"""Server optimisers: how a round-based server turns the aggregated update into a step.

Every round-based algorithm aggregates its clients' pseudo-gradients into ``g`` (the
descent direction, start − end, :mod:`wirelessfl.server.aggregation`) and calls
:meth:`ServerOptimizer.step` ``(params, g, state) -> (params, state)``. The state is a
:class:`ServerOptState` of parameter trees (zero-initialised on the first step), kept in the
algorithm's server state and checkpointed with it.

Rules (``docs/papers/fadamgc.md`` §3.5–3.6, §7 item 5: no bias correction, ε outside the root,
zero-initialised moments; Reddi et al. 2021 for Yogi and Adagrad), with η the server rate:

- ``sgd``: x ← x − η g (η = 1 is FedAvg's plain averaging);
- ``momentum`` (heavy ball, FedAvgM of Hsu et al.): m ← μ m + g, x ← x − η m;
- ``adam`` (FedAdam): m ← β1 m + (1−β1) g, v ← β2 v + (1−β2) g², x ← x − η m / (√v + ε);
- ``amsgrad`` (FedAMS): m, v as Adam, v̂ ← max(v̂, v, ε), x ← x − η m / √v̂;
- ``yogi`` (FedYogi): v ← v − (1−β2) g² sign(v − g²), then as Adam;
- ``adagrad`` (FedAdagrad): m as Adam, v ← v + g², then as Adam.

Examples
--------
>>> import torch
>>> opt = ServerOptimizer("adam", lr=0.1, betas=(0.9, 0.99), eps=1e-8)
>>> x, s = opt.step({"w": torch.tensor([1.0])}, {"w": torch.tensor([2.0])}, None)
>>> round(float(x["w"]), 4)  # m = 0.2, v = 0.04: x = 1 − 0.1 · 0.2 / 0.2
0.9
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from channels.validation import as_float
from wirelessfl.errors import TrainingDiverged, short
from wirelessfl.models.base import Params, check_tree
from wirelessfl.server.state import AlgorithmState

SERVER_OPTIMIZERS = ("sgd", "momentum", "adam", "amsgrad", "yogi", "adagrad")


@dataclass(frozen=True)
class ServerOptState(AlgorithmState):
    """A server optimiser's moments (None: not started, or not used by the rule).

    Attributes
    ----------
    m : Params or None
        First moment (``momentum``: the momentum buffer).
    v : Params or None
        Second moment (Adam, AMSGrad, Yogi, Adagrad).
    vhat : Params or None
        AMSGrad's running maximum max(v̂, v, ε).
    """

    m: Params | None = None
    v: Params | None = None
    vhat: Params | None = None


class ServerOptimizer:
    """One of :data:`SERVER_OPTIMIZERS` with its hyperparameters.

    Parameters
    ----------
    name : str
        The rule.
    lr : float
        Server rate η (> 0).
    momentum : float
        μ of ``momentum``, in [0, 1).
    betas : tuple of float
        (β1, β2) of the adaptive rules, each in [0, 1).
    eps : float
        ε (> 0).
    """

    def __init__(self, name: str = "sgd", *, lr: float = 1.0, momentum: float = 0.9,
                 betas: tuple[float, float] = (0.9, 0.99), eps: float = 1e-8) -> None:
        if name not in SERVER_OPTIMIZERS:
            raise ValueError(f"the server optimizer `name` (`server_optimizer`) must be one of "
                             f"{', '.join(SERVER_OPTIMIZERS)}, got {short(name)}")
        self.name = name
        self.lr = as_float("server_lr", lr, lo=0, hi=1e6, lo_open=True)
        self.momentum = as_float("server_momentum", momentum, lo=0, hi=1, hi_open=True)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"`server_betas` must be two numbers, got {betas}")
        self.betas = tuple(as_float("server_betas", b, lo=0, hi=1, hi_open=True) for b in betas)
        self.eps = as_float("server_eps", eps, lo=0, hi=1, lo_open=True)

    def __repr__(self) -> str:
        return f"ServerOptimizer({self.name!r}, lr={self.lr:g})"

    def step(self, params: Params, g: Params, state: ServerOptState | None
             ) -> tuple[Params, ServerOptState | None]:
        """One server step along the aggregated descent direction ``g``; the new state.

        ``g`` must have the keys and shapes of ``params`` (checked); a NaN or infinite ``g`` is
        training that diverged (:class:`~wirelessfl.errors.TrainingDiverged`).
        """
        check_tree("params", params, floating=True)
        check_tree("g", g, params, finite=False)
        if state is not None and not isinstance(state, ServerOptState):
            raise TypeError(f"`state` must be a ServerOptState or None, got {type(state).__name__}")
        bad = [k for k, v in g.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
        if bad:
            raise TrainingDiverged(f"the aggregated update became NaN/Inf ({bad[0]}); the loss "
                                   "diverged - lower the learning rate(s) and start again with "
                                   "another --out")
        for field in ("m", "v", "vhat"):
            held = getattr(state, field, None) if state is not None else None
            if held is not None:
                check_tree(f"state.{field}", held, params)
        if self.name == "sgd":
            return {k: params[k] - self.lr * g[k] for k in params}, state
        state = state or ServerOptState()
        zeros = {k: torch.zeros_like(v) for k, v in g.items()}
        if self.name == "momentum":
            m = {k: self.momentum * (state.m or zeros)[k] + g[k] for k in g}
            return {k: params[k] - self.lr * m[k] for k in params}, ServerOptState(m=m)
        b1, b2 = self.betas
        m = {k: b1 * (state.m or zeros)[k] + (1 - b1) * g[k] for k in g}
        v_old = state.v or zeros
        if self.name == "yogi":
            v = {k: v_old[k] - (1 - b2) * g[k] ** 2 * torch.sign(v_old[k] - g[k] ** 2) for k in g}
        elif self.name == "adagrad":
            v = {k: v_old[k] + g[k] ** 2 for k in g}
        else:
            v = {k: b2 * v_old[k] + (1 - b2) * g[k] ** 2 for k in g}
        if self.name == "amsgrad":
            vhat = {k: torch.maximum(torch.maximum((state.vhat or zeros)[k], v[k]),
                                     torch.full_like(v[k], self.eps)) for k in g}
            new = {k: params[k] - self.lr * m[k] / vhat[k].sqrt() for k in params}
            return new, ServerOptState(m=m, v=v, vhat=vhat)
        new = {k: params[k] - self.lr * m[k] / (v[k].sqrt() + self.eps) for k in params}
        return new, ServerOptState(m=m, v=v)
