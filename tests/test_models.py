import numpy as np
import pytest
import torch
from torch.func import functional_call

from wirelessfl.models import build_model
from wirelessfl.server.submodel import Submodel, random_disjoint_selections


@pytest.mark.parametrize("name,shape,opts,count", [
    ("fcnn", (1, 28, 28), {}, 238_510),            # docs/papers/hist.md §6.2
    ("lenet5", (1, 28, 28), {}, 44_426),
    ("lenet5", (1, 28, 28), {"padded": True}, 61_706),
    ("cifar_cnn", (3, 32, 32), {}, 541_094),
    ("mlp", (1, 28, 28), {}, 199_210),
    ("feddyn_cnn", (3, 32, 32), {}, 797_962),       # docs/papers/fedast.md §4.4, ~798k
    ("char_lstm", (80,), {}, 45_650),     # 10 classes here; 52,720 with 80 (docs/papers/fedast.md §4.4, ~53k)
    ("resnet18", (3, 32, 32), {}, 11_173_962),      # ~11.2M
])
def test_parameter_counts(name, shape, opts, count):
    m = build_model(name, shape, 10, seed=0, **opts)
    assert sum(p.numel() for p in m.parameters()) == count


def test_lenet_conv_share_matches_spec():
    m = build_model("lenet5", (1, 28, 28), 10, seed=0)
    conv = sum(v.numel() for k, v in m.named_parameters() if k.startswith("conv"))
    assert conv == 2_572


def test_params_per_unit_fcnn():
    m = build_model("fcnn", (1, 28, 28), 10, seed=0)
    shapes = {k: v.shape for k, v in m.named_parameters()}
    assert m.group("fc1").params_per_unit(shapes) == 795  # q = 784 + 1 + 10 (§4.3)


def test_init_is_seeded_and_leaves_global_rng():
    torch.manual_seed(5)
    before = torch.rand(1)
    torch.manual_seed(5)
    a = build_model("fcnn", (60,), 10, seed=1).params()
    after = torch.rand(1)
    b = build_model("fcnn", (60,), 10, seed=1).params()
    assert torch.equal(before, after)
    assert all(torch.equal(a[k], b[k]) for k in a)


MODELS = [("fcnn", (1, 28, 28)), ("lenet5", (1, 28, 28)), ("cifar_cnn", (3, 32, 32)),
          ("mlp", (1, 28, 28))]


