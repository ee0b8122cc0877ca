"""Many clients: chunks chosen by memory give the numbers of one stacked group; the mean of
many pseudo-gradients is summed in chunks without changing what it is."""

import numpy as np
import torch

from wirelessfl.data import ArrayDataset
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientTask, LocalHParams, LocalSGD
from wirelessfl.models import build_model
from wirelessfl.server import aggregation


def test_default_chunks_follow_the_memory_budget_and_keep_the_numbers(monkeypatch):
    model = build_model("fcnn", (1, 28, 28), 10, seed=0, hidden=8, dropout=0.5)
    hp = LocalHParams(lr=0.05, batch_size=5, steps=3)
    g = torch.Generator().manual_seed(0)
    data = ArrayDataset(torch.randn(70, 1, 28, 28, generator=g),
                        torch.randint(0, 10, (70,), generator=g), 10)
    tasks = [ClientTask(c, model.params(), np.arange(10 * c, 10 * c + 10), seed=c)
             for c in range(7)]
    executor = BatchedExecutor()
    per_client = executor.client_bytes(tasks[0], hp, data)
    assert per_client >= 8 * sum(v.numel() * 4 for v in model.params().values())
    whole = executor.run(LocalSGD(model, hp), data, tasks, hp)
    groups = []
    real = BatchedExecutor._run_group
    monkeypatch.setattr(BatchedExecutor, "_run_group",
                        lambda self, u, d, t, h: (groups.append(len(t)), real(self, u, d, t, h))[1])
    monkeypatch.setattr(BatchedExecutor, "memory_budget", lambda self: 3 * per_client)
    chunked = executor.run(LocalSGD(model, hp), data, tasks, hp)
    assert groups == [2, 2, 3]               # three clients fit the budget: equal chunks
    for a, b in zip(whole, chunked):
        for k in a.delta:
            assert torch.equal(a.delta[k], b.delta[k])
    assert 0 < BatchedExecutor().memory_budget() <= 4 << 30


def test_default_cpu_chunks_hold_a_cache_sized_share_of_parameters():
    from wirelessfl.engine.batched import CPU_CHUNK_BYTES

    model = build_model("fcnn", (1, 28, 28), 10, seed=0)  # 0.94 MB per client
    data = ArrayDataset(torch.zeros(10, 1, 28, 28), torch.zeros(10, dtype=torch.long), 10)
    task = ClientTask(0, model.params(), np.arange(10), seed=0)
    hp = LocalHParams()
    params = sum(v.numel() * 4 for v in model.params().values())
    assert BatchedExecutor().chunk_size(task, hp, data) == CPU_CHUNK_BYTES // params
    assert BatchedExecutor(max_batch=60).chunk_size(task, hp, data) == 60


def test_mean_of_many_trees_in_chunks(monkeypatch):
    g = torch.Generator().manual_seed(1)
    trees = [{"w": torch.randn(3, 4, generator=g), "b": torch.randn(2, generator=g)}
             for _ in range(600)]
    w = np.random.default_rng(0).random(600)
    exact = {k: sum(wi * t[k].double() for wi, t in zip(w, trees)) / w.sum() for k in trees[0]}
    chunked = aggregation.weighted_mean(trees, w)                # 256 + 256 + 88
    for k in exact:
        torch.testing.assert_close(chunked[k].double(), exact[k], rtol=1e-5, atol=1e-6)
    few = trees[:100]                                            # one chunk: the one stacked sum
    monkeypatch.setattr(aggregation, "MEAN_CHUNK", 10**6)
    one = aggregation.weighted_mean(few, w[:100])
    monkeypatch.setattr(aggregation, "MEAN_CHUNK", 256)
    assert all(torch.equal(one[k], aggregation.weighted_mean(few, w[:100])[k]) for k in one)
