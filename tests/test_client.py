import numpy as np
import pytest
import torch

from wirelessfl.data import ArrayDataset
from wirelessfl.engine.client import ClientError, ClientTask, LocalHParams, LocalSGD, batch_schedule
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.models import build_model


def _data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ArrayDataset(torch.randn(n, 20, generator=g), torch.randint(0, 4, (n,), generator=g), 4)


def test_batch_schedule_epochs_cover_and_steps():
    rng = np.random.default_rng(0)
    sched = batch_schedule(10, LocalHParams(batch_size=4, steps=6), rng)
    assert [len(b) for b in sched] == [4, 4, 2, 4, 4, 2]
    assert sorted(np.concatenate(sched[:3]).tolist()) == list(range(10))
    sched = batch_schedule(10, LocalHParams(batch_size=4, epochs=3, drop_last=True), rng)
    assert [len(b) for b in sched] == [4, 4] * 3  # FedAST: floor(n/B) batches per epoch
    assert batch_schedule(0, LocalHParams(), rng) == []
    for seed in (0, 7, 2**62 + 3):  # the default (counter) order, from a client's seed
        sched = batch_schedule(10, LocalHParams(batch_size=4, steps=6), seed)
        assert [len(b) for b in sched] == [4, 4, 2, 4, 4, 2]
        for epoch in (sched[:3], sched[3:]):
            assert sorted(np.concatenate(epoch).tolist()) == list(range(10))


def test_counter_orders_are_uniform_permutations_independent_across_seeds_and_epochs():
    """Monte Carlo against the closed form of a uniform permutation: over 20,000 client seeds
    each of 5 positions comes first 1/5 of the time (chi-square, 4 dof), each ordered pair is
    1/2, and an epoch's order does not predict the next one's (first places agree 1/5)."""
    from scipy import stats

    from wirelessfl.engine.schedule import epoch_orders

    count, n = 20_000, 5
    seeds = np.random.default_rng(1).integers(0, 2**63 - 1, count)
    pool = epoch_orders(seeds, np.full(count, 2), np.full(count, n)).reshape(count, 2, n)
    assert (np.sort(pool, axis=2) == np.arange(n)).all()  # every epoch a permutation
    first = np.bincount(pool[:, 0, 0], minlength=n)
    assert stats.chisquare(first).pvalue > 1e-3
    pair = (np.argsort(pool[:, 0], axis=1)[:, 1] < np.argsort(pool[:, 0], axis=1)[:, 3]).mean()
    assert abs(pair - 0.5) < 4 * 0.5 / np.sqrt(count)
    same = (pool[:, 0, 0] == pool[:, 1, 0]).mean()
    assert abs(same - 1 / n) < 4 * np.sqrt(0.16 / count)
    # adjacent seeds (a round's clients) give unrelated orders
    near = epoch_orders(np.arange(count), np.ones(count, np.int64), np.full(count, n)).reshape(count, n)
    assert stats.chisquare(np.bincount(near[:, 0], minlength=n)).pvalue > 1e-3
    assert abs((near[1:, 0] == near[:-1, 0]).mean() - 1 / n) < 4 * np.sqrt(0.16 / count)


def test_counter_orders_cost_no_python_per_client():
    """One round's orders for 16 or 1,024 clients make the same number of Python calls (the
    pcg64 order makes a generator and a shuffle per client)."""
    import cProfile
    import pstats

    from wirelessfl.engine.schedule import epoch_orders

    def calls(count, order):
        prof = cProfile.Profile()
        prof.runcall(epoch_orders, np.arange(count), np.full(count, 2), np.full(count, 30), order)
        return pstats.Stats(prof).total_calls

    assert calls(1024, "counter") == calls(16, "counter")
    assert calls(1024, "pcg64") > calls(16, "pcg64") + 1000


