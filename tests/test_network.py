"""Any algorithm timed under any link model; HIST keeps its own exact accounting."""

import numpy as np
import pytest

import wirelessfl.runner as runner
from wirelessfl.algorithms.base import RoundReport
from wirelessfl.config import resolve
from wirelessfl.network import LinkModel, NetworkConfig
from wirelessfl.records import RunRecord

RAW = {"seed": 1, "rounds": 2,
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 30},
       "model": {"name": "linear"}, "local": {"lr": 0.05, "batch_size": 10, "steps": 4}}


def _time(tmp_path, name, algorithm, network):
    raw = {**RAW, "name": name, "algorithm": algorithm, "network": network}
    runner.run(runner.prepare(resolve(raw)), tmp_path / name, quiet=True)
    return [r.get("sim_time_s") for r in RunRecord(tmp_path / name).rows()]


def test_fixed_links_time_payloads_and_steps(tmp_path):
    d = 60 * 10 + 10  # linear model on Synthetic(1,1): 60 features, 10 classes
    net = {"model": "fixed", "rate_mbps": 100, "step_seconds": 0.01}
    fedavg = _time(tmp_path, "a", {"name": "fedavg"}, net)
    scaffold = _time(tmp_path, "s", {"name": "scaffold"}, net)
    per_round = 2 * 32 * d / 1e8 + 4 * 0.01  # down x, up Δx; 4 steps
    assert fedavg[1] == pytest.approx(per_round) and fedavg[2] == pytest.approx(2 * per_round)
    assert scaffold[1] == pytest.approx(4 * 32 * d / 1e8 + 4 * 0.01)  # down x, c; up Δx, Δc
    assert _time(tmp_path, "n", {"name": "fedavg"}, {"model": "none"})[1] is None


def test_tdma_grows_with_clients_and_aircomp_does_not():
    def report(n):
        return RoundReport(uplink_params=1e5, train_loss=0.0,
                           clients={i: {"steps": 5} for i in range(n)})

    tdma, air = LinkModel(NetworkConfig(model="tdma")), LinkModel(NetworkConfig(model="aircomp"))
    t = [np.mean([tdma.round_seconds(report(n), np.random.default_rng(s)) for s in range(50)])
         for n in (2, 8)]
    assert t[1] > 3 * t[0]
    a = [air.round_seconds(report(n), np.random.default_rng(0)) for n in (2, 8)]
    assert a[0] == a[1] == pytest.approx(1e5 * (1 / 14e3) * 15e3 / 9e6)


def test_hist_keeps_its_own_latency_under_any_network(tmp_path):
    algorithm = {"name": "hist", "cells": 2, "edge_rounds": 1}
    raw = {**RAW, "model": {"name": "fcnn", "options": {"hidden": 8}}}
    times = []
    for net in ({"model": "none"}, {"model": "fixed", "step_seconds": 5.0}):
        out = tmp_path / net["model"]
        runner.run(runner.prepare(resolve({**raw, "name": "h", "algorithm": algorithm,
                                           "network": net})), out, quiet=True)
        times.append([r.get("sim_time_s") for r in RunRecord(out).rows()])
    assert times[0] == times[1]


def test_resnet18_vectors_at_100_mbps_give_the_per_round_costs_implied_by_table2():
    # fadamgc.md §4.6 / §5.4: 7.2 (2 vectors), 10.8 (3), 12.6 (3.5), 17.4 (5; we keep 17.9)
    import torch

    from wirelessfl.models import build_model

    with torch.device("meta"):
        d = sum(p.numel() for p in build_model("resnet18_bn", (3, 32, 32), 10, seed=0).parameters())
    assert d == 11_173_962
    link = LinkModel(NetworkConfig(model="fixed", rate_mbps=100))
    implied = {(1, 1): 7.2, (1, 2): 10.8, (1.5, 2): 12.6, (2, 3): 17.4}
    for (up, down), paper in implied.items():
        report = RoundReport(uplink_params=up * d, downlink_params=down * d, train_loss=0.0, clients={})
        seconds = link.round_seconds(report, np.random.default_rng(0))
        assert seconds == pytest.approx((up + down) * 32 * d / 1e8)
        assert abs(seconds / paper - 1) < (0.03 if paper == 17.4 else 0.01)
    # a stand-in model timed as if its vectors were ResNet-18's
    small = LinkModel(NetworkConfig(model="fixed", rate_mbps=100, params_per_vector=d), 610)
    report = RoundReport(uplink_params=1.5 * 610, downlink_params=2 * 610, train_loss=0.0,
                         clients={})
    assert small.round_seconds(report, np.random.default_rng(0)) == pytest.approx(3.5 * 32 * d / 1e8)
