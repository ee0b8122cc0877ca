"""One registry of every algorithm, looked up lazily.

``name → (kind, module, hyperparameter class, algorithm class)``. ``kind`` is ``rounds``
(round-based: ``init`` / ``apply`` over a :class:`~wirelessfl.algorithms.base.ServerState`,
run by :func:`wirelessfl.runner.run`) or ``simulation`` (several tasks in simulated time, run
by :func:`wirelessfl.multitask.run_multitask`). Nothing is imported until :func:`get` asks
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
    "moon": ("rounds", _A + "moon", "MOONHParams", "MOON"),
    "continuous": ("rounds", _A + "continuous", "ContinuousHParams", "Continuous"),
    "scaffold": ("rounds", _A + "scaffold", "SCAFFOLDHParams", "SCAFFOLD"),
    "scaffold_m": ("rounds", _A + "scaffold", "SCAFFOLDMHParams", "SCAFFOLD"),
    "fedavg_m": ("rounds", _A + "scaffold", "FedAvgMHParams", "SCAFFOLD"),
    "fadamgc": ("rounds", _A + "fadamgc", "FAdamGCHParams", "FAdamGC"),
    "fa_nt": ("rounds", _A + "fadamgc", "FANTHParams", "FAdamGC"),
    "local_adam": ("rounds", _A + "fadamgc", "LocalAdamHParams", "FAdamGC"),
    "rafed": ("rounds", _A + "rafed", "RAFedHParams", "RAFed"),
    "ramfed": ("rounds", _A + "rafed", "RAMFedHParams", "RAFed"),
    "fedavg_small": ("rounds", _A + "rafed", "FedAvgSmallHParams", "RAFed"),
    "heterofl": ("rounds", _A + "rafed", "HeteroFLHParams", "RAFed"),
    "feddropout": ("rounds", _A + "rafed", "FedDropoutHParams", "RAFed"),
    "fedrolex": ("rounds", _A + "rafed", "FedRolexHParams", "RAFed"),
    "fjord": ("rounds", _A + "rafed", "FjORDHParams", "RAFed"),
    "hfedavg": ("rounds", _A + "hfedavg", "HFedAvgHParams", "HFedAvg"),
    "hist": ("rounds", _A + "hist", "HISTHParams", "HIST"),
    "fedast": ("simulation", _A + "fedast", "FedASTHParams", "FedAST"),
    "sync_st": ("simulation", _A + "sync_st", "SyncSTHParams", "SyncST"),
    "centralized": ("simulation", _A + "centralized", "CentralizedHParams", "Centralized"),
}


def names(*kinds: str) -> list[str]:
    """Registered names of the given kinds (all kinds when none is given)."""
    return [n for n, e in ENTRIES.items() if not kinds or e[0] in kinds]


def kind(name: str) -> str:
    """``rounds`` or ``simulation``."""
    return ENTRIES[name][0]


def get(name: str) -> tuple[type, type]:
    """(hyperparameter class, algorithm class) of ``name``, importing its module now."""
    _, module, hp, algo = ENTRIES[name]
    mod = importlib.import_module(module)
    return getattr(mod, hp), getattr(mod, algo)
