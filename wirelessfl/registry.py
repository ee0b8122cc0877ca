"""One registry of every algorithm, looked up lazily.

``name → (kind, module, hyperparameter class, algorithm class)``. ``kind`` is ``rounds``
(round-based: ``init`` / ``apply`` over a :class:`~wirelessfl.algorithms.base.ServerState`,
a :class:`wirelessfl.run.rounds.RoundsJob`) or ``simulation`` (several tasks in simulated
time, a :class:`wirelessfl.run.multitask.SimulationJob`); both are opened by
:func:`wirelessfl.run.kinds.open_run`. Nothing is imported until :func:`get` asks
for an entry, so configuration code can name algorithms without importing them (and the
algorithms can import the configuration code).

Examples
--------
>>> "fedprox" in names("rounds") and "fedast" in names("simulation")
True
>>> get("fedprox")[1].__name__
'FedProx'
"""

from __future__ import annotations

import importlib

_A = "wirelessfl.algorithms."
#: name → (kind, module, HParams class name, algorithm class name)
ENTRIES: dict[str, tuple[str, str, str, str]] = {
    "fedavg": ("rounds", _A + "fedavg", "FedAvgHParams", "FedAvg"),
    "fedadam": ("rounds", _A + "fedavg", "FedAdamHParams", "FedAvg"),
    "fedams": ("rounds", _A + "fedavg", "FedAMSHParams", "FedAvg"),
    "fedyogi": ("rounds", _A + "fedavg", "FedYogiHParams", "FedAvg"),
    "fedadagrad": ("rounds", _A + "fedavg", "FedAdagradHParams", "FedAvg"),
    "fedprox": ("rounds", _A + "fedprox", "FedProxHParams", "FedProx"),
    "fedacg": ("rounds", _A + "fedacg", "FedACGHParams", "FedACG"),
    "feddyn": ("rounds", _A + "feddyn", "FedDynHParams", "FedDyn"),
    "moon": ("rounds", _A + "moon", "MOONHParams", "MOON"),
    "continuous": ("rounds", _A + "dynamic.continuous", "ContinuousHParams", "Continuous"),
    "scaffold": ("rounds", _A + "scaffold", "SCAFFOLDHParams", "SCAFFOLD"),
    "scaffold_m": ("rounds", _A + "scaffold", "SCAFFOLDMHParams", "SCAFFOLD"),
    "fedavg_m": ("rounds", _A + "scaffold", "FedAvgMHParams", "SCAFFOLD"),
    "fadamgc": ("rounds", _A + "fadamgc.fadamgc", "FAdamGCHParams", "FAdamGC"),
    "fa_nt": ("rounds", _A + "fadamgc.fadamgc", "FANTHParams", "FAdamGC"),
    "local_adam": ("rounds", _A + "fadamgc.fadamgc", "LocalAdamHParams", "FAdamGC"),
    "rafed": ("rounds", _A + "rafed.rafed", "RAFedHParams", "RAFed"),
    "ramfed": ("rounds", _A + "rafed.rafed", "RAMFedHParams", "RAFed"),
    "fedavg_small": ("rounds", _A + "rafed.baselines", "FedAvgSmallHParams", "RAFed"),
    "heterofl": ("rounds", _A + "rafed.baselines", "HeteroFLHParams", "RAFed"),
    "feddropout": ("rounds", _A + "rafed.baselines", "FedDropoutHParams", "RAFed"),
    "fedrolex": ("rounds", _A + "rafed.baselines", "FedRolexHParams", "RAFed"),
    "fjord": ("rounds", _A + "rafed.baselines", "FjORDHParams", "RAFed"),
    "hfedavg": ("rounds", _A + "hist.hfedavg", "HFedAvgHParams", "HFedAvg"),
    "hist": ("rounds", _A + "hist.hist", "HISTHParams", "HIST"),
    "fedast": ("simulation", _A + "fedast.fedast", "FedASTHParams", "FedAST"),
    "sync_st": ("simulation", _A + "fedast.sync_st", "SyncSTHParams", "SyncST"),
    "centralized": ("simulation", _A + "fedast.centralized", "CentralizedHParams", "Centralized"),
}


#: Entries registered with their classes (by :func:`register`), not looked up by module name.
_LOADED: dict[str, tuple[type, type]] = {}
KINDS = ("rounds", "simulation")


def register(name: str, hparams: type, algorithm: type, *, kind: str = "rounds") -> None:
    """Add an algorithm under ``name``, e.g. one defined in a user's own module.

    ``hparams`` is its frozen hyperparameter dataclass (the fields a config's ``algorithm``
    section may set) and ``algorithm`` its class (for ``rounds``: a
    :class:`~wirelessfl.algorithms.base.FederatedAlgorithm` taking ``(env, hp)``). A
    registered name is refused. Put the class and this call in a plug-in (``--plugin``, or
    an installed package's ``wirelessfl.plugins`` entry point): worker processes (``--jobs``,
    Ray tasks, the distributed engine's ranks) load the same plug-ins as their command, so
    the name is registered there too; a name registered in an interactive session exists in
    that process only.

    Examples
    --------
    >>> from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
    >>> register("my_fedavg", FedAvgHParams, FedAvg)
    >>> get("my_fedavg")[1].__name__
    'FedAvg'
    >>> unregister("my_fedavg")
    """
    import dataclasses

    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"`name` must be an identifier such as 'my_fedavg', got {name!r}")
    if name in ENTRIES:
        raise ValueError(f"`name` {name!r} is registered already; choose another name")
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {', '.join(KINDS)}, got {kind!r}")
    if not (isinstance(hparams, type) and dataclasses.is_dataclass(hparams)):
        raise TypeError(f"`hparams` must be a dataclass type, got {hparams!r}")
    if not isinstance(algorithm, type):
        raise TypeError(f"`algorithm` must be a class, got {algorithm!r}")
    needs = ("init", "apply") if kind == "rounds" else ("run",)
    missing = [m for m in needs if not callable(getattr(algorithm, m, None))]
    if missing:  # e.g. int: a class, but no algorithm (the interface, read without importing it)
        base = ("wirelessfl.FederatedAlgorithm (init, apply)" if kind == "rounds"
                else "a simulator like FedAST's (run)")
        raise TypeError(f"`algorithm` {algorithm.__name__} has no {missing[0]}(): a {kind} "
                        f"algorithm is a subclass of {base}")
    ENTRIES[name] = (kind, algorithm.__module__, hparams.__name__, algorithm.__name__)
    _LOADED[name] = (hparams, algorithm)


def unregister(name: str) -> None:
    """Remove an algorithm added by :func:`register` (the project's own stay)."""
    if name not in _LOADED:
        raise ValueError(f"{name!r} was not added by register(); only those can be removed")
    del _LOADED[name], ENTRIES[name]


def names(*kinds: str) -> list[str]:
    """Registered names of the given kinds (all kinds when none is given)."""
    return [n for n, e in ENTRIES.items() if not kinds or e[0] in kinds]


def kind(name: str) -> str:
    """``rounds`` or ``simulation``."""
    return ENTRIES[name][0]


def get(name: str) -> tuple[type, type]:
    """(hyperparameter class, algorithm class) of ``name``, importing its module now."""
    if name in _LOADED:
        return _LOADED[name]
    _, module, hp, algo = ENTRIES[name]
    mod = importlib.import_module(module)
    return getattr(mod, hp), getattr(mod, algo)
