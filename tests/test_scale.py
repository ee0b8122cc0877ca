"""Many clients: chunks chosen by memory give the numbers of one stacked group; the mean of
many pseudo-gradients is summed in chunks without changing what it is, and folded while the
clients train (a round holds one chunk's pseudo-gradients)."""

import numpy as np
import pytest
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
                        lambda self, u, d, t, *a: (groups.append(len(t)), real(self, u, d, t, *a))[1])
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


def test_a_weight_kept_low_rank_counts_its_factors_not_its_stack(monkeypatch):
    """Cross-device (many clients, few small steps): fc1's weight stays factored
    (:mod:`wirelessfl.models.lowrank`), so a client holds R · (out + in) numbers of it, not
    out · in, and a budget that cuts the stacked weights into chunks of 4 trains all 12 at once,
    with the chunks' numbers."""
    from wirelessfl.engine.batched import CPU_CHUNK_BYTES

    model = build_model("fcnn", (1, 28, 28), 10, seed=0)  # 784-300-10: fc1 0.94 MB
    hp = LocalHParams(lr=0.05, batch_size=4, steps=3)     # R = 12 rows ≤ 300 / 2
    g = torch.Generator().manual_seed(0)
    data = ArrayDataset(torch.randn(144, 1, 28, 28, generator=g),
                        torch.randint(0, 10, (144,), generator=g), 10)
    params = model.params()  # one start for all (FedAvg's global model)
    tasks = [ClientTask(c, params, np.arange(12 * c, 12 * c + 12), seed=c) for c in range(12)]
    factored = {"fc1.weight": 12}
    stacked = sum(v.numel() * 4 for v in params.values())
    kept = stacked - 300 * 784 * 4 + 12 * (300 + 784) * 4
    ex = BatchedExecutor()
    assert (ex.client_bytes(tasks[0], hp, data, model)
            - ex.client_bytes(tasks[0], hp, data, model, factored)) == 8 * (stacked - kept)
    monkeypatch.setattr(BatchedExecutor, "memory_budget",
                        lambda self: 4 * self.client_bytes(tasks[0], hp, data, model))
    assert ex.chunk_size(tasks[0], hp, data, model) == 4
    assert ex.chunk_size(tasks[0], hp, data, model, factored) == min(
        ex.memory_budget() // ex.client_bytes(tasks[0], hp, data, model, factored),
        CPU_CHUNK_BYTES // kept) >= 12
    groups = []
    real = BatchedExecutor._run_group
    monkeypatch.setattr(BatchedExecutor, "_run_group",
                        lambda self, u, d, t, *a: (groups.append(len(t)), real(self, u, d, t, *a))[1])
    update = LocalSGD(model, hp)
    whole = ex.run(update, data, tasks, hp)
    assert groups == [12] and ex.low_ranked == 1
    chunks = BatchedExecutor(max_batch=4)
    by_four = chunks.run(update, data, tasks, hp)
    assert groups[1:] == [4, 4, 4] and chunks.low_ranked == 3
    for a, b in zip(whole, by_four):
        for k in a.delta:
            torch.testing.assert_close(a.delta[k], b.delta[k], rtol=1e-5, atol=1e-7)


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


def _fcnn_tasks(n, shared=True):
    model = build_model("fcnn", (1, 28, 28), 10, seed=0, hidden=8, dropout=0.5)
    g = torch.Generator().manual_seed(2)
    data = ArrayDataset(torch.randn(10 * n, 1, 28, 28, generator=g),
                        torch.randint(0, 10, (10 * n,), generator=g), 10)
    start = model.params()
    tasks = [ClientTask(c, start if shared else {k: v + 0.01 * c for k, v in start.items()},
                        np.arange(10 * c, 10 * c + 3 + c % 8), seed=c) for c in range(n)]
    return model, data, tasks


@pytest.mark.parametrize("engine", ["loop", "batched", "chunked"])
@pytest.mark.parametrize("shared", [True, False])
def test_a_fold_averages_the_deltas_as_clients_finish(engine, shared):
    """Folded while training = the weighted mean of the returned deltas; no delta is kept."""
    from wirelessfl.engine.client import DeltaFold
    from wirelessfl.engine.loop import LoopExecutor

    model, data, tasks = _fcnn_tasks(9, shared)
    hp = LocalHParams(lr=0.05, batch_size=4, steps=3)
    executor = {"loop": LoopExecutor(), "batched": BatchedExecutor(),
                "chunked": BatchedExecutor(max_batch=4)}[engine]
    plain = executor.run(LocalSGD(model, hp), data, tasks, hp)
    w = np.array([len(t.indices) for t in tasks], float)
    fold = DeltaFold(w)
    folded = executor.run(LocalSGD(model, hp), data, tasks, hp, fold)
    assert all(r.delta == {} for r in folded) and fold.folded == len(tasks)
    assert [(r.client, r.num_steps, r.loss) for r in folded] == \
        [(r.client, r.num_steps, r.loss) for r in plain]
    expected = aggregation.weighted_mean([r.delta for r in plain], w)
    got = fold.mean()
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], rtol=1e-5, atol=1e-7)
        assert got[k].is_contiguous()