def test_a_run_folder_written_before_counter_orders_resumes_with_its_own(tmp_path):
    """A stored config without ``batch_order`` (written before 2026-11-26) reads as pcg64, the
    order it ran with; new runs say counter, and the two are keyed apart."""
    from wirelessfl.run.config import resolve
    from wirelessfl.run.configtypes import key_view
    from wirelessfl.run.key_schema import as_made

    old = {"local": {"lr": 0.1}, "tasks": [{"local": {}, "sync_local": None}]}
    made = as_made(old)
    assert made["local"]["batch_order"] == "pcg64" == made["tasks"][0]["local"]["batch_order"]
    assert as_made({"local": {"batch_order": "counter"}})["local"]["batch_order"] == "counter"
    cfg = {"algorithm": {"name": "fedavg"}}
    new, before = (key_view(resolve({**cfg, "local": {"batch_order": o}}))["local"]
                   for o in ("counter", "pcg64"))
    assert new["batch_order"] == "counter" and "batch_order" not in before  # old keys kept
    with pytest.raises(ValueError, match="batch_order"):
        LocalHParams(batch_order="random")


@pytest.mark.parametrize("opt,extra", [("sgd", {}), ("sgd", {"momentum": 0.9, "weight_decay": 1e-3}),
                                       ("adam", {})])
def test_local_training_matches_torch_optim(opt, extra):
    data = _data()
    model = build_model("fcnn", (20,), 4, seed=0, hidden=16, dropout=0.0)
    hp = LocalHParams(lr=0.05, batch_size=8, steps=5, optimizer=opt, **extra)
    idx = np.arange(10, 50)
    start = model.params()
    [res] = LoopExecutor().run(LocalSGD(model, hp), data, [ClientTask(3, start, idx, seed=11)], hp)
    # reference: a module with torch.optim on the same batches
    ref = build_model("fcnn", (20,), 4, seed=0, hidden=16, dropout=0.0)
    if opt == "sgd":
        o = torch.optim.SGD(ref.parameters(), lr=hp.lr, momentum=hp.momentum,
                            weight_decay=hp.weight_decay)
    else:
        o = torch.optim.Adam(ref.parameters(), lr=hp.lr, betas=hp.betas, eps=hp.eps)
    for pos in batch_schedule(len(idx), hp, 11):
        b = torch.as_tensor(idx[pos])
        o.zero_grad()
        torch.nn.functional.cross_entropy(ref(data.x[b]), data.y[b]).backward()
        o.step()
    for k, v in ref.named_parameters():
        torch.testing.assert_close(start[k] - res.delta[k], v.detach(), rtol=1e-5, atol=1e-6)
    assert res.num_steps == 5 and res.num_samples == 40


def test_ragged_clients_and_client_without_data():
    data = _data()
    model = build_model("linear", (20,), 4, seed=0)
    hp = LocalHParams(lr=0.1, batch_size=8, steps=3)
    tasks = [ClientTask(0, model.params(), np.arange(5), seed=1),
             ClientTask(1, model.params(), np.zeros(0, np.int64), seed=2)]
    res = LoopExecutor().run(LocalSGD(model, hp), data, tasks, hp)
    assert res[0].num_steps == 3 and res[1].num_steps == 0
    assert all(torch.count_nonzero(v) == 0 for v in res[1].delta.values())
    assert np.isnan(res[1].loss)


def test_client_error_names_client_and_stage():
    data = _data()
    model = build_model("linear", (20,), 4, seed=0)
    hp = LocalHParams(steps=1)
    bad = {"fc.weight": torch.zeros(4, 7), "fc.bias": torch.zeros(4)}
    with pytest.raises(ClientError, match="client 9 failed in client_step"):
        LoopExecutor().run(LocalSGD(model, hp), data, [ClientTask(9, bad, np.arange(8), 0)], hp)


def test_dropout_is_seeded_per_task():
    data = _data()
    model = build_model("fcnn", (20,), 4, seed=0, hidden=16, dropout=0.5)
    hp = LocalHParams(steps=2, batch_size=8)
    run = lambda s: LoopExecutor().run(LocalSGD(model, hp), data,  # noqa: E731
                                       [ClientTask(0, model.params(), np.arange(32), s)], hp)[0]
    a, b, c = run(1), run(1), run(2)
    assert all(torch.equal(a.delta[k], b.delta[k]) for k in a.delta)
    assert not all(torch.equal(a.delta[k], c.delta[k]) for k in a.delta)
