"""Similarity-weighted initial models (docs/papers/dynamic_clients.md §2.2-2.5): the arithmetic."""

import pytest
import torch
import torch.nn.functional as F

from wirelessfl.algorithms.dynamic.initial_model import (
    SessionStore,
    blend,
    fingerprint,
    pilot_model,
    similarity_weights,
)


def _model(seed):
    g = torch.Generator().manual_seed(seed)
    return {"fc.weight": torch.randn(10, 784, generator=g), "fc.bias": torch.randn(10, generator=g),
            "bn.running_mean": torch.randn(10, generator=g),
            "bn.num_batches_tracked": torch.tensor(seed)}


def test_pilot_model_is_the_mean_of_the_pilot_sessions_final_models():
    finals = [_model(s) for s in range(3)]
    pilot = pilot_model(finals)
    torch.testing.assert_close(pilot["fc.weight"],
                               (finals[0]["fc.weight"] + finals[1]["fc.weight"]
                                + finals[2]["fc.weight"]) / 3)
    assert int(pilot["bn.num_batches_tracked"]) == 2   # integers: the most recent


def test_r_zero_is_the_average_and_one_stored_model_is_every_rule():
    store = SessionStore()
    for s in range(3):
        store.add(_model(s), {"fc.weight": torch.randn(10, 784), "fc.bias": torch.randn(10)})
    fp = {"fc.weight": torch.randn(10, 784), "fc.bias": torch.randn(10)}
    init, alpha = store.initial_model(fp, scale=0.0)
    avg = store.average()
    assert torch.equal(alpha, torch.full((3,), 1 / 3, dtype=torch.float64))
    assert all(torch.equal(init[k], avg[k]) for k in avg)
    one = SessionStore()
    one.add(_model(7), fp)
    init, alpha = one.initial_model({k: -v for k, v in fp.items()}, scale=10.0)
    assert alpha.tolist() == [1.0]
    assert all(torch.equal(init[k], _model(7)[k]) for k in init)
    assert all(torch.equal(one.average()[k], _model(7)[k]) for k in init)


@pytest.fixture(scope="module")
def groups(fmnist):
    """Fingerprints of a linear model from one pilot on Fashion-MNIST group A (labels 0-4)
    and group B (5-9) data, 5 SGD steps of batch 128 each (§2.3's setting)."""
    train = fmnist.train
    pilot = {"fc.weight": torch.zeros(10, 784), "fc.bias": torch.zeros(10)}

    def fp(labels, offset):
        idx = torch.nonzero(torch.isin(train.y, torch.tensor(labels))).flatten()[offset:]
        w = {k: v.clone().requires_grad_(True) for k, v in pilot.items()}
        for step in range(5):
            b = idx[128 * step:128 * (step + 1)]
            loss = F.cross_entropy(train.x[b].flatten(1) @ w["fc.weight"].T + w["fc.bias"],
                                   train.y[b])
            gw, gb = torch.autograd.grad(loss, [w["fc.weight"], w["fc.bias"]])
            w = {"fc.weight": (w["fc.weight"] - 0.05 * gw).detach().requires_grad_(True),
                 "fc.bias": (w["fc.bias"] - 0.05 * gb).detach().requires_grad_(True)}
        return fingerprint(w, pilot, ["fc.weight", "fc.bias"])

    a, b = [0, 1, 2, 3, 4], [5, 6, 7, 8, 9]
    return {"A1": fp(a, 0), "B": fp(b, 0), "A2": fp(a, 5000)}


@pytest.mark.parametrize("similarity,literal", [("two_norm", False), ("inner_product", False),
                                                ("two_norm", True)])
def test_weights_sum_to_one_and_favour_the_session_with_the_same_labels(groups, similarity,
                                                                        literal):
    alpha = similarity_weights(groups["A2"], [groups["B"], groups["A1"]], 10.0, similarity,
                               literal)
    assert float(alpha.sum()) == pytest.approx(1.0, abs=1e-12)
    assert alpha[1] > 0.9 > 0.1 > alpha[0]       # the group-A session dominates at R = 10
    flat = similarity_weights(groups["A2"], [groups["B"], groups["A1"]], 0.0, similarity,
                              literal)
    assert flat.tolist() == [0.5, 0.5]


def test_blend_refuses_bad_weights_and_keeps_integer_buffers_of_the_latest():
    models = [_model(1), _model(2)]
    out = blend(models, torch.tensor([0.25, 0.75], dtype=torch.float64))
    torch.testing.assert_close(out["fc.bias"],
                               0.25 * models[0]["fc.bias"] + 0.75 * models[1]["fc.bias"])
    assert int(out["bn.num_batches_tracked"]) == 2
    for bad in ([0.5, 0.6], [-0.5, 1.5], [1.0]):
        with pytest.raises(ValueError):
            blend(models, torch.tensor(bad, dtype=torch.float64))


def test_store_keeps_the_last_sessions_on_the_cpu_and_counts_its_bytes():
    store = SessionStore(history=2)
    for s in range(4):
        store.add(_model(s), {"fc.weight": torch.full((10, 784), float(s))})
    assert len(store.models) == len(store.fingerprints) == 2
    assert int(store.models[0]["bn.num_batches_tracked"]) == 2           # FIFO
    assert float(store.fingerprints[0]["fc.weight"][0, 0]) == 2.0
    model_bytes = sum(v.numel() * v.element_size() for v in _model(0).values())
    assert store.nbytes() == 2 * model_bytes + 2 * 10 * 784 * 4        # S x (model + G)
    assert all(v.device.type == "cpu" for m in store.models for v in m.values())
    with pytest.raises(ValueError):
        SessionStore(history=0)