def test_a_fold_is_checked_and_shares_add_up():
    from wirelessfl.engine.client import DeltaFold

    for bad in ([1.0, -1.0], [np.nan], [[1.0]], [0.0, 0.0]):
        with pytest.raises(ValueError):
            DeltaFold(bad)
    g = torch.Generator().manual_seed(0)
    d = torch.randn(5, 3, 2, generator=g)
    whole, w = DeltaFold([1, 2, 3, 4, 5]), np.array([1, 2, 3, 4, 5.0])
    whole.add(range(5), {"x": d.clone()})
    merged = DeltaFold(w)
    for lo, hi in [(0, 2), (2, 2), (2, 5)]:
        part = merged.share(lo, hi)
        part.add(range(hi - lo), {"x": d[lo:hi].clone()})
        merged.merge(part)
    torch.testing.assert_close(merged.mean()["x"], whole.mean()["x"])
    torch.testing.assert_close(whole.mean()["x"], (d * torch.tensor(w / w.sum()).float()
                                                   .view(-1, 1, 1)).sum(0))
    with pytest.raises(ValueError, match="does not stack"):
        DeltaFold(w).add(range(4), {"x": d.clone()})
    model, data, tasks = _fcnn_tasks(3)
    hp = LocalHParams(lr=0.05, batch_size=4, steps=1)
    for bad in (DeltaFold([1.0, 1.0]), DeltaFold([1.0] * 4)):
        with pytest.raises(ValueError, match="one weight per task"):
            BatchedExecutor().run(LocalSGD(model, hp), data, tasks, hp, bad)
    used = DeltaFold([1.0] * 3)
    BatchedExecutor().run(LocalSGD(model, hp), data, tasks, hp, used)
    with pytest.raises(ValueError, match="3 folded"):           # a fold serves one round
        BatchedExecutor().run(LocalSGD(model, hp), data, tasks, hp, used)
    with pytest.raises(RuntimeError, match="2 of 5"):
        half = DeltaFold(w)
        half.add([0, 1], {"x": d[:2].clone()})
        half.mean()


def test_fedavg_folds_its_mean_over_an_exact_uplink_and_keeps_the_numbers():
    """A FedAvg round folds Δ while training (results without deltas) and moves the model as
    the mean of the deltas would; FedDyn, which needs their plain sum, folds only with uniform
    weights."""
    from wirelessfl.algorithms.fedavg import FedAvg
    from wirelessfl.engine.batch import FoldedResults
    from wirelessfl.run.kinds import open_run

    raw = {"seed": 1, "data": {"dataset": "synthetic", "num_clients": 7,
                               "samples_per_client": None},
           "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.5}},
           "local": {"lr": 0.05, "batch_size": 10, "steps": 3}, "max_batch": 3}
    exp = open_run({**raw, "algorithm": {"name": "fedavg"}}).exp
    state = exp.initial_state()
    plan = exp.algorithm.configure(state)
    results = exp.algorithm.train(state, plan)
    assert isinstance(results, FoldedResults) and all(r.delta == {} for r in results)
    new, _ = exp.algorithm.apply(state)
    unfolded = exp.algorithm.train_clients(plan.starts, plan.clients, 0,
                                           buffers=state.buffers)
    n = np.array([r.num_samples for r in unfolded], float)
    for k in new.params:
        torch.testing.assert_close(new.params[k], state.params[k] - sum(
            w * r.delta[k] for w, r in zip(n / n.sum(), unfolded)), rtol=1e-5, atol=1e-7)
    # FedDyn's h needs the plain Σ_i Δ_i: it folds with uniform weights only
    dyn = open_run({**raw, "algorithm": {"name": "feddyn", "weighting": "samples"}}).exp
    s = dyn.initial_state()
    assert not isinstance(dyn.algorithm.train(s, dyn.algorithm.configure(s)), FoldedResults)
    uniform = open_run({**raw, "algorithm": {"name": "feddyn"}}).exp
    s = uniform.initial_state()
    assert isinstance(uniform.algorithm.train(s, uniform.algorithm.configure(s)), FoldedResults)
    assert FedAvg.folds_deltas and not type(dyn.algorithm).folds_deltas  # (it reads them itself)


def test_weighted_sum_reads_any_stack_layout_and_gives_the_scaled_sum():
    """Σ_i c_i d_i as one product on the stack's memory layout: row-major, column-major (a
    transposed view), 4-D, 1-D and a strided slice give the scaled sum, in the rows' shape."""
    from wirelessfl.engine.client import weighted_sum

    g = torch.Generator().manual_seed(1)
    coef = torch.rand(6, generator=g)
    stacks = {"rows": torch.randn(6, 5, 7, generator=g),
              "columns": torch.randn(6, 7, 5, generator=g).transpose(1, 2),
              "conv": torch.randn(6, 4, 3, 2, 2, generator=g),
              "bias": torch.randn(6, generator=g),
              "sliced": torch.randn(12, 5, 7, generator=g)[::2]}
    for name, d in stacks.items():
        got = weighted_sum(coef, d)
        want = (d * coef.view(-1, *[1] * (d.dim() - 1))).sum(0)
        assert got.shape == want.shape, name
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)
    assert weighted_sum(coef, stacks["columns"]).stride(0) == 1  # the stack's layout, unread
