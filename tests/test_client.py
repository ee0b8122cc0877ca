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
    for pos in batch_schedule(len(idx), hp, np.random.default_rng(11)):
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
