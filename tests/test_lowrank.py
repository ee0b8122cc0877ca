"""Linear weights kept as a shared start plus low-rank SGD steps (wirelessfl.models.lowrank)."""

import numpy as np
import pytest
import torch

from wirelessfl.data import ArrayDataset
from wirelessfl.engine import batched
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientTask, DeltaFold, LocalHParams, LocalSGD
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.errors import ConfigError
from wirelessfl.models import build_model
from wirelessfl.models.layers import sgd_in_backward
from wirelessfl.models.lowrank import LowRankDelta, LowRankWeight
from wirelessfl.models.zoo import FCNN
from wirelessfl.run.config import resolve


def _relative(a, b):
    return float((a - b).norm() / b.norm())


def test_low_rank_steps_give_the_stacked_weights_forward_gradient_and_delta():
    """Eq. (1): after recorded steps, forward, input gradient and Δ equal those of the
    explicitly stepped stacked weights; a weight used twice a step steps with both uses'
    factors, which are the steps' own tensors (nothing copied)."""
    g = torch.Generator().manual_seed(0)
    n, b, cols, out, lr = 5, 4, 12, 9, 0.1
    w0 = torch.randn(out, cols, generator=g, dtype=torch.float64)
    low = LowRankWeight(w0, n, lr=lr)
    dense = w0.expand(n, out, cols).clone()
    for _ in range(3):
        x1, x2 = (torch.randn(n, b, cols, generator=g, dtype=torch.float64) for _ in range(2))
        g1, g2 = (torch.randn(n, b, out, generator=g, dtype=torch.float64) for _ in range(2))
        for x in (x1, x2):
            torch.testing.assert_close(low.forward(x, low.uses), torch.bmm(x, dense.transpose(1, 2)))
        torch.testing.assert_close(low.input_grad(g1, low.uses), torch.bmm(g1, dense))
        low.record(x1, g1)
        low.record(x2, g2)
        dense -= lr * (torch.bmm(g1.transpose(1, 2), x1) + torch.bmm(g2.transpose(1, 2), x2))
    assert low.rank == 6 * b and low.uses == 6 and low.x[-1] is x2 and low.g[-1] is g2
    delta = low.delta()
    expected = w0 - dense
    assert delta.shape == expected.shape
    torch.testing.assert_close(delta.dense(), expected)
    coef = torch.rand(n, generator=g, dtype=torch.float64)
    torch.testing.assert_close(delta.weighted_sum(coef), (coef[:, None, None] * expected).sum(0))
    index = torch.tensor([3, 0])
    torch.testing.assert_close(delta.index_select(0, index).dense(), expected[index])
    with pytest.raises(ValueError, match="dim 0"):
        delta.index_select(1, index)
    with pytest.raises(ValueError, match="2-D"):
        LowRankWeight(torch.zeros(2, 3, 4), 2, lr)
    with pytest.raises(ValueError, match="do not stack"):
        low.record(x1[:2], g1[:2])
    with pytest.raises(ValueError, match="do not stack"):
        LowRankDelta([torch.zeros(2, 3, 4)], [torch.zeros(3, 3, 4)])
    with pytest.raises(ValueError, match="do not stack"):
        LowRankDelta([], [])


