"""The server side shared by every algorithm: who takes part and how updates combine.

Aggregators (:mod:`~wirelessfl.server.aggregation`), server optimisers
(:mod:`~wirelessfl.server.optimizers`), client samplers (:mod:`~wirelessfl.server.sampling`),
populations and sessions (:mod:`~wirelessfl.server.population`), the cell topology
(:mod:`~wirelessfl.server.topology`) and submodel slicing (:mod:`~wirelessfl.server.submodel`).
"""