@pytest.mark.parametrize("name,shape", MODELS)
def test_slice_scatter_roundtrip_and_sliced_equals_masked(name, shape):
    """Sliced submodel forward == full model with the dropped units zeroed (HIST §1.3(e))."""
    m = build_model(name, shape, 10, seed=0).eval()
    params = m.params()
    groups = [m.group(g) for g in m.hist_groups]
    sel = random_disjoint_selections(groups, [[g.size // 3, g.size - g.size // 3] for g in groups],
                                     np.random.default_rng(0))[0]
    sub = Submodel(m.unit_groups, sel, params)
    small = sub.slice(params)
    back = sub.scatter(params, small)
    assert all(torch.equal(back[k], params[k]) for k in params)
    masked = {k: v * sub.mask(params)[k] for k, v in params.items()}
    x = torch.randn(4, *shape)
    torch.testing.assert_close(functional_call(m, small, (x,)), functional_call(m, masked, (x,)))
    assert sub.num_params(params) == sum(v.numel() for v in small.values())


def test_conv_channel_group_with_flattened_width():
    m = build_model("lenet5", (1, 28, 28), 10, seed=0).eval()
    params = m.params()
    sel = {"conv2": torch.tensor([1, 5, 9]), "fc1": torch.arange(0, 120, 2)}
    sub = Submodel(m.unit_groups, sel, params)
    small = sub.slice(params)
    assert small["fc1.weight"].shape == (60, 3 * 16) and small["conv2.weight"].shape == (3, 6, 5, 5)
    masked = {k: v * sub.mask(params)[k] for k, v in params.items()}
    x = torch.randn(3, 1, 28, 28)
    torch.testing.assert_close(functional_call(m, small, (x,)), functional_call(m, masked, (x,)))


def test_disjoint_selections_cover():
    m = build_model("fcnn", (1, 28, 28), 10, seed=0)
    sels = random_disjoint_selections([m.group("fc1")], [[37] * 7 + [41]], np.random.default_rng(0))
    units = torch.cat([s["fc1"] for s in sels])
    assert sorted(units.tolist()) == list(range(300))
    with pytest.raises(ValueError, match="sum to 300"):
        random_disjoint_selections([m.group("fc1")], [[100, 100]], np.random.default_rng(0))


def test_image_model_on_flat_data_is_a_clear_error():
    with pytest.raises(ValueError, match="needs image inputs"):
        build_model("lenet5", (60,), 10, seed=0)


def _is_crop_of(out: torch.Tensor, image: torch.Tensor, pad: int) -> bool:
    padded = torch.nn.functional.pad(image, (pad,) * 4)
    h, w = image.shape[-2:]
    crops = [padded[:, dy:dy + h, dx:dx + w] for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)]
    return any(torch.equal(out, c) or torch.equal(out, c.flip(-1)) for c in crops)


def test_random_crop_flip_gives_shifted_mirrored_crops_drawn_per_client():
    from torch.func import vmap

    from wirelessfl.models.zoo import random_crop_flip

    torch.manual_seed(0)
    x = torch.randn(16, 3, 8, 8)
    out = random_crop_flip(x, pad=2)
    assert out.shape == x.shape and all(_is_crop_of(o, i, 2) for o, i in zip(out, x))
    assert not torch.equal(out, x)  # 16 images: some shift or flip happened
    stacked = vmap(lambda t: random_crop_flip(t, 2), randomness="different")(torch.stack([x, x]))
    assert not torch.equal(stacked[0], stacked[1])
    m = build_model("resnet18", (3, 8, 8), 4, seed=0, augment=True).eval()
    assert torch.equal(m(x[:2]), m(x[:2]))  # evaluation does not augment


def test_client_noise_is_the_int64_hash_in_int32_arithmetic():
    """The per-element hash runs in wrap-around int32; its draws are the 31-bit hash's exactly.

    The reference below is the hash written in Python integers (no overflow at all), so a
    change of the stream (or an int32 overflow that loses a bit) fails here, under ``vmap``
    as well.
    """
    from torch.func import vmap

    from wirelessfl.models import noise

    mask = (1 << 31) - 1

    def mix(h):
        h = ((h ^ (h >> 16)) * 0x45D9F3B) & mask
        h = ((h ^ (h >> 16)) * 0x45D9F3B) & mask
        return h ^ (h >> 16)

    def reference(key, count, n):
        base = mix((key + count * 0x632BE5A) & mask)
        return [mix((i + base) & mask) / 2**31 for i in range(n)]

    keys = [noise.step_key(s, t) for s, t in [(0, 0), (7, 3), (2**40 + 1, 19)]] + [mask, mask - 3]
    for key in keys:
        with noise.client_noise(key):
            first = noise.uniform((3, 5), torch.device("cpu"))
            second = noise.uniform((4,), torch.device("cpu"))
        assert first.flatten().tolist() == pytest.approx(reference(key, 1, 15), abs=0, rel=1e-7)
        assert second.tolist() == pytest.approx(reference(key, 2, 4), abs=0, rel=1e-7)

    def draw(k):
        with noise.client_noise(k):
            return noise.uniform((6,), torch.device("cpu"))

    stacked = vmap(draw, randomness="different")(torch.tensor(keys, dtype=torch.int64))
    for row, key in zip(stacked, keys):
        assert row.tolist() == pytest.approx(reference(key, 1, 6), abs=0, rel=1e-7)


@pytest.mark.parametrize("compiled", [True, False])
def test_keep_mask_is_the_threshold_of_the_clients_uniform_draws(compiled, monkeypatch):
    """Dropout's mask, compiled (Numba) or not, is ``(uniform >= p) / (1 - p)`` of the same draw.

    Loop (an int key) and ``vmap``-ed clients (a batched key) alike, for p at the edges, and
    it counts as one draw of the stream (the next draw is unchanged).
    """
    from torch.func import vmap

    from wirelessfl.models import noise

    if compiled:
        pytest.importorskip("numba")
        assert noise._kernel_ready()
    else:
        monkeypatch.setattr(noise, "_kernel", False)
    cpu = torch.device("cpu")
    keys = [noise.step_key(s, t) for s, t in [(0, 0), (7, 3), (2**40 + 1, 19)]] + [(1 << 31) - 1]

    def draws(k, p, fast):
        with noise.client_noise(k):
            noise.uniform((2,), cpu)
            mask = (noise.keep_mask((7, 33), p, cpu) if fast else
                    (noise.uniform((7, 33), cpu) >= p).to(torch.float32).mul_(1.0 / (1.0 - p)))
            return mask, noise.uniform((3,), cpu)

    for p in (0.0, 0.3, 0.5, 1.0 - 2.0**-20):
        for k in keys:
            (mask, after), (want, want_after) = draws(k, p, True), draws(k, p, False)
            assert mask.dtype == torch.float32 and torch.equal(mask, want)
            assert torch.equal(after, want_after)
        stacked = vmap(lambda k, p=p: draws(k, p, True)[0], randomness="different")(
            torch.tensor(keys, dtype=torch.int64))
        assert torch.equal(stacked, torch.stack([draws(k, p, False)[0] for k in keys]))
    share = draws(keys[1], 0.3, True)[0].eq(0).float().mean().item()
    assert 0.2 < share < 0.4  # about p of the units dropped
    with pytest.raises(ValueError, match="p must lie in"):
        noise.keep_mask((2,), 1.0, cpu)


@pytest.mark.parametrize("name, shape", [("linear", (1, 28, 28)), ("fcnn", (1, 28, 28)),
                                         ("mlp", (1, 28, 28)), ("lenet5", (1, 28, 28)),
                                         ("svhn_cnn", (3, 32, 32)), ("resnet18", (3, 32, 32)),
                                         ("resnet18_bn", (3, 32, 32))])
def test_features_only_is_the_representation_without_the_head(name, shape):
    """``features="only"`` returns the z of ``features=True`` (MOON's anchors run no head)."""
    model = build_model(name, shape, 10, seed=0).eval()
    x = torch.randn(4, *shape, generator=torch.Generator().manual_seed(1))
    out, z = model(x, features=True)
    only = model(x, features="only")
    assert only.shape == z.shape and torch.equal(only, z)
    assert not torch.equal(out, z) or name == "linear"
