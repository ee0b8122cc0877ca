import numpy as np
import pytest
import torch

from wirelessfl.engine.client import evaluate
from wirelessfl.run.config import ConfigError, resolve
from wirelessfl.run.kinds import open_run
from wirelessfl.server.submodel import Submodel

SYN = {"seed": 3, "rounds": 2,
       "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 60},
       "model": {"name": "fcnn", "options": {"hidden": 32, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 4}}


def _exp_raw(**algorithm):
    return {**SYN, "algorithm": {"name": "hist", **algorithm}}


def _exp(**algorithm):
    return open_run(_exp_raw(**algorithm)).exp


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
    hfedavg = open_run({**SYN, "algorithm": {"name": "hfedavg", "cells": 1, "edge_rounds": 2}}).exp
    _close(_rounds(_exp(cells=1, edge_rounds=2), 2)[0], _rounds(hfedavg, 2)[0])


def test_unsplit_hist_equals_hfedavg_with_latency_and_full_uplink():
    hfedavg = open_run({**SYN, "algorithm": {"name": "hfedavg", "cells": 2, "edge_rounds": 2}}).exp
    state, reports = _rounds(_exp(cells=2, edge_rounds=2, split=False), 2)
    _close(state, _rounds(hfedavg, 2)[0])
    d = sum(v.numel() for v in state.params.values())
    assert reports[0].uplink_params == 2 * d and reports[0].latency_s > 0


def test_assembly_writes_each_cell_block_back_and_averages_shared_layers():
    """Eq. (7) by hand: cells train sliced submodels; split entries come from their owner."""
    exp = _exp(cells=2, edge_rounds=1)
    algo, x0 = exp.algorithm, exp.initial_state()
    new, report = algo.apply(x0)
    num = sum(v.numel() for v in x0.params.values())
    sizes = algo._sizes(algo._full_latency(0, num), num)
    from wirelessfl.server.submodel import random_disjoint_selections
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
    assert report.mask_sizes == [[16, 16]]
    assert report.uplink_params < sum(v.numel() for v in x0.params.values())


def test_optimised_sizes_respect_the_cap_and_cut_latency():
    uni = _rounds(_exp(cells=4, edge_rounds=1), 3)[1]
    opt = _rounds(_exp(cells=4, edge_rounds=1, mask_sizes="optimised"), 3)[1]
    for r in opt:
        sizes = np.array(r.mask_sizes[0])
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
                reports[0].aircomp_mse)
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
    exp = open_run(cfg).exp
    state, _ = _rounds(exp, 3)
    acc, _ = evaluate(exp.model, state.params, exp.splits.test)
    assert acc > 0.6  # chance is 0.1


