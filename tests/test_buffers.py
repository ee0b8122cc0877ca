"""Model state with buffers: BatchNorm in both engines, buffers averaged by the server (issue 17)."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import wirelessfl.run.rounds as runner
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientTask, LocalHParams, LocalSGD
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.models import MODELS, FLModel, build_model
from wirelessfl.models import layers as L
from wirelessfl.run.kinds import open_run, run_job


class TinyBN(FLModel):
    """Linear → BatchNorm → ReLU → Linear, for tests."""

    def __init__(self, sample_shape, num_classes, hidden: int = 12):
        super().__init__()
        self.fc1 = L.Linear(int(np.prod(sample_shape)), hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.fc2 = L.Linear(hidden, num_classes)

    def forward(self, x, features: bool = False):
        z = F.relu(self.bn(self.fc1(x.flatten(1))))
        return (self.fc2(z), z) if features else self.fc2(z)


@pytest.fixture(autouse=True)
def _tiny_bn(monkeypatch):
    monkeypatch.setitem(MODELS, "tiny_bn", TinyBN)


RAW = {"seed": 3, "rounds": 3,
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 30},
       "model": {"name": "tiny_bn"}, "local": {"lr": 0.05, "batch_size": 10, "steps": 4}}


def _rounds(algorithm, engine, n=3):
    exp = open_run({**RAW, "engine": engine, "algorithm": algorithm}).exp
    state = exp.initial_state()
    for _ in range(n):
        state, _ = exp.algorithm.apply(state)
    return exp, state


@pytest.mark.parametrize("algorithm", [
    {"name": "fedavg"}, {"name": "fedprox", "mu": 0.3}, {"name": "scaffold"},
    {"name": "moon", "mu": 1.0}, {"name": "fedacg", "beta": 0.1, "lam": 0.5}, {"name": "fedavg_m"},
    {"name": "scaffold_m"}, {"name": "fedadam", "server_lr": 0.01, "server_eps": 1e-3},
    {"name": "fedams", "server_lr": 0.01, "server_eps": 1e-3}], ids=lambda a: a["name"])
def test_batchnorm_loop_equals_batched(algorithm):
    _, loop = _rounds(algorithm, "loop")
    _, batched = _rounds(algorithm, "batched")
    assert set(loop.buffers) == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}
    # adaptive server steps (m/(√v + ε)) magnify float differences where v is tiny: with
    # ε = 1e-8 an update of 1e-9 and one of −1e-9 step ±lr apart, so these use ε = 1e-3
    tol = {"rtol": 1e-3, "atol": 2e-4} if algorithm["name"] in ("fedadam", "fedams") else {
        "rtol": 1e-4, "atol": 1e-5}
    for a, b in ((loop.params, batched.params), (loop.buffers, batched.buffers)):
        for k in a:
            torch.testing.assert_close(a[k], b[k], **tol)
    assert int(loop.buffers["bn.num_batches_tracked"]) == 3 * 4  # 3 rounds of 4 steps


def test_buffers_are_the_plain_mean_of_the_clients():
    exp = open_run({**RAW, "algorithm": {"name": "fedavg"}}).exp
    x0 = exp.initial_state()
    assert torch.equal(x0.buffers["bn.running_var"], torch.ones(12))
    new, _ = exp.algorithm.apply(x0)
    env = exp.algorithm.env
    tasks = [ClientTask(u, x0.params, env.client_indices[u], env.seeds.int_seed("local", 0, 0, u),
                        buffers=x0.buffers) for u in range(6)]
    # the clients again on the round's own engine (loop = batched is the test above): the
    # same float32 sums, so only the mean's order of summation differs. (Across engines a
    # ReLU pre-activation within rounding of 0 can flip, which moves a running mean ~2e-5.)
    assert isinstance(env.executor, BatchedExecutor)
    results = env.executor.run(env.update, env.train, tasks, env.local)
    mean = torch.stack([r.buffers["bn.running_mean"] for r in results]).mean(0)
    torch.testing.assert_close(new.buffers["bn.running_mean"], mean, rtol=1e-6, atol=1e-7)
    assert not torch.equal(results[0].buffers["bn.running_mean"], results[1].buffers["bn.running_mean"])
    assert torch.equal(x0.buffers["bn.running_var"], torch.ones(12))  # clients trained copies


def test_evaluation_uses_the_averaged_statistics(tmp_path):
    raw = {**RAW, "name": "bn", "algorithm": {"name": "fedavg"}}
    full = run_job(open_run(raw), tmp_path / "a", quiet=True)
    from wirelessfl.run.records import RunRecord

    ckpt = RunRecord(tmp_path / "a").load_checkpoint()
    assert set(ckpt["buffers"]) == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}
    exp = open_run(raw).exp
    from wirelessfl.engine.client import evaluate

    with_stats = evaluate(exp.model, ckpt["params"], exp.splits.test, buffers=ckpt["buffers"])
    assert with_stats[0] == pytest.approx(full["final_accuracy"])


def test_deltas_cover_trainable_parameters_only():
    model = TinyBN((60,), 10)
    model.fc1.weight.requires_grad_(False)  # a frozen parameter (e.g. a LoRA base)
    assert "fc1.weight" not in model.params() and "bn.running_mean" in model.buffers_state()
    hp = LocalHParams(lr=0.1, batch_size=5, steps=2)
    data = runner.load_dataset("synthetic", rng=np.random.default_rng(0), num_clients=2).train
    task = ClientTask(0, model.params(), np.arange(10), seed=0, buffers=model.buffers_state())
    for ex in (LoopExecutor(), BatchedExecutor()):
        [res] = ex.run(LocalSGD(model, hp), data, [task], hp)
        assert set(res.delta) == set(model.params()) and "fc1.weight" not in res.delta


def test_resnet18_with_batchnorm_trains_batched():
    model = build_model("resnet18_bn", (3, 8, 8), 10, seed=0)
    assert model.buffers_state() and sum(v.numel() for v in model.params().values()) > 1e7
    x = torch.randn(8, 3, 8, 8)
    y = torch.randint(0, 10, (8,))
    from wirelessfl.data.arrays import ArrayDataset

    data = ArrayDataset(x, y, 10)
    hp = LocalHParams(lr=0.01, batch_size=4, steps=1)
    tasks = [ClientTask(c, model.params(), np.arange(4 * c, 4 * c + 4), seed=c,
                        buffers=model.buffers_state()) for c in range(2)]
    loop = LoopExecutor().run(LocalSGD(model, hp), data, tasks, hp)
    batched = BatchedExecutor().run(LocalSGD(model, hp), data, tasks, hp)
    for a, b in zip(loop, batched):
        torch.testing.assert_close(a.buffers["bn1.running_mean"], b.buffers["bn1.running_mean"],
                                   rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a.delta["fc.weight"], b.delta["fc.weight"], rtol=1e-3, atol=1e-5)


def test_svhn_cnn_has_the_papers_shape_and_trains_batched_as_in_the_loop():
    """docs/papers/dynamic_clients.md §4.1 SVHNEfficient: five 3×3 conv+BN layers, fc 2048 → 256 → 10.

    Max-pooling routes each gradient to its window's argmax, and two near-equal entries can
    swap under the batched kernels' rounding (with average pooling the engines agree to
    2e-6). So after one step the layers behind the last pooling (fc1, fc2) and every
    BatchNorm statistic (forward only) agree to rounding; the conv layers to 10%.
    """
    model = build_model("svhn_cnn", (3, 32, 32), 10, seed=0, dropout=0.4)
    assert model.fc1.in_features == 2048 and model.fc1.out_features == 256
    assert sum(v.numel() for v in model.params().values()) == 667_178
    assert {"bn1.running_mean", "bn5.running_var"} <= set(model.buffers_state())
    out, z = model(torch.randn(3, 3, 32, 32), features=True)
    assert out.shape == (3, 10) and z.shape == (3, 256) and bool((z >= 0).all())
    from wirelessfl.data.arrays import ArrayDataset

    g = torch.Generator().manual_seed(0)
    data = ArrayDataset(torch.randn(16, 3, 32, 32, generator=g),
                        torch.randint(0, 10, (16,), generator=g), 10)
    hp = LocalHParams(lr=0.05, batch_size=4, steps=1)
    tasks = [ClientTask(c, model.params(), np.arange(8 * c, 8 * c + 8), seed=c,
                        buffers=model.buffers_state()) for c in range(2)]
    loop = LoopExecutor().run(LocalSGD(model, hp), data, tasks, hp)
    batched = BatchedExecutor().run(LocalSGD(model, hp), data, tasks, hp)
    for a, b in zip(loop, batched):   # dropout included: each client's own mask stream
        for k in a.buffers:
            torch.testing.assert_close(a.buffers[k], b.buffers[k], rtol=1e-4, atol=1e-6)
        for k in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
            torch.testing.assert_close(a.delta[k], b.delta[k], rtol=1e-3, atol=1e-6)
        assert float(a.delta["fc2.weight"].abs().max()) > 1e-4
        diff = sum(float((a.delta[k] - b.delta[k]).square().sum()) for k in a.delta) ** 0.5
        norm = sum(float(a.delta[k].square().sum()) for k in a.delta) ** 0.5
        assert diff < 0.1 * norm


def _torchvision_layout(model):
    """A state dict as torchvision/timm name a ResNet (shortcut = downsample, with a fc)."""
    sd = {k.replace(".shortcut.", ".downsample."): v.clone() for k, v in model.state_dict().items()
          if not k.startswith(("proj", "fc."))}
    return {**sd, "fc.weight": torch.zeros(1000, 512), "fc.bias": torch.zeros(1000)}


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_resnet_projection_loads_a_local_backbone_and_only_the_backbone(tmp_path, suffix):
    """docs/papers/dynamic_clients.md §4.1: ResNet-18 backbone (pretrained when a file is given),
    head 512→512→256."""
    from safetensors.torch import save_file

    source = build_model("resnet_proj", (3, 32, 32), 10, seed=1)
    file = tmp_path / f"r18{suffix}"
    sd = _torchvision_layout(source)
    save_file(sd, str(file)) if suffix == ".safetensors" else torch.save(sd, file)
    fresh = build_model("resnet_proj", (3, 32, 32), 10, seed=2)
    warm = build_model("resnet_proj", (3, 32, 32), 10, seed=2, pretrained=str(file))
    for k, v in warm.state_dict().items():
        if k.startswith(("proj", "fc.")):   # the head stays as initialised
            torch.testing.assert_close(v, fresh.state_dict()[k])
        else:
            torch.testing.assert_close(v, source.state_dict()[k])
    out, z = warm(torch.randn(2, 3, 32, 32), features=True)
    assert out.shape == (2, 10) and z.shape == (2, 256)
    assert sum(p.numel() for p in warm.parameters()) == 11_573_066


def test_resnet_projection_refuses_bad_weight_files(tmp_path):
    import pickle

    from safetensors.torch import save_file

    r18 = build_model("resnet_proj", (3, 32, 32), 10, seed=0)
    sd = _torchvision_layout(r18)
    cases = {"missing.safetensors": {k: v for k, v in sd.items() if k != "layer4.1.bn2.weight"},
             "shape.safetensors": {**sd, "conv1.weight": torch.zeros(64, 3, 3, 3)}}
    for name, d in cases.items():
        save_file(d, str(tmp_path / name))
    (tmp_path / "junk.safetensors").write_bytes(b"not weights")

    class Evil:
        def __reduce__(self):
            return (print, ("code ran",))

    (tmp_path / "evil.pt").write_bytes(pickle.dumps({"conv1.weight": Evil()}))
    msgs = {"missing.safetensors": "lacks layer4.1.bn2.weight", "shape.safetensors": "has shape",
            "junk.safetensors": "cannot read", "evil.pt": "cannot read", "none.pt": "no file"}
    for name, match in msgs.items():
        with pytest.raises(ValueError, match=match):
            build_model("resnet_proj", (3, 32, 32), 10, seed=0, pretrained=str(tmp_path / name))
    with pytest.raises(ValueError, match="depth"):
        build_model("resnet_proj", (3, 32, 32), 10, seed=0, depth=20)
    with pytest.raises(ValueError, match="path of a local weights file"):
        build_model("resnet_proj", (3, 32, 32), 10, seed=0, pretrained=3)
