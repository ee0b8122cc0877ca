"""FedAST: buffered asynchronous training of several models in simulated time.

The event-driven simulation (:mod:`~wirelessfl.algorithms.fedast.simtime`), the simulation
base, FedAST itself, the synchronous baselines (Sync-ST) and the centralized reference.
"""
