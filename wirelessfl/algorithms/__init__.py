"""FL algorithms on the shared interfaces: the classic rules here, each paper in its own folder.

Every algorithm is registered in :mod:`wirelessfl.registry` and imported only when a config
names it (:func:`wirelessfl.registry.get`), so importing this package loads none of them.
A config's ``algorithm`` section names one and sets the fields of its HParams.
"""

from wirelessfl.algorithms.base import (
    Environment,
    FederatedAlgorithm,
    RoundReport,
    ServerState,
)

__all__ = ["Environment", "FederatedAlgorithm", "RoundReport", "ServerState"]
