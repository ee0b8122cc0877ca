"""The batched engine's opt-in ``compile``: a compiled step gives the eager step's numbers."""

import numpy as np
import pytest
import torch

from wirelessfl.algorithms.fedprox import ProximalSGD
from wirelessfl.data import ArrayDataset
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientTask, LocalHParams, LocalSGD
from wirelessfl.models import build_model
from wirelessfl.run.config import ConfigError, resolve

RULES = ("fedavg", "fedprox", "local_adam")


def _results(rule, compile_mode, device="cpu"):
    """Three FCNN clients (dropout, unequal data: one finishes early), three steps each."""
    model = build_model("fcnn", (1, 28, 28), 10, seed=0, dropout=0.25).to(device)
    hp = LocalHParams(lr=0.05, batch_size=10, steps=3,
                      optimizer="adam" if rule == "local_adam" else "sgd")
    g = torch.Generator().manual_seed(1)
    data = ArrayDataset(torch.randn(80, 1, 28, 28, generator=g),
                        torch.randint(0, 10, (80,), generator=g), 10)
    params = {k: v.to(device) for k, v in model.params().items()}
    sizes = [(0, 30), (30, 60), (60, 80)]  # the last client: two steps of 10
    tasks = [ClientTask(c, params, np.arange(lo, hi), seed=11 + c)
             for c, (lo, hi) in enumerate(sizes)]
    update = ProximalSGD(model, hp, 0.1) if rule == "fedprox" else LocalSGD(model, hp)
    out = BatchedExecutor(device, compile=compile_mode).run(update, data, tasks, hp)
    return [{k: v.cpu() for k, v in r.delta.items()} for r in out]


@pytest.mark.slow  # TorchInductor's first compile on a CPU: about 25 s, whatever the model
@pytest.mark.parametrize("rule", RULES)
def test_compiled_step_gives_the_eager_numbers(rule):
    """``compile: default`` = eager to float tolerance, and the step really was compiled.

    Eager, FedAvg and FedProx take the fused in-place SGD step, the compiled engine the
    general path (gradients, correction, optimiser), so both paths are checked against each
    other; the unequal clients take the finishing branch as well. Adam's step g/(√v + ε)
    is about lr·sign(g) on its first steps, so an entry whose gradient is near zero turns
    the paths' rounding into a larger relative difference: 1e-4 there (1.6e-5 measured on
    an AVX2 CPU), 1e-5 for SGD.
    """
    eager = _results(rule, "off")
    torch._dynamo.reset()
    compiled = _results(rule, "default")
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert graphs >= 1, "nothing was compiled"
    for a, b in zip(compiled, eager):
        for k in b:
            assert torch.isfinite(a[k]).all()
            gap = float((a[k] - b[k]).norm() / b[k].norm())
            assert gap < (1e-4 if rule == "local_adam" else 1e-5), (rule, k, gap)


def test_compile_setting_is_checked():
    with pytest.raises(ValueError, match="compile must be one of"):
        BatchedExecutor("cpu", compile="fast")
    with pytest.raises(ConfigError, match="compile must be one of"):
        resolve({"compile": "fast"})
    with pytest.raises(ConfigError, match="names no mode"):   # YAML's on: which mode?
        resolve({"compile": True})
    assert resolve({"compile": False}).compile == "off"     # YAML's off
    with pytest.raises(ConfigError, match="loop engine does not compile"):
        resolve({"compile": "default", "engine": "loop"})
    assert resolve({"compile": "reduce-overhead"}).compile == "reduce-overhead"
    assert "compile='default'" in repr(BatchedExecutor("cpu", compile="default"))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_step_on_cuda_gives_the_cpu_numbers(mode):
    """On a GPU (``reduce-overhead``: CUDA graphs) the compiled step = the CPU's eager one."""
    for rule in ("fedavg", "fedprox"):
        cpu, gpu = _results(rule, "off"), _results(rule, mode, "cuda")
        for a, b in zip(gpu, cpu):
            for k in b:
                assert float((a[k] - b[k]).norm() / b[k].norm()) < 1e-4, (rule, mode, k)