def test_a_linear_layer_under_vmap_reads_and_steps_a_registered_low_rank_weight():
    """``sgd_in_backward(low_rank=...)``: a stacked client's linear layer computes with
    start + factors, its backward records the step (and names it stepped), and the input
    gradient is that of the client's own weight."""
    from torch.func import functional_call, vmap

    model = build_model("mlp", (1, 28, 28), 10, seed=0)
    params = model.params()
    n, b, lr = 3, 4, 0.05
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(n, b, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (n, b), generator=gen)
    stacked = {k: v.expand(n, *v.shape).clone() for k, v in params.items()}
    low = LowRankWeight(params["fc2.weight"].clone(), n, lr=lr)
    mixed = {**stacked, "fc2.weight": low.start}

    def loss(p, xb, yb):
        return torch.nn.functional.cross_entropy(functional_call(model, p, (xb,)), yb,
                                                 reduction="sum")

    def grads(tree, dims, low_rank=None):
        leaves = {k: v.detach().clone().requires_grad_(True) for k, v in tree.items()}
        with (sgd_in_backward({}, lr, low_rank=low_rank) if low_rank is None else
              sgd_in_backward({k: leaves[k] for k in low_rank}, lr, low_rank=low_rank)) as stepped:
            total = vmap(loss, in_dims=(dims, 0, 0))(leaves, x, y).sum()
            out = torch.autograd.grad(total, list(leaves.values()), allow_unused=True)
        return dict(zip(leaves, out)), stepped

    dense, _ = grads(stacked, 0)  # every client's own weights: every gradient
    low.start = low.start.detach().clone().requires_grad_(True)
    mixed["fc2.weight"] = low.start
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in mixed.items()}
    leaves["fc2.weight"] = low.start
    with sgd_in_backward({"fc2.weight": low.start}, lr, low_rank={"fc2.weight": low}) as stepped:
        total = vmap(loss, in_dims=({k: None if k == "fc2.weight" else 0 for k in leaves}, 0, 0))(
            leaves, x, y).sum()
        got = dict(zip(leaves, torch.autograd.grad(total, list(leaves.values()),
                                                   allow_unused=True)))
    assert stepped == {"fc2.weight"} and got["fc2.weight"] is None and low.rank == b
    for k in ("fc1.bias", "fc1.weight", "fc2.bias", "fc3.weight"):  # fc1's pass fc2's input
        torch.testing.assert_close(got[k], dense[k], rtol=1e-5, atol=1e-6)
    stepped_dense = stacked["fc2.weight"] - lr * dense["fc2.weight"]
    torch.testing.assert_close(low.start.detach() - low.delta().dense(), stepped_dense,
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="2-D entries"):
        with sgd_in_backward(stacked, lr, low_rank={"fc2.weight": low}):
            pass


