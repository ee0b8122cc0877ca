"""FL algorithms on the shared interfaces.

Every algorithm is registered in :mod:`wirelessfl.registry` (looked up lazily, so the
configuration code never imports this package); :data:`ALGORITHMS` maps the round-based ones
to ``(HParams dataclass, algorithm class)``. A config's ``algorithm`` section names one and
sets the fields of its HParams.
"""

from wirelessfl import registry
from wirelessfl.algorithms.base import (
    Environment,
    FederatedAlgorithm,
    RoundReport,
    ServerState,
)

#: The round-based algorithms of :mod:`wirelessfl.registry` (imported here eagerly).
ALGORITHMS = {name: registry.get(name) for name in registry.names("rounds")}

__all__ = ["ALGORITHMS", "Environment", "FederatedAlgorithm", "RoundReport", "ServerState"]
