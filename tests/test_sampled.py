"""The estimate's sampled training (``wirelessfl.engine.sampled``): a call trains its clients
until its budget is spent and extrapolates the rest by eq. (1); with budget to spare it is
the inner engine."""

import numpy as np
import pytest
import torch

from wirelessfl.data import ArrayDataset
from wirelessfl.engine.batch import ClientBatch
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import DeltaFold, LocalHParams, LocalSGD
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.engine.sampled import SampledExecutor
from wirelessfl.models import build_model
from wirelessfl.rng import Seeds


def _setup(n=12):
    g = torch.Generator().manual_seed(1)
    data = ArrayDataset(torch.randn(8 * n, 1, 6, 6, generator=g),
                        torch.randint(0, 4, (8 * n,), generator=g), 4)
    model = build_model("fcnn", (1, 6, 6), 4, seed=0, hidden=7)
    hp = LocalHParams(lr=0.1, batch_size=4, steps=3)
    sizes = [8 - (c % 3) for c in range(n)]  # unequal clients
    at = np.cumsum([0, *sizes])
    indices = tuple(np.arange(at[c], at[c + 1]) for c in range(n))
    batch = ClientBatch(np.arange(100, 100 + n), (model.params(),), np.zeros(n, np.int64),
                        indices, Seeds(2).int_seeds("local", 0, 0, last=np.arange(n)))
    return LocalSGD(model, hp), data, batch, hp, sizes


@pytest.mark.parametrize("inner", [BatchedExecutor(max_batch=4), LoopExecutor()])
def test_with_budget_to_spare_a_sampled_call_is_the_inner_engine(inner):
    update, data, batch, hp, sizes = _setup()
    want = inner.run_batch(update, data, batch, hp)
    sampled = SampledExecutor(inner, budget_s=1e9)
    got = sampled.run_batch(update, data, batch, hp)
    assert got.clients.tolist() == want.clients.tolist() and got.num_samples.tolist() == sizes
    np.testing.assert_allclose(got.losses, want.losses, rtol=1e-5)
    for k, v in want.delta_stack().items():
        torch.testing.assert_close(got.delta_stack()[k], v, rtol=1e-4, atol=1e-6)
    assert sampled.trained == sampled.asked == len(batch)
    assert sampled.extrapolated == pytest.approx(sampled.seconds) and sampled.seconds > 0
    # a fold: the round's weighted mean, as the inner engine folds it
    w = np.arange(1.0, len(batch) + 1)
    fold_in, fold_s = DeltaFold(w), DeltaFold(w)
    inner.run_batch(update, data, batch, hp, fold_in)
    SampledExecutor(inner, budget_s=1e9).run_batch(update, data, batch, hp, fold_s)
    for k, v in fold_in.mean().items():
        torch.testing.assert_close(fold_s.mean()[k], v, rtol=1e-4, atol=1e-6)
    tasks = batch.tasks()  # the per-client contract too
    per = SampledExecutor(inner, budget_s=1e9).run(update, data, tasks, hp)
    assert [r.client for r in per] == [t.client for t in tasks]


@pytest.mark.parametrize("inner", [BatchedExecutor(max_batch=8), LoopExecutor()])
def test_without_budget_a_call_trains_one_chunk_and_extrapolates_the_rest(inner):
    """Budget 0: the first chunk (an eighth of the engine's, at least one client) trains;
    every client still gets a result under its own id, and eq. (1) scales the time."""
    update, data, batch, hp, sizes = _setup()
    n, first = len(batch), max(1, (8 if isinstance(inner, BatchedExecutor) else 1) // 8)
    sampled = SampledExecutor(inner, budget_s=0.0, seed=3)
    got = sampled.run_batch(update, data, batch, hp)
    assert len(got) == n and got.clients.tolist() == batch.clients.tolist()
    assert got.num_samples.tolist() == sizes and (got.num_steps == 3).all()
    assert sampled.trained == first and sampled.asked == n
    assert sampled.extrapolated == pytest.approx(sampled.seconds * n / first)
    stack = got.delta_stack()
    assert all(torch.equal(v[0], v[c]) for v in stack.values() for c in range(n))  # stand-ins
    # its fold holds the trained clients' weighted mean for the whole call
    w = np.arange(1.0, n + 1)
    fold = DeltaFold(w)
    again = SampledExecutor(inner, budget_s=0.0, seed=3)
    again.run_batch(update, data, batch, hp, fold)
    mean = fold.mean()
    for k, v in stack.items():
        torch.testing.assert_close(mean[k], v[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True, "1"])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(ValueError, match="budget_s"):
        SampledExecutor(LoopExecutor(), budget_s=bad)


def test_a_client_s_steps_can_be_cut_and_its_seconds_scaled_to_its_own():
    """steps=1 of the clients' 3: each trained client takes one step, and eq. (1) counts its
    seconds three times; clients with no more steps than that train as they are."""
    update, data, batch, hp, _ = _setup()
    sampled = SampledExecutor(BatchedExecutor(max_batch=4), budget_s=1e9, steps=1)
    got = sampled.run_batch(update, data, batch, hp)
    assert (got.num_steps == 1).all() and sampled.trained == len(batch)
    assert sampled.extrapolated == pytest.approx(3 * sampled.seconds)
    same = SampledExecutor(BatchedExecutor(max_batch=4), budget_s=1e9, steps=5)
    assert (same.run_batch(update, data, batch, hp).num_steps == 3).all()
    assert same.extrapolated == pytest.approx(same.seconds)
    with pytest.raises(ValueError, match="steps"):
        SampledExecutor(LoopExecutor(), steps=0)


def test_a_run_refuses_an_executor_wrap_that_is_not_callable():
    from wirelessfl.errors import ConfigError
    from wirelessfl.run.kinds import open_run

    with pytest.raises(ConfigError, match="executor_wrap must be a callable"):
        open_run({"rounds": 1, "data": {"dataset": "synthetic", "num_clients": 4}},
                 executor_wrap=3)
