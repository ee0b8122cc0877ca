"""FL algorithms on the shared interfaces, and their registry.

``ALGORITHMS[name] = (HParams dataclass, algorithm class)``; a config's ``algorithm`` section
names one and sets the fields of its HParams.
"""

from wirelessfl.algorithms.base import (
    Environment,
    FederatedAlgorithm,
    RoundReport,
    ServerState,
)
from wirelessfl.algorithms.fedacg import FedACG, FedACGHParams
from wirelessfl.algorithms.fedavg import (
    FedAdagradHParams,
    FedAdamHParams,
    FedAMSHParams,
    FedAvg,
    FedAvgHParams,
    FedYogiHParams,
)
from wirelessfl.algorithms.fedprox import FedProx, FedProxHParams
from wirelessfl.algorithms.hfedavg import HFedAvg, HFedAvgHParams
from wirelessfl.algorithms.hist import HIST, HISTHParams
from wirelessfl.algorithms.moon import MOON, MOONHParams
from wirelessfl.algorithms.scaffold import (
    SCAFFOLD,
    FedAvgMHParams,
    SCAFFOLDHParams,
    SCAFFOLDMHParams,
)

ALGORITHMS = {
    "fedavg": (FedAvgHParams, FedAvg),
    "fedadam": (FedAdamHParams, FedAvg),
    "fedams": (FedAMSHParams, FedAvg),
    "fedyogi": (FedYogiHParams, FedAvg),
    "fedadagrad": (FedAdagradHParams, FedAvg),
    "fedprox": (FedProxHParams, FedProx),
    "fedacg": (FedACGHParams, FedACG),
    "moon": (MOONHParams, MOON),
    "scaffold": (SCAFFOLDHParams, SCAFFOLD),
    "scaffold_m": (SCAFFOLDMHParams, SCAFFOLD),
    "fedavg_m": (FedAvgMHParams, SCAFFOLD),
    "hfedavg": (HFedAvgHParams, HFedAvg),
    "hist": (HISTHParams, HIST),
}

__all__ = ["ALGORITHMS", "Environment", "FederatedAlgorithm", "RoundReport", "ServerState",
           "FedAvg", "FedAvgHParams", "HFedAvg", "HFedAvgHParams",
           "HIST", "HISTHParams"]
