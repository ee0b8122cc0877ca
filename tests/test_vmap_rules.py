"""The direct route to the layers' vmap rules gives PyTorch's generic route, bit for bit."""

import pytest
import torch
from torch.func import functional_call, grad, vmap

from wirelessfl.models import build_model, layers, noise, vmap_rules


class _Counted(vmap_rules.VmapInfo):
    """vmap_rules' VmapInfo, counting: only the direct route builds one."""

    made = 0

    def __new__(cls, *args, **kwargs):
        _Counted.made += 1
        return super().__new__(cls, *args, **kwargs)


def _route(monkeypatch, direct: bool) -> None:
    monkeypatch.setattr(vmap_rules, "VmapInfo", _Counted)
    monkeypatch.setattr(vmap_rules, "peek_interpreter_stack",
                        torch._C._functorch.peek_interpreter_stack if direct else None)
    _Counted.made = 0


def _stacked_step(model, clients: int, x: torch.Tensor, shared: bool):
    """Outputs of a vmapped forward and the gradients of their sum (stacked params, input)."""
    params = {k: (v.detach() if shared and k.endswith("weight") else
                  torch.stack([v.detach() * (1 + 0.1 * c) for c in range(clients)]))
              for k, v in model.named_parameters()}
    params = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    x = x.clone().requires_grad_(True)
    keys = torch.arange(clients, dtype=torch.int64) * 7919

    def one(p, xb, key):
        with noise.client_noise(key):
            return functional_call(model, p, (xb,))

    dims = ({k: None if v.dim() == dict(model.named_parameters())[k].dim() else 0
             for k, v in params.items()}, 0, 0)
    out = vmap(one, in_dims=dims, randomness="different")(params, x, keys)
    grads = torch.autograd.grad(out.square().sum(), [*params.values(), x])
    return out, grads


@pytest.mark.parametrize("name, shape, shared", [
    ("fcnn", (1, 28, 28), False), ("fcnn", (1, 28, 28), True), ("mlp", (1, 28, 28), False),
    ("lenet5", (1, 28, 28), False), ("lenet5", (1, 28, 28), True)])
def test_direct_route_is_the_generic_route_bit_for_bit(monkeypatch, name, shape, shared):
    """Linear (stacked and shared weights), Conv2d, max pooling and dropout masks under vmap.

    Forward outputs and the gradients of every stacked parameter and of the input equal
    those of ``Function.apply``'s generic route exactly, and the direct route was taken.
    """
    model = build_model(name, shape, 10, seed=3)
    model.train()  # dropout on: the masks' stacked call too
    x = torch.randn(3, 5, *shape, generator=torch.Generator().manual_seed(1))
    _route(monkeypatch, direct=False)
    want = _stacked_step(model, 3, x, shared)
    assert _Counted.made == 0
    _route(monkeypatch, direct=True)
    got = _stacked_step(model, 3, x, shared)
    assert _Counted.made >= 2  # the layers went the direct route
    assert torch.equal(got[0], want[0])
    for g, w in zip(got[1], want[1]):
        assert torch.equal(g, w)


def test_other_transforms_and_no_transform_take_the_generic_route(monkeypatch):
    """Nested vmap, grad over vmap and plain calls give PyTorch's numbers."""
    lin = layers.Linear(6, 4)
    w = torch.randn(2, 3, 4, 6)
    x = torch.randn(2, 3, 5, 6)

    def nested():
        f = vmap(vmap(lambda w, x: functional_call(lin, {"weight": w, "bias": lin.bias}, (x,))))
        return f(w, x)

    def grad_of_vmap():
        def loss(w0):
            f = vmap(lambda x: functional_call(lin, {"weight": w0, "bias": lin.bias}, (x,)))
            return f(x[0]).square().sum()
        return grad(loss)(w[0, 0])

    def plain():
        return lin(x[0, 0])

    for fn in (nested, grad_of_vmap, plain):
        _route(monkeypatch, direct=False)
        want = fn()
        _route(monkeypatch, direct=True)
        assert torch.equal(fn(), want), fn.__name__
    _route(monkeypatch, direct=True)
    plain()
    assert _Counted.made == 0  # no transform: Function.apply itself


def test_nothing_batched_at_the_level_falls_back():
    """A rule whose operands are all unbatched at the current level is not called."""
    called = []

    def rule(info, in_dims, *args):
        called.append(in_dims)
        return args[0] * 2, 0

    out = vmap(lambda x: vmap_rules.call_rule(rule, (torch.ones(2),), lambda t: t + 1)
               + x)(torch.zeros(3, 2))
    assert called == [] and torch.equal(out, torch.full((3, 2), 2.0))
    out = vmap(lambda x: vmap_rules.call_rule(rule, (x,), lambda t: t + 1))(torch.ones(3, 2))
    assert called == [(0,)] and torch.equal(out, torch.full((3, 2), 2.0))
