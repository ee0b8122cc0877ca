"""HIST (Fang, Han, Brinton, arXiv 2310.17890): hierarchical submodel training.

:mod:`~wirelessfl.algorithms.hist.hfedavg` is hierarchical FedAvg, :mod:`~wirelessfl.algorithms.hist.hist`
HIST on top of it, and :mod:`~wirelessfl.algorithms.hist.theory` the convergence bound.
"""
