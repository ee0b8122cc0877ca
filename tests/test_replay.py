"""Recorded stacked steps replay the eager step's numbers bit for bit (wirelessfl.engine.replay)."""

import numpy as np
import pytest
import torch
from torch import nn

from wirelessfl.data import ArrayDataset
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import Carry, ClientTask, LocalHParams, LocalSGD
from wirelessfl.engine.replay import RECORD_AFTER, StepReplay
from wirelessfl.errors import ConfigError
from wirelessfl.models import build_model
from wirelessfl.models.base import FLModel
from wirelessfl.run.config import resolve

CUDA = pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU")])


def _data(shape, n=160, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ArrayDataset(torch.randn(n, *shape, generator=g),
                        torch.randint(0, 10, (n,), generator=g), 10)


def _rounds(model, mode, rounds=3, sizes=(40, 40, 30, 50), steps=5, device="cpu"):
    """Deltas of ``rounds`` runs of plain SGD (each from the last one's mean), and the replay."""
    hp = LocalHParams(lr=0.05, batch_size=10, steps=steps)
    data = _data(model.sample_shape if hasattr(model, "sample_shape") else (1, 28, 28))
    # stacked weights (low-rank ones change their factors, which no recorded step replays)
    update = LocalSGD(model.to(device), hp)
    executor = BatchedExecutor(device, replay=mode, low_rank="off")
    params, out, offset = model.params(), [], np.cumsum((0,) + tuple(sizes))
    for r in range(rounds):
        tasks = [ClientTask(c, params, np.arange(offset[c], offset[c + 1]), seed=10 * r + c)
                 for c in range(len(sizes))]
        results = executor.run(update, data.placed(device, "device"), tasks, hp)
        out.append([{k: v.cpu() for k, v in res.delta.items()} for res in results])
        params = {k: v - torch.stack([res.delta[k] for res in results]).mean(0)
                  for k, v in params.items()}
    return out, executor.replay


def _equal(a, b):
    return all(torch.equal(x[k], y[k]) for ra, rb in zip(a, b) for x, y in zip(ra, rb) for k in x)


@pytest.mark.parametrize("name", ["fcnn", "lenet5", "mlp"])
def test_replayed_steps_give_the_eager_numbers_bit_for_bit(name, stack_layout):
    """``on`` records at once and replays: every delta equals the eager engine's exactly.

    FCNN (dropout through the masks' operator, column-major or row-major stacks stepped in
    the backward pass), LeNet-5 (the stacked convolution and pooling rules), the MLP;
    unequal data sizes (a padded batch, clients finishing early: those steps stay eager).
    """
    model = build_model(name, (1, 28, 28), 10, seed=0)
    replayed, rep = _rounds(model, "on")
    eager, off = _rounds(build_model(name, (1, 28, 28), 10, seed=0), "off")
    assert rep.replayed > 0 and rep.recordings >= 1, rep
    assert off.replayed == 0 and off.recordings == 0
    assert _equal(replayed, eager)


@pytest.mark.parametrize("device", [CUDA])
def test_replay_on_the_gpu_gives_the_eager_numbers(device):
    """On a GPU the recorded steps run as CUDA graphs (one captured per recording and group,
    checked once against the recorded graph): the eager numbers, bit for bit."""
    replayed, rep = _rounds(build_model("fcnn", (1, 28, 28), 10, seed=0), "on", device=device)
    eager, _ = _rounds(build_model("fcnn", (1, 28, 28), 10, seed=0), "off", device=device)
    assert rep.replayed > 0 and _equal(replayed, eager)
    assert rep.captures >= 1, rep   # the CUDA graphs were used, not dropped
    assert not any(e.cuda_failed for e in rep._entries.values())


def test_auto_records_a_step_only_once_it_recurs(monkeypatch):
    """``auto``: not within the run that first uses a key, even past RECORD_AFTER uses; then yes."""
    from wirelessfl.engine import replay

    monkeypatch.setattr(replay, "RECORD_AFTER", 20)
    steps = 30  # one stacked group of two clients: one use a step, past RECORD_AFTER in a run
    out_auto, rep = _rounds(build_model("fcnn", (1, 28, 28), 10, seed=0), "auto", rounds=1,
                            sizes=(40, 40), steps=steps)
    assert rep.recordings == 0 and rep.replayed == 0
    model = build_model("fcnn", (1, 28, 28), 10, seed=0)
    out_auto, rep = _rounds(model, "auto", rounds=2, sizes=(40, 40), steps=steps)
    assert rep.recordings == 1 and rep.replayed > 0
    out_off, _ = _rounds(build_model("fcnn", (1, 28, 28), 10, seed=0), "off", rounds=2,
                         sizes=(40, 40), steps=steps)
    assert _equal(out_auto, out_off)


def test_auto_waits_for_record_after_uses():
    """Across runs, ``auto`` records a key only at its RECORD_AFTER-th use."""
    rep, carry = StepReplay("auto"), _carry()
    update = LocalSGD(build_model("fcnn", (1, 28, 28), 10, seed=0), LocalHParams())
    recorded = []

    def step(update, carry, x, y, w, keys):
        carry.params["w"].add_(x.mean(1, keepdim=True), alpha=-carry.lr)
        carry.step += 1
        return x.sum(1)

    args = (torch.ones(3, 2), torch.zeros(3, 2), torch.ones(3, 2), torch.zeros(3))
    for use in range(1, RECORD_AFTER + 2):
        if use % 50 == 1:
            rep.begin_run()
        rep.step(("k",), update, carry, *args, step)
        recorded.append(rep.recordings)
    assert recorded.index(1) == RECORD_AFTER - 1  # recorded at (not before) that use


class _OwnNet(FLModel):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x, features=False):
        return self.fc(x.flatten(1))


