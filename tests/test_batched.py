"""The batched client engine equals the reference loop (to float tolerance)."""

import dataclasses

import numpy as np
import pytest
import torch

from wirelessfl.data import ArrayDataset
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientTask, LocalHParams, LocalSGD
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.models import build_model
from wirelessfl.server.submodel import Submodel, random_disjoint_selections

MODELS = [("fcnn", (1, 28, 28)), ("lenet5", (1, 28, 28)), ("cifar_cnn", (3, 32, 32))]
OPTIMISERS = [{"optimizer": "sgd"}, {"optimizer": "sgd", "momentum": 0.9, "weight_decay": 1e-3},
              {"optimizer": "adam"}]


def _data(shape, n=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ArrayDataset(torch.randn(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g), 10)


def _tasks(params_per_client, sizes, lrs=None):
    tasks, offset = [], 0
    for c, (p, n) in enumerate(zip(params_per_client, sizes)):
        tasks.append(ClientTask(c, p, np.arange(offset, offset + n), seed=100 + c,
                                lr=None if lrs is None else lrs[c]))
        offset += n
    return tasks


def _assert_same(a, b, norm_only=False):
    """Entrywise equal to float tolerance (Adam: per-tensor relative error < 1e-3, since √v
    turns float noise on a near-zero gradient into a step of up to ±lr on that entry)."""
    assert [r.client for r in a] == [r.client for r in b]
    for ra, rb in zip(a, b):
        assert ra.num_steps == rb.num_steps and ra.num_samples == rb.num_samples
        for k in ra.delta:
            if norm_only:
                assert (ra.delta[k] - rb.delta[k]).norm() <= 1e-3 * rb.delta[k].norm() + 1e-6
            else:
                torch.testing.assert_close(ra.delta[k], rb.delta[k], rtol=1e-3, atol=5e-5)
        if ra.num_steps:
            assert ra.loss == pytest.approx(rb.loss, rel=1e-4)


def _float64(name, shape, n=120, **kwargs):
    """A model and data in float64, where the two engines' orders of summation agree to ~1e-15.

    In float32 they agree to float tolerance only where no ReLU sits near its kink: a
    pre-activation within rounding of 0 takes the other side in the other engine, and its
    unit's whole row then steps differently (measured on an Intel AVX-512 CPU: Adam on
    ``cifar_cnn``, one sample's ``fc1`` unit 16, its row off by up to 3e-3, 6e-3 = 0.23 % of
    the Δ's norm). The algorithm's equivalence is a float64 test; float32 is the same code."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = build_model(name, shape, 10, seed=0, **kwargs)
    finally:
        torch.set_default_dtype(default)
    data = _data(shape, n=n)
    return model, dataclasses.replace(data, x=data.x.double())


def _assert_equal_float64(a, b):
    """Every Δ to 1e-12 of its norm, every loss to 1e-12, in float64."""
    assert [r.client for r in a] == [r.client for r in b]
    for ra, rb in zip(a, b):
        assert ra.num_steps == rb.num_steps and ra.num_samples == rb.num_samples
        for k, v in rb.delta.items():
            assert ra.delta[k].dtype == torch.float64, k
            assert (ra.delta[k] - v).norm() <= 1e-12 * v.norm() + 1e-15, (ra.client, k)
        if ra.num_steps:
            assert ra.loss == pytest.approx(rb.loss, rel=1e-12)


@pytest.mark.parametrize("name, shape", MODELS)
@pytest.mark.parametrize("opt", OPTIMISERS, ids=["sgd", "sgd-momentum-wd", "adam"])
def test_batched_equals_loop_with_unequal_data_and_lrs(name, shape, opt):
    model, data = _float64(name, shape, dropout=0.0)
    hp = LocalHParams(lr=0.02, batch_size=8, steps=4, **opt)
    # unequal data (a short last batch of 6 whose weights 1/6 are inexact, a client with 2
    # steps' worth of data, one without data) and two step sizes
    tasks = _tasks([model.params()] * 5, [30, 12, 20, 0, 25], lrs=[None, 0.05, None, None, 0.05])
    update = LocalSGD(model, hp)
    _assert_equal_float64(BatchedExecutor().run(update, data, tasks, hp),
                          LoopExecutor().run(update, data, tasks, hp))


@pytest.mark.parametrize("name, shape", MODELS)
def test_batched_equals_loop_on_hist_submodels(name, shape):
    """Cells with sliced submodels of different sizes: one stacked group per shape."""
    model = build_model(name, shape, 10, seed=0, dropout=0.0)
    params = model.params()
    groups = [model.group(g) for g in model.hist_groups]
    sels = random_disjoint_selections(groups, [[g.size // 2, g.size - g.size // 2 - 3, 3]
                                               for g in groups], np.random.default_rng(0))
    starts = [Submodel(model.unit_groups, s, params).slice(params) for s in sels]
    hp = LocalHParams(lr=0.05, batch_size=10, steps=3)
    tasks = _tasks([starts[c % 3] for c in range(6)], [20] * 6)
    update = LocalSGD(model, hp)
    _assert_same(BatchedExecutor().run(update, data := _data(shape), tasks, hp),
                 LoopExecutor().run(update, data, tasks, hp))


class _SGDWithOwnDescend(LocalSGD):
    """Plain SGD through an overridden (identical) descend: not ``plain_sgd``."""

    elementwise = True

    def descend(self, carry, grads, loss):
        return super().descend(carry, grads, loss)


@pytest.mark.parametrize("name", ["fcnn", "mlp", "cifar_cnn"])
def test_plain_sgd_in_the_backward_pass_gives_the_numbers_of_the_separate_step(
        name, stack_layout):
    """Plain SGD takes its stacked linear weights' step inside the backward pass (wide
    layers stacked column-major or row-major on the CPU, by the machine); with dropout and
    an unequal last step it gives the numbers of the rule taking a separate step, and of the
    loop, and contiguous results."""
    shape = (3, 32, 32) if name == "cifar_cnn" else (1, 28, 28)
    kwargs = {"dropout": 0.5} if name == "fcnn" else {}
    model = build_model(name, shape, 10, seed=0, **kwargs)
    hp = LocalHParams(lr=0.05, batch_size=8, steps=5)
    data = _data(shape)
    tasks = _tasks([model.params()] * 4, [36, 36, 36, 12])  # the last ends after 2 steps
    plain, own = LocalSGD(model, hp), _SGDWithOwnDescend(model, hp)
    assert plain.plain_sgd and not own.plain_sgd
    fused = BatchedExecutor(low_rank="off").run(plain, data, tasks, hp)  # stacked weights
    assert all(v.is_contiguous() for r in fused for v in r.delta.values())
    _assert_same(fused, BatchedExecutor().run(own, data, tasks, hp))
    _assert_same(fused, LoopExecutor().run(plain, data, tasks, hp))


def _drifting_rules(model, hp):
    from wirelessfl.algorithms.feddyn import DynamicSGD
    from wirelessfl.algorithms.fedprox import ProximalSGD
    from wirelessfl.algorithms.scaffold import ControlledSGD
    return {"fedprox": ProximalSGD(model, hp, 0.5), "feddyn": DynamicSGD(model, hp, 0.2),
            "scaffold": ControlledSGD(model, hp)}


CUDA = pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU")])


@pytest.mark.parametrize("rule", ["fedprox", "feddyn", "scaffold"])
@pytest.mark.parametrize("starts", ["shared", "own"])
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_drifting_rules_take_the_fused_step_with_the_numbers_of_the_loop(
        rule, starts, device, stack_layout):
    """FedProx, FedDyn and SCAFFOLD (β = 1) with plain SGD take their correction as an
    in-place drift beside the fused step (wide layer column-major or row-major on the CPU,
    row-major on a GPU; dropout, an unequal last step, the clients' h and c - c_i): the
    numbers of the loop on the CPU, from one start or each its own."""
    from wirelessfl.engine import client_store

    model = build_model("fcnn", (1, 28, 28), 10, seed=0, hidden=160, dropout=0.5)
    hp = LocalHParams(lr=0.05, batch_size=8, steps=5)
    update = _drifting_rules(model, hp)[rule]
    assert update.plain_sgd and update.drifts
    params = model.params()
    gen = torch.Generator().manual_seed(3)
    noise = [{k: 0.01 * torch.randn(v.shape, generator=gen) for k, v in params.items()}
             for _ in range(4)]
    starts_ = ([params] * 4 if starts == "shared"
               else [{k: v + n[k] for k, v in params.items()} for n in noise])
    c = {k: -3 * v for k, v in noise[0].items()}  # SCAFFOLD's server c; h_i or c_i below
    tasks = [dataclasses.replace(t, state=client_store.store({k: 5 * v for k, v in n.items()}),
                                 broadcast={"c": c})
             for t, n in zip(_tasks(starts_, [36, 36, 36, 12]), noise)]  # the last: 2 steps
    data = _data((1, 28, 28))
    batched = BatchedExecutor(torch.device(device)).run(update, data, tasks, hp)
    batched = [dataclasses.replace(r, delta={k: v.cpu() for k, v in r.delta.items()},
                                   state=r.state and {k: v.cpu() for k, v in r.state.items()})
               for r in batched]
    loop = LoopExecutor().run(update, data, tasks, hp)
    _assert_same(batched, loop)
    tol = {"rtol": 1e-5, "atol": 1e-7} if device == "cpu" else {"rtol": 1e-4, "atol": 1e-6}
    for b, lp in zip(batched, loop):  # closer than the engines' general tolerance
        for k in lp.delta:
            torch.testing.assert_close(b.delta[k], lp.delta[k], **tol)
    if rule != "fedprox":  # the new client states follow from the same Δ
        for b, lp in zip(batched, loop):
            for k in lp.state:
                torch.testing.assert_close(b.state[k], lp.state[k], rtol=1e-3, atol=5e-5)


def test_a_drift_counts_only_beside_its_own_correction():
    """SCAFFOLD with server momentum (β < 1) and a subclass that changes FedProx's
    correction are not fused; the base rule has no drift step."""
    from wirelessfl.algorithms.fedprox import ProximalSGD
    from wirelessfl.algorithms.scaffold import ControlledSGD

    class Doubled(ProximalSGD):
        def correct(self, grads, params, start, ctx):
            return {k: 2 * g for k, g in super().correct(grads, params, start, ctx).items()}

    model = build_model("fcnn", (1, 28, 28), 10, seed=0)
    rule = ControlledSGD(model, LocalHParams(), beta=0.5)
    assert not rule.drifts and not rule.plain_sgd
    assert ProximalSGD(model, LocalHParams(), 1.0).plain_sgd
    assert not Doubled(model, LocalHParams(), 1.0).plain_sgd
    with pytest.raises(NotImplementedError, match="drift"):
        LocalSGD(model, LocalHParams()).drift_step("fc1.weight", torch.zeros(1), {}, {}, 0.1)


def test_plain_sgd_is_only_the_plain_step():
    model = build_model("fcnn", (1, 28, 28), 10, seed=0)
    for hp in (LocalHParams(momentum=0.5), LocalHParams(weight_decay=1e-3),
               LocalHParams(optimizer="adam"), LocalHParams(precision="bf16")):
        assert not LocalSGD(model, hp).plain_sgd


def test_batched_epochs_mode_and_subclassed_updates_fall_back_to_the_loop():
    model = build_model("fcnn", (1, 28, 28), 10, seed=0, dropout=0.0)
    hp = LocalHParams(lr=0.05, batch_size=7, epochs=2, drop_last=True)
    data = _data((1, 28, 28))
    tasks = _tasks([model.params()] * 3, [30, 15, 22])
    _assert_same(BatchedExecutor().run(LocalSGD(model, hp), data, tasks, hp),
                 LoopExecutor().run(LocalSGD(model, hp), data, tasks, hp))

    class Scaled(LocalSGD):
        def descend(self, carry, grads, loss):
            return super().descend(carry, {k: 2 * g for k, g in grads.items()}, loss)

    _assert_same(BatchedExecutor().run(Scaled(model, hp), data, tasks, hp),
                 LoopExecutor().run(Scaled(model, hp), data, tasks, hp))


def test_hist_round_with_the_batched_engine_equals_the_loop():
    from wirelessfl.run.kinds import open_run

    raw = {"seed": 1, "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 50},
           "model": {"name": "fcnn", "options": {"hidden": 30, "dropout": 0.0}},
           "local": {"lr": 0.05, "batch_size": 10, "steps": 3},
           "algorithm": {"name": "hist", "cells": 4, "edge_rounds": 2, "mask_sizes": "optimised"}}
    states = []
    for engine in ("loop", "batched"):
        exp = open_run({**raw, "engine": engine}).exp
        state = exp.initial_state()
        for _ in range(2):
            state, _ = exp.algorithm.apply(state)
        states.append(state.params)
    for k in states[0]:
        torch.testing.assert_close(states[0][k], states[1][k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("algorithm", [{"name": "fedavg"}, {"name": "scaffold"},
                                       {"name": "moon", "mu": 1.0}])
def test_chunked_batched_groups_give_the_numbers_of_one_group(algorithm):
    """max_batch splits a round's stacked group into chunks (GPU memory): same results."""
    from wirelessfl.run.kinds import open_run

    raw = {"seed": 2, "rounds": 2, "engine": "batched", "algorithm": algorithm,
           "data": {"dataset": "synthetic", "num_clients": 7, "samples_per_client": 30},
           "model": {"name": "fcnn", "options": {"hidden": 12, "dropout": 0.3}},
           "local": {"lr": 0.05, "batch_size": 8, "steps": 3}}
    finals = []
    for max_batch in (None, 3, 1):
        exp = open_run({**raw, "max_batch": max_batch}).exp
        state = exp.initial_state()
        for _ in range(2):
            state, _ = exp.algorithm.apply(state)
        finals.append(state.params)
    for other in finals[1:]:
        for k in finals[0]:
            torch.testing.assert_close(other[k], finals[0][k], rtol=1e-6, atol=1e-7)


def test_max_batch_is_checked():
    with pytest.raises(ValueError, match="max_batch"):
        BatchedExecutor(max_batch=0)


@pytest.mark.parametrize("name, side", [("svhn_cnn", 32), ("resnet18_bn", 16)])
def test_batchnorm_conv_models_batched_equal_the_loop(name, side):
    """BatchNorm models: one step of the batched engine gives the loop's delta.

    Their convolutions stack in NCHW (``layers.Conv2d(channels_last=False)``): with the
    channels-last layout, CPU batch norm's gradients came out 0.5-1% off after one step.
    In float64 (:func:`_float64`) they agree to 1e-9: in float32 a deep BatchNorm net amplifies
    the two engines' orders of summation to ~0.5% on some batches (measured, both batch orders)."""
    model, data = _float64(name, (3, side, side), n=64)  # ResNet-18 on 16 px: its last block 2 x 2
    update = LocalSGD(model, LocalHParams(lr=0.05, batch_size=16, steps=1))
    params, buffers = model.params(), model.buffers_state()
    tasks = [ClientTask(c, params, np.arange(32 * c, 32 * c + 32), seed=100 + c, buffers=buffers)
             for c in range(2)]
    loop = LoopExecutor(torch.device("cpu")).run(update, data, tasks, update.hp)
    batched = BatchedExecutor(torch.device("cpu")).run(update, data, tasks, update.hp)
    for ra, rb in zip(loop, batched):
        for k, v in ra.delta.items():
            if k.startswith("conv") and k.endswith("bias"):
                continue  # a bias before BatchNorm has no effect and a zero gradient
            assert v.dtype == torch.float64 and (v - rb.delta[k]).norm() <= 1e-9 * v.norm(), k


@pytest.mark.parametrize("name, shape, conv", [("fcnn", (1, 28, 28), "grouped"),
                                               ("lenet5", (1, 28, 28), "grouped"),
                                               ("lenet5", (1, 28, 28), "gemm")])
def test_moon_steps_in_the_backward_pass_and_equals_the_loop(name, shape, conv, monkeypatch):
    """MOON's objective calls the model only (its frozen anchors are one nested vmap): its
    plain SGD steps are fused, on a wide linear layer and on a convolutional model, whichever
    rule stacks the convolutions (``gemm``: CUDA's, here on the CPU)."""
    from wirelessfl.models import layers
    monkeypatch.setitem(layers.STACKED_CONV, "cpu", conv)
    from wirelessfl.algorithms.dynamic.continuous import DistillSGD
    from wirelessfl.algorithms.moon import ContrastiveSGD

    model = build_model(name, shape, 10, seed=0)
    hp = LocalHParams(lr=0.05, batch_size=8, steps=3)
    moon = ContrastiveSGD(model, hp, mu=1.0, tau=0.5)
    assert moon.plain_sgd and DistillSGD(model, hp, 1.0).plain_sgd
    tasks = _tasks([model.params()] * 3, [30, 30, 20])
    data = _data(shape)
    _assert_same(BatchedExecutor().run(moon, data, tasks, hp),
                 LoopExecutor().run(moon, data, tasks, hp))


def test_the_stacked_schedule_writes_each_batch_where_the_step_by_step_loop_would():
    """Full batches (one gather for all clients), ragged ones (short last batches, fewer
    steps, no data, unequal sizes), epochs and drop_last, other index types: the loop's
    batches (each client's own stream, either order) as padded indices and weights, exactly."""
    from wirelessfl.engine.client import batch_schedule
    from wirelessfl.engine.schedule import BATCH_ORDERS, stacked_schedule

    def reference(indices, schedules):
        n_steps = max((len(sch) for sch in schedules), default=0)
        widths = [max((len(sch[s]) for sch in schedules if s < len(sch)), default=1)
                  for s in range(n_steps)]
        offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
        index = np.zeros((len(schedules), int(offsets[-1])), np.int64)
        weight = np.zeros((len(schedules), int(offsets[-1])))
        for c, (own, sch) in enumerate(zip(indices, schedules)):
            for s, pos in enumerate(sch):
                index[c, offsets[s]:offsets[s] + len(pos)] = own[pos]
                weight[c, offsets[s]:offsets[s] + len(pos)] = 1.0 / len(pos)
        return index, weight, offsets

    rng = np.random.default_rng(0)
    for trial in range(240):
        hp = LocalHParams(batch_size=int(rng.integers(1, 9)), steps=int(rng.integers(1, 7)),
                          epochs=None if trial % 3 else int(rng.integers(1, 3)),
                          drop_last=bool(trial % 4 == 0),
                          batch_order=BATCH_ORDERS[trial % 7 % 2])
        count = int(rng.integers(1, 10))
        sizes = (rng.integers(0, 30, count) if trial % 2 else
                 np.full(count, 8 * hp.batch_size) if trial % 4 == 0  # all full
                 else np.full(count, int(rng.integers(1, 30))))  # equal, maybe ragged
        dtype = np.int32 if trial % 5 == 0 else np.int64
        indices = [rng.choice(1000, n, replace=False).astype(dtype) for n in sizes]
        seeds = rng.integers(0, 2**62, count)
        schedules = [batch_schedule(int(n), hp, int(seeds[c]))
                     for c, n in enumerate(sizes)]
        *got, steps = stacked_schedule(indices, seeds, hp)
        assert steps.tolist() == [len(s) for s in schedules], trial
        for a, want in zip(got, reference(indices, schedules)):
            assert a.dtype == want.dtype and np.array_equal(a, want), trial
