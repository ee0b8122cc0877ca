"""The device guard: host/device bugs caught on the CPU, as a GPU would catch them."""

import dataclasses

import numpy as np
import pytest
import torch

from wirelessfl.data import ArrayDataset
from wirelessfl.engine import client_store, device_guard
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientError, ClientTask, LocalHParams, LocalSGD
from wirelessfl.engine.device_guard import DeviceMismatch
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.models import build_model
from wirelessfl.run.kinds import open_run


def _data(n=60):
    g = torch.Generator().manual_seed(1)
    return ArrayDataset(torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g), 10)


def test_the_guard_refuses_what_cuda_refuses_and_allows_what_it_allows():
    with device_guard.guarded() as dev:
        h, p = device_guard.host(torch.ones(3)), torch.ones(3, device=dev)
        i = torch.tensor([0], device=dev)
        for bad in (lambda: h + p, lambda: torch.add(p, h, alpha=2), lambda: h[i],
                    lambda: h.__setitem__(i, p[:1]), lambda: torch.stack([h, p]),
                    lambda: p + torch.zeros(3)):  # made with no device: the host's
            with pytest.raises(DeviceMismatch, match="same device"):
                bad()
        assert device_guard.is_host(h * 2) and device_guard.is_host(h.to("cpu"))
        assert not device_guard.is_host(h.to(dev)) and not device_guard.is_host(h.to(p))
        assert not device_guard.is_host(p * device_guard.host(torch.tensor(2.0)))  # a host scalar
        assert not device_guard.is_host(p[torch.tensor([0, 1])])  # host indices into the device
        p.copy_(h)
        assert not device_guard.is_host(client_store.load(client_store.store({"w": p}), {"w": p})["w"])
    assert not device_guard.is_host(client_store.store({"w": torch.ones(2)})["w"])  # off outside


class _Planted(LocalSGD):
    """A rule that adds a host tensor to its pseudo-gradient (the FedDyn bug, planted)."""

    def client_final(self, task, carry):
        res = super().client_final(task, carry)
        bias = client_store.store({k: torch.zeros_like(v) for k, v in res.delta.items()})
        return dataclasses.replace(res, delta={k: v + bias[k] for k, v in res.delta.items()})


class _Returns(LocalSGD):
    """A rule that returns its pseudo-gradient in host memory."""

    def client_final(self, task, carry):
        res = super().client_final(task, carry)
        return dataclasses.replace(res, delta=client_store.store(res.delta))


@pytest.mark.parametrize("engine", [LoopExecutor, BatchedExecutor])
def test_a_planted_cross_device_tensor_is_caught(engine):
    model = build_model("fcnn", (1, 28, 28), 10, seed=0, hidden=8)
    hp = LocalHParams(lr=0.05, batch_size=10, steps=2)
    tasks = [ClientTask(c, model.params(), np.arange(20 * c, 20 * c + 20), seed=c) for c in range(2)]
    data = _data()
    with device_guard.guarded() as dev:
        with pytest.raises((DeviceMismatch, ClientError), match="same device"):
            engine(dev).run(_Planted(model, hp), data, tasks, hp)
        with pytest.raises((DeviceMismatch, ClientError), match="host"):
            engine(dev).run(_Returns(model, hp), data, tasks, hp)
    engine().run(_Planted(model, hp), data, tasks, hp)  # unguarded: one memory, no error


