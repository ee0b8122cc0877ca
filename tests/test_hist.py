import numpy as np
import pytest
import torch

from wirelessfl.client import evaluate
from wirelessfl.config import ConfigError, resolve
from wirelessfl.runner import prepare
from wirelessfl.submodel import Submodel

SYN = {"seed": 3, "rounds": 2,
       "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 60},
       "model": {"name": "fcnn", "options": {"hidden": 32, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 4}}


def _exp(**algorithm):
    return prepare(resolve({**SYN, "algorithm": {"name": "hist", **algorithm}}))


def _rounds(exp, n):
    state, reports = exp.initial_state(), []
    for _ in range(n):
        state, report = exp.algorithm.apply(state)
        reports.append(report)
    return state, reports


def _close(a, b):
    for k in a.params:
        torch.testing.assert_close(a.params[k], b.params[k])


def test_one_cell_hist_equals_hfedavg():
    hfedavg = prepare(resolve({**SYN, "algorithm": {"name": "hfedavg", "cells": 1, "edge_rounds": 2}}))
    _close(_rounds(_exp(cells=1, edge_rounds=2), 2)[0], _rounds(hfedavg, 2)[0])


def test_unsplit_hist_equals_hfedavg_with_latency_and_full_uplink():
    hfedavg = prepare(resolve({**SYN, "algorithm": {"name": "hfedavg", "cells": 2, "edge_rounds": 2}}))
    state, reports = _rounds(_exp(cells=2, edge_rounds=2, split=False), 2)
    _close(state, _rounds(hfedavg, 2)[0])
    d = sum(v.numel() for v in state.params.values())
    assert reports[0].uplink_params == 2 * d and reports[0].latency_s > 0


def test_assembly_writes_each_cell_block_back_and_averages_shared_layers():
    """Eq. (7) by hand: cells train sliced submodels; split entries come from their owner."""
    exp = _exp(cells=2, edge_rounds=1)
    algo, x0 = exp.algorithm, exp.initial_state()
    new, report = algo.apply(x0)
    sizes, _ = algo._sizes(0, sum(v.numel() for v in x0.params.values()))
    from wirelessfl.submodel import random_disjoint_selections
    sels = random_disjoint_selections(algo.groups, sizes, exp.seeds.generator("masks", 0))
    assert torch.equal(torch.sort(torch.cat([s["fc1"] for s in sels])).values, torch.arange(32))
    edges = []
    for cell, sel in zip(algo.topology.cells, sels):
        sub = Submodel(exp.model.unit_groups, sel, x0.params)
        start = sub.slice(x0.params)
        res = algo.train_clients([start] * len(cell), cell, 0, stage=0)
        edges.append((sub, {k: start[k] - sum(r.delta[k] for r in res) / len(cell) for k in start}))
    for sub, edge in edges:
        for k in sub.dims:
            torch.testing.assert_close(new.params[k][sub.index(k)], edge[k])
    shared = (edges[0][1]["fc2.bias"] + edges[1][1]["fc2.bias"]) / 2
    torch.testing.assert_close(new.params["fc2.bias"], shared)
    assert report.extra["mask_sizes"] == [[16, 16]]
    assert report.uplink_params < sum(v.numel() for v in x0.params.values())


def test_optimised_sizes_respect_the_cap_and_cut_latency():
    uni = _rounds(_exp(cells=4, edge_rounds=1), 3)[1]
    opt = _rounds(_exp(cells=4, edge_rounds=1, mask_sizes="optimised"), 3)[1]
    for r in opt:
        sizes = np.array(r.extra["mask_sizes"][0])
        assert sizes.sum() == 32 and sizes.max() <= 9 * 32 // (6 * 4)
    assert sum(r.latency_s for r in opt) < sum(r.latency_s for r in uni)


def test_noiseless_aircomp_equals_oma():
    oma = _exp(cells=2, edge_rounds=2)
    air = _exp(cells=2, edge_rounds=2, aggregation="aircomp")
    for agg in air.algorithm.aggregators:
        agg.noise_power = 0.0
    _close(_rounds(oma, 1)[0], _rounds(air, 1)[0])


def test_aircomp_noise_grows_as_snr_falls():
    def err(snr):
        exp = _exp(cells=2, edge_rounds=2, aggregation="aircomp", snr_db=[snr, snr])
        state, reports = _rounds(exp, 1)
        ref = _rounds(_exp(cells=2, edge_rounds=2), 1)[0]
        return (sum(((state.params[k] - ref.params[k]) ** 2).sum() for k in ref.params).item(),
                reports[0].extra["aircomp_mse_mean"])
    (e_lo, m_lo), (e_hi, m_hi) = err(-20.0), err(20.0)
    assert m_lo > 100 * m_hi * 0.5 and e_lo > 10 * e_hi


@pytest.mark.parametrize("algorithm, match", [
    ({"cells": 2, "aggregation": "noma"}, "unknown aggregation mode"),
    ({"cells": 2, "snr_db": [float("nan"), 30.0]}, "finite"),
    ({"cells": 40}, "cells"),
    ({"cells": 4, "mask_sizes": "optimised", "eps_th": 3.0}, "infeasible"),
])
def test_bad_hist_configs(algorithm, match):
    with pytest.raises((ValueError, ConfigError), match=match):
        _exp(**algorithm)


def test_hist_learns_fashion_mnist(fmnist):
    cfg = resolve({"seed": 0, "rounds": 3,
                   "data": {"dataset": "fashion_mnist", "num_clients": 10, "samples_per_client": 600,
                            "partition": "iid"},
                   "model": {"name": "fcnn"},
                   "local": {"lr": 0.05, "batch_size": 32, "steps": 20},
                   "algorithm": {"name": "hist", "cells": 2, "edge_rounds": 2}})
    exp = prepare(cfg)
    state, _ = _rounds(exp, 3)
    acc, _ = evaluate(exp.model, state.params, exp.splits.test)
    assert acc > 0.6  # chance is 0.1
