"""The stackable layers compute nn.Linear / nn.Conv2d and their gradients, alone and under vmap."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from wirelessfl.models import layers

CASES = {
    "linear": (lambda: (layers.Linear(12, 5), nn.Linear(12, 5)), (7, 12)),
    "linear-nobias": (lambda: (layers.Linear(12, 5, bias=False), nn.Linear(12, 5, bias=False)),
                      (3, 4, 12)),
    "conv": (lambda: (layers.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 3, padding=1)),
             (2, 3, 9, 9)),
    "conv-stride-nobias": (lambda: (layers.Conv2d(3, 4, 3, 2, bias=False),
                                    nn.Conv2d(3, 4, 3, 2, bias=False)), (2, 3, 9, 9)),
}


def _pair(case: str):
    make, shape = CASES[case]
    torch.manual_seed(0)
    ours, ref = make()
    ref.load_state_dict(ours.state_dict())
    return ours, ref, shape


def _grads(module: nn.Module, params: dict, x: torch.Tensor):
    leaf = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    xl = x.detach().requires_grad_(True)
    out = functional_call(module, leaf, (xl,))
    grads = torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(),
                                [xl, *leaf.values()])
    return out, grads


@pytest.mark.parametrize("case", list(CASES))
def test_same_output_and_gradients_as_torch(case):
    ours, ref, shape = _pair(case)
    x = torch.randn(shape)
    params = dict(ref.named_parameters())
    (y1, g1), (y2, g2) = _grads(ours, params, x), _grads(ref, params, x)
    torch.testing.assert_close(y1, y2)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)


@pytest.fixture(params=["grouped", "gemm"])
def conv_rule(request, monkeypatch):
    """Each stacked-convolution rule (:data:`layers.STACKED_CONV`) as the CPU's."""
    monkeypatch.setitem(layers.STACKED_CONV, "cpu", request.param)
    return request.param


