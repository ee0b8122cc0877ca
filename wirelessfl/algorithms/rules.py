"""A user's own local rule, registered as an algorithm: FedAvg with that rule on the clients.

:func:`register_local_rule` turns a :class:`~wirelessfl.engine.local_sgd.LocalSGD` subclass
(and, optionally, a frozen dataclass of its hyperparameters) into a registered algorithm:
FedAvg's sampling, weighting and server step, with clients running the rule. A config then
names it as ``algorithm: {name: NAME, <the rule's options>, <FedAvg's options>}``.

Examples
--------
>>> import torch
>>> from dataclasses import dataclass
>>> from wirelessfl.engine.client import LocalSGD
>>> @dataclass(frozen=True)
... class SignOptions:
...     scale: float = 0.01
>>> class SignSGD(LocalSGD):
...     elementwise = True
...     def __init__(self, model, hp, scale):
...         super().__init__(model, hp)
...         self.scale = scale
...     def correct(self, grads, params, start, ctx):
...         return {k: self.scale * torch.sign(g) for k, g in grads.items()}
>>> register_local_rule("signsgd", SignSGD, SignOptions)
>>> from wirelessfl import registry
>>> registry.get("signsgd")[0]().scale
0.01
>>> registry.unregister("signsgd")
"""

from __future__ import annotations

import dataclasses

from wirelessfl import registry
from wirelessfl.algorithms.base import Environment
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
from wirelessfl.engine.client import LocalSGD
from wirelessfl.errors import short


def register_local_rule(name: str, rule: type[LocalSGD], options: type | None = None) -> None:
    """Register FedAvg with ``rule`` on the clients as algorithm ``name``.

    Parameters
    ----------
    name : str
        The algorithm's name in configs (an identifier not registered yet).
    rule : type
        A :class:`~wirelessfl.engine.local_sgd.LocalSGD` subclass built as
        ``rule(model, local_hparams, **options)``. Declare ``elementwise`` on it (see
        :class:`~wirelessfl.engine.local_sgd.LocalSGD`): an undeclared rule that overrides
        ``correct``/``descend`` is checked against the loop engine on its first call.
    options : type, optional
        A frozen dataclass of the rule's hyperparameters (each with a default); they become
        keys of the config's ``algorithm`` section beside FedAvg's.
    """
    if not (isinstance(rule, type) and issubclass(rule, LocalSGD)):
        raise TypeError(f"`rule` must be a subclass of wirelessfl.LocalSGD, got {short(rule)}")
    if options is not None and not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise TypeError(f"`options` must be a dataclass type (the rule's hyperparameters), got "
                        f"{short(options)}")
    names = [f.name for f in dataclasses.fields(options)] if options is not None else []
    clash = sorted(set(names) & {f.name for f in dataclasses.fields(FedAvgHParams)})
    if clash:
        raise ValueError(f"`options` field {clash[0]!r} is one of FedAvg's; rename it")
    bases = (FedAvgHParams,) if options is None else (FedAvgHParams, options)

    def post_init(self) -> None:
        for base in bases:
            check = getattr(base, "__post_init__", None)
            if check is not None:
                check(self)

    hparams = dataclasses.make_dataclass(
        f"{name}HParams", [], bases=bases, frozen=True,
        namespace={"__post_init__": post_init,
                   "__doc__": f"FedAvg's hyperparameters and those of the local rule "
                              f"{rule.__name__} ({', '.join(names) or 'none'})."})

    class RuleAlgorithm(FedAvg):
        """FedAvg whose clients run the registered rule."""

        def __init__(self, env: Environment, hp: FedAvgHParams) -> None:
            super().__init__(env, hp)
            self.update = rule(env.model, env.local, **{n: getattr(hp, n) for n in names})

    RuleAlgorithm.__name__ = RuleAlgorithm.__qualname__ = f"{rule.__name__}FedAvg"
    registry.register(name, hparams, RuleAlgorithm)