def _data(n=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ArrayDataset(torch.randn(n, 1, 28, 28, generator=g),
                        torch.randint(0, 10, (n,), generator=g), 10)


def _round(executor, name, sizes, hp, fold=False, start=None, seed=0):
    model = build_model(name, (1, 28, 28), 10, seed=seed)
    params = start if start is not None else model.params()
    offset = np.cumsum((0,) + tuple(sizes))
    tasks = [ClientTask(c, params, np.arange(offset[c], offset[c + 1]), seed=7 + c)
             for c in range(len(sizes))]
    f = DeltaFold([float(s) for s in sizes]) if fold else None
    results = executor.run(LocalSGD(model, hp), _data(), tasks, hp, f)
    return f.mean() if fold else {k: torch.stack([r.delta[k] for r in results])
                                  for k in results[0].delta}


@pytest.mark.parametrize("name", ["fcnn", "mlp"])
@pytest.mark.parametrize("fold", [True, False], ids=["fold", "results"])
def test_low_rank_rounds_equal_the_stacked_engine_and_the_loop(name, fold):
    """FedAvg-style rounds (one start, 3 steps of batch 6, dropout on the FCNN): the engine
    keeps the wide linear weights low-rank, and the round's fold or each client's Δ equals
    the stacked engine's and the loop's to 1e-5 relative."""
    hp = LocalHParams(lr=0.05, batch_size=6, steps=3)
    sizes = [18, 24, 18, 30, 18, 12]
    auto, off = BatchedExecutor(), BatchedExecutor(low_rank="off")
    low = _round(auto, name, sizes, hp, fold)
    assert auto.low_ranked >= 1 and off.low_ranked == 0
    stacked = _round(off, name, sizes, hp, fold)
    loop = _round(LoopExecutor(), name, sizes, hp, fold)
    for k in loop:
        assert _relative(low[k], loop[k]) < 1e-5, k
        assert _relative(low[k], stacked[k]) < 1e-5, k


class _OwnFCNN(FCNN):
    """The library's FCNN as a class of one's own (not a library model)."""


def test_low_rank_only_where_it_applies():
    """Kept stacked: clients taking unequal numbers of steps, steps whose rows exceed the
    share of the layer, a rule with a drift (FedProx), clients with their own starts, a
    model class of one's own; and ``low_rank: off`` in a config reaches the engine."""
    from wirelessfl.algorithms.fedprox import ProximalSGD

    model = build_model("fcnn", (1, 28, 28), 10, seed=0)
    hp = LocalHParams(lr=0.05, batch_size=6, steps=3)
    data = _data()

    def used(update, tasks, hp=hp):
        ex = BatchedExecutor()
        ex.run(update, data, tasks, hp)
        return ex.low_ranked

    start = model.params()  # one tensor per parameter for every client (FedAvg's model)
    same = [ClientTask(c, start, np.arange(18 * c, 18 * c + 18), seed=c) for c in range(4)]
    assert used(LocalSGD(model, hp), same) == 1  # fc1 (300 units); fc2 has 10 outputs
    assert used(ProximalSGD(model, hp, 0.1), same) == 0
    own = [ClientTask(c, {k: v.clone() for k, v in model.params().items()},
                      np.arange(18 * c, 18 * c + 18), seed=c) for c in range(4)]
    assert used(LocalSGD(model, hp), own) == 0
    epochs = LocalHParams(lr=0.05, batch_size=6, steps=None, epochs=1)
    uneven = [ClientTask(c, start, np.arange(20 * c, 20 * c + 6 * (c + 1)), seed=c)
              for c in range(4)]
    assert used(LocalSGD(model, epochs), uneven, epochs) == 0
    wide = LocalHParams(lr=0.05, batch_size=60, steps=3)  # 180 rows > 0.5 * 300
    big = [ClientTask(c, start, np.arange(100 * c, 100 * c + 100), seed=c) for c in range(4)]
    assert used(LocalSGD(model, wide), big, wide) == 0
    assert used(LocalSGD(model, hp), big) == 1
    mine = _OwnFCNN((1, 28, 28), 10)  # a model of one's own might read a weight directly
    assert used(LocalSGD(mine, hp), [ClientTask(c, mine.params(), t.indices, seed=c)
                                     for c, t in enumerate(same)]) == 0
    cfg = resolve({"low_rank": "off"})
    assert cfg.low_rank == "off" and resolve({"low_rank": False}).low_rank == "off"
    assert resolve({"low_rank": True}).low_rank == "on"
    with pytest.raises(ConfigError, match="low_rank"):
        resolve({"low_rank": "sometimes"})
    with pytest.raises(ValueError, match="low_rank"):
        BatchedExecutor(low_rank="always")
    assert set(batched.LOW_RANK_MODES) == {"auto", "on", "off"}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("fold", [True, False], ids=["fold", "results"])
def test_low_rank_on_a_gpu_only_when_on_and_with_the_numbers_of_the_cpu(fold):
    """``auto`` keeps a GPU's weights stacked; ``on`` keeps them low-rank there, with the
    numbers of the stacked GPU engine and of the CPU's loop to 1e-5 relative."""
    hp = LocalHParams(lr=0.05, batch_size=6, steps=3)
    sizes = [18, 24, 18, 30, 18, 12]
    auto, on, off = (BatchedExecutor("cuda", low_rank=m) for m in ("auto", "on", "off"))
    _round(auto, "fcnn", sizes, hp, fold)
    low = {k: v.cpu() for k, v in _round(on, "fcnn", sizes, hp, fold).items()}
    stacked = {k: v.cpu() for k, v in _round(off, "fcnn", sizes, hp, fold).items()}
    assert auto.low_ranked == 0 and on.low_ranked >= 1 and off.low_ranked == 0
    loop = _round(LoopExecutor(), "fcnn", sizes, hp, fold)
    for k in loop:
        assert _relative(low[k], loop[k]) < 1e-5, k
        assert _relative(low[k], stacked[k]) < 1e-5, k


def test_a_low_rank_delta_s_row_norms_are_its_dense_rows():
    """‖Δ_i‖²_F from the factors' Gram matrices equals the dense stack's, in float64."""
    from wirelessfl.models.lowrank import LowRankDelta

    gen = torch.Generator().manual_seed(3)
    g = [torch.randn(4, 3, 6, generator=gen), torch.randn(4, 2, 6, generator=gen)]
    x = [torch.randn(4, 3, 9, generator=gen), torch.randn(4, 2, 9, generator=gen)]
    delta = LowRankDelta(g, x, scale=0.07)
    want = delta.dense().double().reshape(4, -1).pow(2).sum(1)
    torch.testing.assert_close(delta.row_norms_sq(), want, rtol=1e-6, atol=1e-12)