@pytest.mark.parametrize("name, shape", [("fcnn", (1, 28, 28)), ("lenet5", (1, 28, 28))])
def test_training_the_sliced_submodel_equals_masked_training_of_the_full_model(name, shape):
    """§1.3(e): H SGD steps on the sliced submodel, written back, equal masked SGD (5)."""
    from wirelessfl.engine.client import ClientTask, LocalHParams, LocalSGD
    from wirelessfl.models import build_model
    from wirelessfl.server.submodel import random_disjoint_selections

    model = build_model(name, shape, 10, seed=0, dropout=0.0)
    params, hp = model.params(), LocalHParams(lr=0.1, steps=5)
    groups = [model.group(g) for g in model.hist_groups]
    sel = random_disjoint_selections(groups, [[g.size // 3, g.size - g.size // 3] for g in groups],
                                     np.random.default_rng(1))[0]
    sub = Submodel(model.unit_groups, sel, params)
    mask = sub.mask(params)
    update = LocalSGD(model, hp)
    sliced = update.client_init(ClientTask(0, sub.slice(params), np.arange(4), seed=0))
    masked = update.client_init(ClientTask(0, {k: v * mask[k] for k, v in params.items()},
                                           np.arange(4), seed=0))
    gen = torch.Generator().manual_seed(0)
    for _ in range(hp.steps):
        x, y = torch.randn(8, *shape, generator=gen), torch.randint(0, 10, (8,), generator=gen)
        sliced = update.client_step(sliced, x, y)
        grads, _ = update.gradient(masked, x, y)
        masked.params = {k: masked.params[k] - hp.lr * grads[k] * mask[k] for k in grads}
    back = sub.scatter({k: v * mask[k] for k, v in params.items()}, sliced.params)
    for k in params:
        torch.testing.assert_close(back[k], masked.params[k])


def test_code_faithful_fc_biases_are_never_aggregated():
    """Authors' code: every FC layer is rebuilt at dispatch, so no FC bias is ever sent back."""
    default = _rounds(_exp(cells=2, edge_rounds=1), 2)[0]
    code = _exp(cells=2, edge_rounds=1, bias_mode="code_faithful")
    x0 = code.initial_state()
    state = _rounds(code, 2)[0]
    for bias in ("fc1.bias", "fc2.bias"):  # split and unsplit FC biases alike
        assert torch.equal(state.params[bias], x0.params[bias])
        assert not torch.equal(default.params[bias], x0.params[bias])
    assert not torch.equal(state.params["fc1.weight"], x0.params["fc1.weight"])
    assert not torch.equal(state.params["fc2.weight"], x0.params["fc2.weight"])
    num = sum(v.numel() for v in x0.params.values())
    starts = code.algorithm._dispatch(x0.params, 0, np.ones(2))[1]
    k = len(starts[0]["fc1.bias"])
    assert not torch.equal(starts[0]["fc1.bias"], x0.params["fc1.bias"][:k])
    assert not torch.equal(starts[0]["fc2.bias"], x0.params["fc2.bias"])
    assert starts[0]["fc2.bias"].abs().max() <= 1 / k ** 0.5  # fan-in of the rebuilt layer
    assert num > 0


def test_optimised_sizes_minimise_the_logged_latency(fmnist):
    """The sizes chosen are the best integer sizes for the latency the round logs (s + q k_j)."""
    import itertools

    cfg = resolve({"seed": 1, "rounds": 1,
                   "data": {"dataset": "fashion_mnist", "num_clients": 6, "samples_per_client": 20,
                            "partition": "iid"},
                   "model": {"name": "lenet5"}, "local": {"batch_size": 10, "steps": 1},
                   "algorithm": {"name": "hist", "cells": 3, "edge_rounds": 1,
                                 "mask_sizes": "optimised"}})
    exp = open_run(cfg).exp
    algo, x0 = exp.algorithm, exp.initial_state()
    num = sum(v.numel() for v in x0.params.values())
    full = algo._full_latency(0, num)
    [sizes] = algo._sizes(full, num)
    g, q, s = algo.groups[0], algo.per_unit[0], algo.shared[0]
    cap = 9 * g.size // (6 * 3)

    def logged(k):
        return float((full * (s + q * np.asarray(k)) / num).max())

    best = min(logged(k) for k in itertools.product(range(cap + 1), repeat=3) if sum(k) == g.size)
    assert logged(sizes) == pytest.approx(best, rel=1e-12)
    _, report = algo.apply(x0)
    assert report.latency_s == pytest.approx(logged(sizes), rel=1e-12)


def test_hist_latency_uses_real_local_steps_and_real_cells(monkeypatch):
    """local.epochs sets H per client; padded clients of a smaller cell do not enter the max."""
    from wirelessfl.server.topology import Topology

    epochs = _exp(cells=2, edge_rounds=1)
    algo = epochs.algorithm
    assert (algo.local_steps == algo.env.local.steps).all()
    monkeypatch.setattr(Topology, "even", classmethod(lambda cls, u, n: cls.from_sizes([3, 2, 2])))
    raw = {**_exp_raw(cells=3, edge_rounds=1)}
    raw["local"] = {**raw["local"], "epochs": 2, "batch_size": 7}
    raw["data"] = {**raw["data"], "num_clients": 7}
    exp = open_run(raw).exp
    a = exp.algorithm
    sizes = [len(c) for c in a.topology.cells]
    assert len(set(sizes)) > 1 and a.client_mask.sum() == 7
    n = len(exp.algorithm.env.client_indices[0])
    assert a.local_steps[0, 0] == 2 * -(-n // 7)
    full = a._full_latency(0, 1000)
    a.cpu_hz[~a.client_mask] = 1.0  # a padded entry this slow would dominate if it counted
    assert np.allclose(a._full_latency(0, 1000), full)


def test_cpu_frequencies_are_drawn_once_per_client_by_default():
    algo = _exp(cells=4, edge_rounds=1).algorithm
    lat = [algo._full_latency(t, 1000) for t in range(3)]
    redraw = _exp(cells=4, edge_rounds=1, cpu_redraw=True).algorithm
    assert algo.cpu_hz.shape == (4, 2) and (algo.cpu_hz[:2] < 2e9).all() and (algo.cpu_hz[2:] >= 2e9).all()
    assert not np.allclose(lat[0], lat[1])  # channels change every round
    assert not np.allclose(redraw._full_latency(1, 1000), lat[1])


@pytest.mark.parametrize("setting, target, hist_n2, hfedavg_n2, hist_n4, hfedavg_n4, rounds", [
    ("non-iid", 70, 13.20, 23.66, 8.08, 20.28, (30, 28, 34, 24)),
    ("non-iid", 80, 115.30, 206.18, 76.06, 246.74, (262, 244, 320, 292)),
    ("cell-iid", 70, 4.40, 6.76, 3.32, 11.84, (10, 8, 14, 14)),
    ("cell-iid", 80, 38.72, 86.20, 24.72, 89.58, (88, 102, 104, 106)),
])
def test_table_one_megabytes_follow_from_the_accounting(setting, target, hist_n2, hfedavg_n2,
                                                        hist_n4, hfedavg_n4, rounds):
    """§6.6: Table I = integer rounds × E·0.169 MB·(vol_c + vol_f·share)/(vol_c + vol_f)."""
    from wirelessfl.algorithms.hist.hparams import table_uplink_mb
    from wirelessfl.models.zoo import LeNet5

    per_round = [table_uplink_mb(5, *LeNet5.paper_volumes, share) for share in (1 / 2, 1, 1 / 4, 1)]
    assert per_round[1] == pytest.approx(0.845)
    got = [round(r * mb, 2) for r, mb in zip(rounds, per_round)]
    assert got == pytest.approx([hist_n2, hfedavg_n2, hist_n4, hfedavg_n4], abs=0.011)


@pytest.mark.parametrize("cells, split, expected", [(2, True, 0.4401), (4, True, 0.2377),
                                                    (4, False, 0.845)])
def test_lenet_round_reports_table_one_megabytes(fmnist, cells, split, expected):
    cfg = resolve({"seed": 0, "rounds": 1,
                   "data": {"dataset": "fashion_mnist", "num_clients": 4, "samples_per_client": 20,
                            "partition": "iid"},
                   "model": {"name": "lenet5"}, "local": {"batch_size": 10, "steps": 1},
                   "algorithm": {"name": "hist", "cells": cells, "edge_rounds": 5, "split": split}})
    _, (report,) = _rounds(open_run(cfg).exp, 1)
    assert report.cumulative["uplink_mb_paper_per_client"] == pytest.approx(expected, abs=1e-4)


def test_symbol_normalisation_is_reachable_from_hist_and_is_the_aggregators_on_a_hand_round():
    """``normalise_symbols`` (the reading with unit-power symbols, §8.4 item 18): every cell's
    AirComp normalises, and on a hand-computed stack its noise std is max_i RMS(Δ_i)·√MSE,
    against γ·√MSE under the literal reading; the literal reading stays the default."""
    from wirelessfl.server.aggregation import AirComp

    plain = _exp(cells=2, edge_rounds=2, aggregation="aircomp")
    norm = _exp(cells=2, edge_rounds=2, aggregation="aircomp", normalise_symbols=True)
    assert not any(a.normalise for a in plain.algorithm.aggregators)
    assert all(a.normalise for a in norm.algorithm.aggregators)
    agg = norm.algorithm.aggregators[0]
    stack = {"w": torch.tensor([[0.3, -0.4], [0.1, 0.1], [2.0, 0.0]])}
    rms = float(np.sqrt((np.array([[0.3, -0.4], [0.1, 0.1], [2.0, 0.0]]) ** 2).mean(1)).max())
    _, info = agg.aggregate_stack(stack, np.ones(3) / 3, np.random.default_rng(0))
    twin = AirComp(agg.snr_db, agg.lr, antennas=agg.antennas, method=agg.method)
    _, lit = twin.aggregate_stack(stack, np.ones(3) / 3, np.random.default_rng(0))
    assert info.mse == lit.mse
    assert info.noise_std == pytest.approx(rms * info.mse ** 0.5)
    assert lit.noise_std == pytest.approx(agg.lr * lit.mse ** 0.5)
    with pytest.raises(ValueError, match="aggregation: aircomp"):
        _exp(cells=2, normalise_symbols=True)
