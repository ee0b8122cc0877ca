"""wirelessfl: federated learning over wireless networks.

The FL side of the toolkit: data and partitioners, models with partitionable hidden
units, the client engine, FL algorithms (FedAvg, hierarchical FedAvg, and the papers
built on them), simulated time, run records and the ``wirelessfl`` command.
The physical layer lives in :mod:`channels` and the optimisation in :mod:`solvers`.
"""

__version__ = "0.1.0"