@pytest.mark.parametrize("rule", ["feddyn", "scaffold"])
@pytest.mark.parametrize("starts", ["shared", "own"])
def test_stateful_rules_read_their_stored_state_on_the_device(rule, starts):
    """Tasks built on the host, run on the (guarded) device: FedDyn's h_i and SCAFFOLD's
    c − c_i meet the device's Δ in client_final (cuda:0 and cpu on an H100 before the
    executors moved tasks to their device); the numbers are the plain CPU loop's."""
    from wirelessfl.algorithms.feddyn import DynamicSGD
    from wirelessfl.algorithms.scaffold import ControlledSGD

    model = build_model("fcnn", (1, 28, 28), 10, seed=0, hidden=16)
    hp = LocalHParams(lr=0.05, batch_size=8, steps=3)
    update = DynamicSGD(model, hp, 0.2) if rule == "feddyn" else ControlledSGD(model, hp)
    params = model.params()
    gen = torch.Generator().manual_seed(3)
    noise = [{k: 0.01 * torch.randn(v.shape, generator=gen) for k, v in params.items()} for _ in range(3)]

    def tasks():
        starts_ = ([params] * 3 if starts == "shared"
                   else [{k: v + n[k] for k, v in params.items()} for n in noise])
        c = device_guard.host({k: -3 * v for k, v in noise[0].items()})
        return [ClientTask(i, device_guard.host(s), np.arange(20 * i, 20 * i + 20), seed=i,
                           state=client_store.store({k: 5 * v for k, v in n.items()}),
                           broadcast={"c": c})
                for i, (s, n) in enumerate(zip(starts_, noise))]

    data = _data()  # the device's
    want = LoopExecutor().run(update, data, tasks(), hp)
    with device_guard.guarded() as dev:
        runs = [engine.run(update, data, tasks(), hp)
                for engine in (LoopExecutor(dev), BatchedExecutor(dev))]
    for got in runs:
        for a, b in zip(got, want):
            assert not any(device_guard.is_host(v) for v in a.delta.values())
            assert all(device_guard.is_host(v) for v in a.state.values())  # the store is the host
            for k in b.delta:
                torch.testing.assert_close(a.delta[k], b.delta[k], rtol=1e-5, atol=1e-7)
                torch.testing.assert_close(a.state[k].as_subclass(torch.Tensor), b.state[k],
                                           rtol=1e-4, atol=1e-6)


SYN = {"seed": 5, "rounds": 2, "engine": "batched",
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 40},
       "model": {"name": "mlp", "options": {"hidden": [16, 12]}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3}}


@pytest.mark.parametrize("algorithm", [
    {"name": "ramfed", "ratios": [0.5, 0.25]},                   # memories and Σ u_n on the host
    {"name": "ramfed", "ratios": [0.5], "memory_dtype": "float16"},
    {"name": "feddyn", "alpha": 0.1},
    {"name": "scaffold"},
    {"name": "fadamgc"},
    {"name": "moon"},
])
def test_stateful_runs_keep_the_host_and_the_device_apart(algorithm):
    """Two rounds of every algorithm with a client store, the executor on the guarded device:
    a host tensor meeting the device anywhere (client_final, aggregation, the store) raises.
    RAM-Fed indexed its host memories with the device's submodel indices (a crash on CUDA)."""
    plain = open_run({**SYN, "algorithm": algorithm}).exp
    state = plain.initial_state()
    for _ in range(2):
        state, _ = plain.algorithm.apply(state)
    exp = open_run({**SYN, "algorithm": algorithm}).exp  # model and data: the device's
    guarded = exp.initial_state()
    with device_guard.guarded() as dev:
        executor = exp.algorithm.env.executor
        executor.device = executor._loop.device = dev
        for _ in range(2):
            guarded, _ = exp.algorithm.apply(guarded)
    for k in state.params:
        torch.testing.assert_close(guarded.params[k], state.params[k], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_local_training_reads_nothing_back_from_the_device(optimizer):
    """No host synchronisation inside local training: the batched engine reads no scalar,
    however many steps its clients take; their losses come back after the last step in one
    list (one device read per call: on an H200 a scalar per client was 300 of a FCNN HIST
    round's 430 host waits)."""
    from torch.profiler import ProfilerActivity, profile

    model = build_model("fcnn", (1, 28, 28), 10, seed=0, hidden=16, dropout=0.3)
    data = _data(240)
    hp = LocalHParams(lr=0.05, batch_size=10, steps=1, optimizer=optimizer)
    BatchedExecutor().run(LocalSGD(model, hp), data, [ClientTask(0, model.params(), np.arange(40), 0)],
                          hp)  # a process's first call checks its kernels once
    reads = []
    for steps in (2, 6):
        hp = LocalHParams(lr=0.05, batch_size=10, steps=steps, optimizer=optimizer)
        tasks = [ClientTask(c, model.params(), np.arange(40 * c, 40 * c + 40), seed=c) for c in range(6)]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            BatchedExecutor().run(LocalSGD(model, hp), data, tasks, hp)
        reads.append(sum(e.count for e in prof.key_averages() if e.key == "aten::_local_scalar_dense"))
    assert reads == [0, 0]