def test_auto_leaves_models_of_other_modules_eager_and_on_records_them(monkeypatch):
    from wirelessfl.engine import replay

    monkeypatch.setattr(replay, "RECORD_AFTER", 20)
    model = _OwnNet()
    _, rep = _rounds(model, "auto", rounds=3, sizes=(40, 40), steps=20)
    assert rep.recordings == 0 and rep.replayed == 0
    torch.manual_seed(0)
    on, rep = _rounds(_OwnNet(), "on")
    torch.manual_seed(0)
    off, _ = _rounds(_OwnNet(), "off")
    assert rep.replayed > 0 and _equal(on, off)


def _carry():
    return Carry(start={}, params={"w": torch.ones(3, 4)}, lr=0.1, batch_dims=1)


def test_a_recording_that_does_not_replay_the_step_is_dropped():
    """The first replay is checked against the eager step: a mismatch leaves the key eager.

    The step reads a Python number that changes between calls; the recording holds the
    number of the call it traced, so the check finds another result.
    """
    calls = []

    def drifting(update, carry, x, y, w, keys):
        calls.append(1)
        carry.params["w"].mul_(1.0 + len(calls))
        carry.step += 1
        return x.sum(1)

    rep, carry, update = StepReplay("on"), _carry(), LocalSGD(nn.Linear(2, 2), LocalHParams())
    x, y, w, keys = torch.ones(3, 2), torch.zeros(3, 2), torch.ones(3, 2), torch.zeros(3)
    for _ in range(4):
        rep.step(("k",), update, carry, x, y, w, keys, drifting)
    assert rep.recordings == 0 and rep.replayed == 0
    # every step was the eager one, factors 3, 4, 5, 6 (call 1 traced the recording on a copy;
    # the check replayed it on a copy, factor 2, against the eager factor 4)
    assert torch.equal(carry.params["w"], torch.full((3, 4), 3.0 * 4 * 5 * 6)) and carry.step == 4


def test_a_checked_recording_replays_and_counts_the_steps():
    def step(update, carry, x, y, w, keys):
        carry.params["w"].add_(x.mean(1, keepdim=True), alpha=-carry.lr)
        carry.step += 1
        return x.sum(1)

    rep, carry, update = StepReplay("on"), _carry(), LocalSGD(nn.Linear(2, 2), LocalHParams())
    ref = _carry()
    for s in range(5):
        x = torch.full((3, 2), float(s))
        args = (x, torch.zeros(3, 2), torch.ones(3, 2), torch.zeros(3))
        assert torch.equal(rep.step(("k",), update, carry, *args, step), step(None, ref, *args))
    assert rep.replayed == 3 and torch.equal(carry.params["w"], ref.params["w"])
    assert carry.step == ref.step == 5


def test_replay_setting_is_checked():
    with pytest.raises(ValueError, match="replay mode must be one of"):
        BatchedExecutor("cpu", replay="always")
    with pytest.raises(ConfigError, match="replay must be one of"):
        resolve({"replay": "always"})
    with pytest.raises(ConfigError, match="replay must be a string"):
        resolve({"replay": 3})
    assert resolve({"replay": True}).replay == "on"      # YAML reads on/off as booleans
    assert resolve({"replay": False}).replay == "off"
    assert resolve({"replay": "off"}).replay == "off"
    assert "replay='off'" in repr(BatchedExecutor("cpu", replay="off"))
    assert "replay" not in repr(BatchedExecutor("cpu"))


RULES_RAW = {"seed": 3, "rounds": 3,
             "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 40},
             "model": {"name": "fcnn", "options": {"hidden": 32}},
             "local": {"lr": 0.05, "batch_size": 10, "steps": 4}}


@pytest.mark.parametrize("algorithm", [{"name": "fedprox", "mu": 0.5}, {"name": "scaffold"},
                                       {"name": "moon", "mu": 1.0, "tau": 0.5}])