@pytest.mark.parametrize("case", list(CASES))
def test_vmap_over_stacked_clients_equals_each_client(case, conv_rule):
    ours, ref, shape = _pair(case)
    clients = 4
    stacked = {k: torch.stack([v.detach() + 0.1 * torch.randn_like(v) for _ in range(clients)])
               .requires_grad_(True) for k, v in ref.named_parameters()}
    x = torch.randn(clients, *shape)

    def loss(p, xb):
        return functional_call(ours, p, (xb,)).square().sum()

    grads = torch.autograd.grad(vmap(loss)(stacked, x).sum(), list(stacked.values()))
    for c in range(clients):
        one = {k: v[c].detach().requires_grad_(True) for k, v in stacked.items()}
        expect = torch.autograd.grad(functional_call(ref, one, (x[c],)).square().sum(),
                                     list(one.values()))
        for g, e in zip(grads, expect):
            torch.testing.assert_close(g[c], e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", list(CASES))
def test_vmap_over_clients_sharing_one_weight_equals_each_client(case, conv_rule):
    """An unbatched weight (every client's received model) under vmap: each client's output,
    and the shared weight's gradient summed over the clients."""
    ours, ref, shape = _pair(case)
    clients = 3
    shared = {k: v.detach().clone().requires_grad_(True) for k, v in ref.named_parameters()}
    x = torch.randn(clients, *shape)
    out = vmap(lambda xb: functional_call(ours, shared, (xb,)))(x)
    grads = torch.autograd.grad(out.square().sum(), list(shared.values()))
    each = torch.stack([functional_call(ref, shared, (x[c],)) for c in range(clients)])
    torch.testing.assert_close(out, each, rtol=1e-5, atol=1e-5)
    expect = torch.autograd.grad(each.square().sum(), list(shared.values()))
    for g, e in zip(grads, expect):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride, padding", [(1, 2), (2, 1), (1, 0)])
def test_the_gemm_and_grouped_rules_are_the_same_convolution(stride, padding):
    """In float64, against one F.conv2d per client: outputs and all three gradients."""
    gen = torch.Generator().manual_seed(stride * 10 + padding)
    x = torch.randn(5, 3, 4, 11, 11, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 6, 4, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    each = torch.stack([F.conv2d(x[c], w[c], b[c], stride, padding) for c in range(5)])
    pair = (stride, stride), (padding, padding)
    for got in (layers.grouped_conv2d(x, w, b, *pair).transpose(0, 1),
                layers.gemm_conv2d(x, w, b, *pair), layers.gemm_conv2d(x, w, None, *pair, False)
                + b[:, None, :, None, None]):
        torch.testing.assert_close(got, each, rtol=1e-12, atol=1e-12)
        weight = torch.linspace(-1, 1, got.numel(), dtype=torch.float64).view_as(got)
        for g, e in zip(torch.autograd.grad((got * weight).sum(), [x, w, b]),
                        torch.autograd.grad((each * weight).sum(), [x, w, b],
                                            retain_graph=True)):
            torch.testing.assert_close(g, e, rtol=1e-11, atol=1e-11)


def test_a_gemm_convolution_s_operators_do_not_grow_with_clients(monkeypatch):
    """The aten operators of a stacked step, 2 against 9 clients (on CUDA each is a launch)."""
    from torch.profiler import ProfilerActivity, profile
    monkeypatch.setitem(layers.STACKED_CONV, "cpu", "gemm")
    conv = layers.Conv2d(2, 3, 3, padding=1)
    counts = []
    for n in (2, 9):
        w = conv.weight.detach().expand(n, -1, -1, -1, -1).clone().requires_grad_()
        b = conv.bias.detach().expand(n, -1).clone().requires_grad_()
        x = torch.randn(n, 4, 2, 8, 8)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            y = vmap(lambda w, b, x: functional_call(conv, {"weight": w, "bias": b}, (x,)))(w, b, x)
            torch.autograd.grad(y.square().sum(), [w, b])
        counts.append(sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")))
    assert counts[0] == counts[1]


def test_a_gemm_rule_takes_the_grouped_one_past_its_patch_budget(monkeypatch):
    monkeypatch.setitem(layers.STACKED_CONV, "cpu", "gemm")
    monkeypatch.setattr(layers, "GEMM_MAX_PATCH_BYTES", 0)
    called = []
    monkeypatch.setattr(layers, "gemm_conv2d", lambda *a: called.append(a))
    conv = layers.Conv2d(2, 3, 3)
    w = conv.weight.detach().expand(3, -1, -1, -1, -1)
    vmap(lambda w, x: functional_call(conv, {"weight": w, "bias": conv.bias}, (x,)))(
        w, torch.randn(3, 1, 2, 5, 5))
    assert not called


def test_conv_refuses_what_it_does_not_stack():
    with pytest.raises(ValueError, match="groups 1"):
        layers.Conv2d(4, 4, 3, groups=2)


def test_dropout_keeps_the_expected_fraction_and_scale():
    from wirelessfl.models.zoo import dropout

    torch.manual_seed(0)
    y = dropout(torch.ones(200_000), 0.3, True)
    assert abs(float((y == 0).float().mean()) - 0.3) < 0.005
    assert torch.allclose(y[y != 0], torch.tensor(1 / 0.7))
    assert torch.equal(dropout(torch.ones(5), 0.3, False), torch.ones(5))
    assert torch.equal(dropout(torch.ones(5), 1.0, True), torch.zeros(5))
    x = torch.ones(3, requires_grad=True)
    F.relu(dropout(x, 0.5, True)).sum().backward()
    assert set(x.grad.tolist()) <= {0.0, 2.0}


def test_group_norm_matches_torch_and_runs_under_vmap():
    from torch.func import vmap

    from wirelessfl.models.layers import GroupNorm

    g = GroupNorm(2, 8)
    torch.nn.init.normal_(g.weight)
    torch.nn.init.normal_(g.bias)
    x = torch.randn(3, 8, 5, 5)
    ref = torch.nn.functional.group_norm(x, 2, g.weight, g.bias, g.eps)
    torch.testing.assert_close(g(x), ref, rtol=1e-5, atol=1e-5)
    stacked = vmap(g)(torch.stack([x, 2 * x]))   # the engine stacks clients like this
    torch.testing.assert_close(stacked[1], torch.nn.functional.group_norm(2 * x, 2, g.weight,
                                                                          g.bias, g.eps),
                               rtol=1e-5, atol=1e-5)


def test_max_pool_rule_equals_pytorch_stacked_and_alone():
    """layers.max_pool2d: the values and gradients of F.max_pool2d, alone and under vmap
    (clients first or beside the batch, as the stacked convolution leaves them)."""
    from wirelessfl.models.layers import max_pool2d

    g = torch.Generator().manual_seed(3)
    for in_dim, shape in ((0, (4, 3, 2, 8, 8)), (1, (3, 4, 2, 9, 9))):
        x = torch.randn(*shape, generator=g, requires_grad=True)
        ours = vmap(lambda t: max_pool2d(t, 2), in_dims=in_dim)(x)
        ref = vmap(lambda t: F.max_pool2d(t, 2), in_dims=in_dim)(x)
        assert torch.equal(ours, ref)
        w = torch.randn(ref.shape, generator=g)
        assert torch.equal(torch.autograd.grad((ours * w).sum(), x)[0],
                           torch.autograd.grad((ref * w).sum(), x)[0])
    y = torch.randn(2, 3, 6, 6, generator=g, requires_grad=True)
    assert torch.equal(max_pool2d(y, 3), F.max_pool2d(y, 3))
    assert torch.equal(torch.autograd.grad(max_pool2d(y, 3).pow(2).sum(), y)[0],
                       torch.autograd.grad(F.max_pool2d(y, 3).pow(2).sum(), y)[0])


@pytest.mark.parametrize("column", [False, True], ids=["row-major", "column-major"])
def test_sgd_in_backward_takes_the_step_of_the_weight_gradient(column):
    """Inside ``sgd_in_backward`` a stacked Linear steps W ← W − γ ∇W in place (either
    layout), gives W no gradient, and leaves the other gradients unchanged."""
    torch.manual_seed(0)
    mlp = nn.Sequential(layers.Linear(6, 5), nn.Tanh(), layers.Linear(5, 3))
    clients, lr = 3, 0.1
    stacked = {k: torch.stack([v.detach() + 0.1 * torch.randn_like(v) for _ in range(clients)])
               for k, v in mlp.named_parameters()}
    if column:  # stored (clients, in, out), as the batched engine stacks wide layers on CPU
        stacked = {k: v.transpose(1, 2).contiguous().transpose(1, 2) if v.dim() == 3 else v
                   for k, v in stacked.items()}
    x = torch.randn(clients, 4, 6)

    def grads(params, allow_unused=False):
        leaf = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        loss = vmap(lambda p, xb: functional_call(mlp, p, (xb,)).square().sum())(leaf, x).sum()
        return dict(zip(leaf, torch.autograd.grad(loss, list(leaf.values()),
                                                  allow_unused=allow_unused)))

    expect = grads(stacked)
    owned = {k: v.clone() for k, v in stacked.items()}
    with layers.sgd_in_backward(owned, lr):
        got = grads(owned, allow_unused=True)
    for k in stacked:
        if stacked[k].dim() == 3:  # the weights: stepped in place, no gradient
            assert got[k] is None
            assert owned[k].stride() == stacked[k].stride()
            torch.testing.assert_close(owned[k], stacked[k] - lr * expect[k])
        else:  # the biases: their gradient (which depends on W's old value via layer 2's input)
            torch.testing.assert_close(got[k], expect[k])
            torch.testing.assert_close(owned[k], stacked[k])


@pytest.mark.parametrize("column", [False, True], ids=["row-major", "column-major"])
def test_sgd_in_backward_takes_the_drift_before_the_gradient_step(column):
    """``before(name, W)`` changes W in place after its input gradient and before its
    gradient step: W ← before(W) − γ ∇W(old W); the stepped names are yielded, the
    unstepped (a bias) are not, and ``before`` is checked."""
    torch.manual_seed(1)
    mlp = nn.Sequential(layers.Linear(6, 5), nn.Tanh(), layers.Linear(5, 3))
    clients, lr, pull = 3, 0.1, 0.3
    stacked = {k: torch.stack([v.detach() + 0.1 * torch.randn_like(v) for _ in range(clients)])
               for k, v in mlp.named_parameters()}
    if column:
        stacked = {k: v.transpose(1, 2).contiguous().transpose(1, 2) if v.dim() == 3 else v
                   for k, v in stacked.items()}
    anchor = {k: torch.randn(v.shape[1:]) for k, v in stacked.items()}
    x = torch.randn(clients, 4, 6)

    def grads(params):
        leaf = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        loss = vmap(lambda p, xb: functional_call(mlp, p, (xb,)).square().sum())(leaf, x).sum()
        return dict(zip(leaf, torch.autograd.grad(loss, list(leaf.values()), allow_unused=True)))

    expect = grads(stacked)
    owned = {k: v.clone() for k, v in stacked.items()}
    seen = []

    def before(name, w):
        seen.append(name)
        w.lerp_(anchor[name], pull)

    with layers.sgd_in_backward(owned, lr, before) as stepped:
        got = grads(owned)
    assert stepped == {"0.weight", "2.weight"} == set(seen)
    for k in stacked:
        if k in stepped:
            assert got[k] is None
            torch.testing.assert_close(
                owned[k], torch.lerp(stacked[k], anchor[k], pull) - lr * expect[k])
        else:
            torch.testing.assert_close(got[k], expect[k])
    with pytest.raises(TypeError, match="before"), layers.sgd_in_backward(owned, lr, "pull"):
        pass


def test_sgd_in_backward_gives_a_weight_used_twice_its_gradient():
    """A weight used twice in one forward pass (a recurrent layer) is not stepped between its
    two uses: it gets its whole gradient, as without the block."""
    lin = layers.Linear(4, 4, bias=False)
    w = torch.randn(2, 4, 4)
    x = torch.randn(2, 3, 4)

    def twice(p, xb):
        return functional_call(lin, p, (torch.tanh(functional_call(lin, p, (xb,))),)).sum()

    def grad():
        leaf = {"weight": w.detach().requires_grad_(True)}
        return torch.autograd.grad(vmap(twice)(leaf, x).sum(), [leaf["weight"]],
                                   allow_unused=True)[0]

    expect, before = grad(), w.clone()
    with layers.sgd_in_backward({"weight": w}, 0.1):
        got = grad()
    torch.testing.assert_close(got, expect)
    assert torch.equal(w, before)


def test_sgd_in_backward_checks_its_step_size():
    for bad in (float("nan"), -0.1, float("inf"), "0.1"):
        with pytest.raises(ValueError, match="lr"), layers.sgd_in_backward({}, bad):
            pass


def test_column_major_names_the_wide_linear_weights():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.wide = layers.Linear(8, layers.COLUMN_MAJOR_MIN_OUT)
            self.narrow = layers.Linear(layers.COLUMN_MAJOR_MIN_OUT, 10)
            self.torch_linear = nn.Linear(8, 500)

    assert layers.column_major(Net(), "AVX512", "GenuineIntel") == {"wide.weight"}
    assert layers.column_major(Net(), "AVX2", "GenuineIntel") == frozenset()
    assert layers.column_major(Net(), "AVX512", "AuthenticAMD") == frozenset()  # measured slower
    assert layers.column_major(Net()) == layers.column_major(
        Net(), torch.backends.cpu.get_cpu_capability(), layers.cpu_vendor())
    with pytest.raises(TypeError, match="capability must be a string"):
        layers.column_major(Net(), ["AVX512"])
    with pytest.raises(TypeError, match="vendor must be a string"):
        layers.column_major(Net(), "AVX512", 7)
