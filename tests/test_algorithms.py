import dataclasses

import numpy as np
import pytest
import torch

from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import open_run

SYN = {"seed": 3, "rounds": 3,
       "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 60},
       "model": {"name": "fcnn", "options": {"hidden": 32, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 4}}


def _rounds(exp, n):
    state = exp.initial_state()
    for _ in range(n):
        state, _ = exp.algorithm.apply(state)
    return state


def test_hfedavg_one_cell_one_edge_round_equals_fedavg():
    f = open_run({**SYN, "algorithm": {"name": "fedavg", "weighting": "uniform"}}).exp
    h = open_run({**SYN, "algorithm": {"name": "hfedavg", "cells": 1, "edge_rounds": 1}}).exp
    a, b = _rounds(f, 2), _rounds(h, 2)
    for k in a.params:
        torch.testing.assert_close(a.params[k], b.params[k])


def test_hfedavg_matches_explicit_two_tier_average():
    """One global round of N = 2, E = 2 recomputed by hand from the executor."""
    exp = open_run({**SYN, "algorithm": {"name": "hfedavg", "cells": 2, "edge_rounds": 2}}).exp
    algo, x0 = exp.algorithm, exp.initial_state()
    new, report = algo.apply(x0)
    edges = []
    for cell in algo.topology.cells:
        edge = x0.params
        for e in range(2):
            res = algo.train_clients([edge] * len(cell), cell, 0, stage=e)
            edge = {k: edge[k] - sum(r.delta[k] for r in res) / len(cell) for k in edge}
        edges.append(edge)
    for k in new.params:
        torch.testing.assert_close(new.params[k], (edges[0][k] + edges[1][k]) / 2)
    d = sum(v.numel() for v in x0.params.values())
    assert report.uplink_params == 2 * d  # E full models per client per round (§6.6)


def test_fedavg_samples_weighting_and_partial_participation():
    cfg = resolve({**SYN, "data": {**SYN["data"], "samples_per_client": None},
                   "algorithm": {"name": "fedavg", "clients_per_round": 3}})
    exp = open_run(cfg).exp
    state, report = exp.algorithm.apply(exp.initial_state())
    assert len(report.clients) == 3
    res = exp.algorithm.train_clients([exp.initial_state().params] * 3, sorted(report.clients), 0)
    n = np.array([r.num_samples for r in res], dtype=float)
    expected = {k: exp.initial_state().params[k] - sum(w * r.delta[k] for w, r in zip(n / n.sum(), res))
                for k in state.params}
    for k in state.params:
        torch.testing.assert_close(state.params[k], expected[k])


def test_fedavg_fashion_mnist_beats_75_percent(fmnist):
    """FedAvg, 10 IID clients, FCNN on real Fashion-MNIST: > 75% test accuracy in 3 rounds."""
    from wirelessfl.engine.client import evaluate

    exp = open_run({"seed": 0, "rounds": 3, "device": "cpu",
                           "data": {"dataset": "fashion_mnist", "partition": "iid",
                                    "num_clients": 10},
                           "model": {"name": "fcnn"},
                           "local": {"lr": 0.05, "batch_size": 50, "steps": 50},
                           "algorithm": {"name": "fedavg"}}).exp
    state = _rounds(exp, 3)
    acc, _ = evaluate(exp.model, state.params, exp.splits.test)
    assert acc > 0.75


def test_hparams_are_frozen_and_validated():
    from wirelessfl.algorithms.hist.hfedavg import HFedAvgHParams

    hp = HFedAvgHParams(cells=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        hp.cells = 2
    with pytest.raises(ValueError, match="edge_rounds"):
        HFedAvgHParams(edge_rounds=0)