def test_rules_with_start_and_context_replay_the_eager_numbers(algorithm):
    """FedProx (the start, its drift), SCAFFOLD (c − c_i in the context), MOON (the start's and
    the previous models' frozen features): three rounds recorded and replayed equal the eager
    rounds bit for bit (parameters and client states), with the start and context as inputs."""
    from wirelessfl.run.kinds import open_run

    states = {}
    for mode in ("on", "off"):
        exp = open_run({**RULES_RAW, "algorithm": algorithm, "engine": "batched",
                               "replay": mode}).exp
        state = exp.initial_state()
        for _ in range(3):
            state, _ = exp.algorithm.apply(state)
        states[mode] = (state, exp.algorithm.env.executor.replay)
    (on, rep), (off, _) = states["on"], states["off"]
    assert rep.replayed > 0 and rep.recordings >= 1, rep
    assert all(torch.equal(on.params[k], off.params[k]) for k in on.params)
    assert on.client_states.keys() == off.client_states.keys()
    for c, s in on.client_states.items():
        assert all(torch.equal(s[k], off.client_states[c][k]) for k in s)


def _same_tree(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if hasattr(a, "to_plain"):
        a, b = a.to_plain(), b.to_plain()
    return a.keys() == b.keys() and all(_same_tree(a[k], b[k]) for k in a)


@pytest.mark.parametrize("algorithm,local", [
    ({"name": "fadamgc"}, {}), ({"name": "fadamgc", "correction": "post"}, {}),
    ({"name": "fedavg"}, {"momentum": 0.9}), ({"name": "fedavg"}, {"optimizer": "adam"})])
def test_rules_with_optimiser_state_replay_the_eager_numbers(algorithm, local):
    """FAdamGC's tracked Adam (moments, v̂, the running sum updated in place), FA-NT's and
    momentum SGD (its buffer replaced each step): three rounds with their steps recorded and
    replayed equal the eager rounds bit for bit, parameters and client states. A local Adam,
    whose bias correction reads the step count, is not recorded (and still equal)."""
    from wirelessfl.run.kinds import open_run

    states = {}
    for mode in ("on", "off"):
        exp = open_run({**RULES_RAW, "algorithm": algorithm, "engine": "batched",
                        "local": {**RULES_RAW["local"], **local}, "replay": mode}).exp
        state = exp.initial_state()
        for _ in range(3):
            state, _ = exp.algorithm.apply(state)
        states[mode] = (state, exp.algorithm.env.executor.replay)
    (on, rep), (off, _) = states["on"], states["off"]
    adam = local.get("optimizer") == "adam"
    assert (rep.replayed > 0 and rep.recordings >= 1) != adam, rep
    assert all(torch.equal(on.params[k], off.params[k]) for k in on.params)
    assert dict(on.client_states).keys() == dict(off.client_states).keys()
    for c, s in on.client_states.items():
        assert _same_tree(s, off.client_states[c]), c


def test_a_rules_setting_is_part_of_the_key():
    """Changing μ between runs records again rather than replaying the old μ's graph."""
    from wirelessfl.algorithms.fedprox import ProximalSGD

    model = build_model("fcnn", (1, 28, 28), 10, seed=0)
    update = ProximalSGD(model, LocalHParams(lr=0.05), mu=0.5)
    carry = Carry(start={k: v.detach() for k, v in model.params().items()},
                  params={k: v.detach().unsqueeze(0).clone() for k, v in model.params().items()},
                  lr=0.05, batch_dims=1)
    rep = StepReplay("on")
    first = rep.group_key(update, carry)
    update.mu = 0.1
    assert first is not None and rep.group_key(update, carry) != first


def test_the_written_out_step_is_the_traced_graph_operator_for_operator():
    """``_lean`` runs the traced graph's operators as plain code: the same outputs and in-place
    updates bit for bit, with lists, keyword arguments, an infinite constant and an unused
    in-place alias, and one Python call per operator (counted)."""
    import cProfile
    import pstats

    from torch.fx.experimental.proxy_tensor import make_fx

    from wirelessfl.engine.replay import _lean

    def step(params, given, x, y, w, keys):
        h = torch.clamp(x @ params[0] + given[0], max=float("inf")).relu()
        params[1].add_(w.sum(), alpha=0.5)
        out = torch.nn.functional.cross_entropy(h, y, reduction="none") * w
        return out + keys.to(out.dtype) * torch.cat([params[1], params[1]])[: len(out)]

    g = torch.Generator().manual_seed(0)
    args = lambda: ([torch.randn(4, 3, generator=g), torch.randn(6, generator=g)],  # noqa: E731
                    [torch.randn(3, generator=g)], torch.randn(5, 4, generator=g),
                    torch.randint(0, 3, (5,), generator=g), torch.rand(5, generator=g),
                    torch.arange(5))
    a = args()
    traced = make_fx(step)(*[[t.clone() for t in v] if isinstance(v, list) else v for v in a])
    lean = _lean(traced, 2, 1)
    a1 = ([t.clone() for t in a[0]], *a[1:])
    a2 = ([t.clone() for t in a[0]], *a[1:])
    want, got = traced(*a1), lean(*a2)
    assert torch.equal(want, got) and all(torch.equal(p, q) for p, q in zip(a1[0], a2[0]))
    ops = sum(n.op == "call_function" for n in traced.graph.nodes)
    prof = cProfile.Profile()
    prof.enable()
    lean(*a2)
    prof.disable()
    assert pstats.Stats(prof).total_calls <= ops + 2, (pstats.Stats(prof).total_calls, ops)
