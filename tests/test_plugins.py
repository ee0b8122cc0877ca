"""Your own pieces from your own code: local rules, models and datasets (issue 35, item 2)."""

from dataclasses import dataclass

import pytest
import torch
from torch import nn

import wirelessfl
from wirelessfl import registry
from wirelessfl.data import ArrayDataset, DatasetSplits
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import LocalSGD
from wirelessfl.models import MODELS, FLModel
from wirelessfl.run.kinds import open_run

BASE = {"seed": 4, "rounds": 2,
        "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 40},
        "model": {"name": "fcnn", "options": {"hidden": 8}},
        "local": {"lr": 0.2, "batch_size": 10, "steps": 3}}


@dataclass(frozen=True)
class ClipOptions:
    clip: float = 0.01

    def __post_init__(self):
        if not self.clip > 0:
            raise ValueError(f"`clip` must be > 0, got {self.clip}")


class EntryClip(LocalSGD):
    """Entrywise clipping: elementwise, declared."""

    elementwise = True

    def __init__(self, model, hp, clip):
        super().__init__(model, hp)
        self.clip = clip

    def correct(self, grads, params, start, ctx):
        return {k: g.clamp(-self.clip, self.clip) for k, g in grads.items()}


class NormClip(LocalSGD):
    """Per-tensor norm clipping: NOT elementwise, and not declared."""

    def __init__(self, model, hp, clip):
        super().__init__(model, hp)
        self.clip = clip

    def correct(self, grads, params, start, ctx):
        return {k: g * torch.clamp(self.clip / (g.norm() + 1e-12), max=1.0)
                for k, g in grads.items()}


@pytest.fixture
def rules():
    names = []

    def add(name, rule):
        wirelessfl.register_local_rule(name, rule, ClipOptions)
        names.append(name)

    yield add
    for n in names:
        registry.unregister(n)


def _final(raw):
    exp = open_run(wirelessfl.resolve_config(raw)).exp
    state = exp.initial_state()
    for _ in range(raw["rounds"]):
        state, _ = exp.algorithm.apply(state)
    return torch.cat([v.flatten() for v in state.params.values()])


def test_a_registered_rule_runs_from_a_config_on_both_engines(rules):
    rules("entry_clip", EntryClip)
    raw = {**BASE, "algorithm": {"name": "entry_clip", "clip": 0.05}}
    batched, loop = _final({**raw, "engine": "batched"}), _final({**raw, "engine": "loop"})
    torch.testing.assert_close(batched, loop, rtol=1e-5, atol=1e-6)
    plain = _final({**BASE, "algorithm": {"name": "fedavg"}, "engine": "loop"})
    assert not torch.allclose(batched, plain)  # the rule did something
    with pytest.raises(ValueError, match="clip"):
        wirelessfl.resolve_config({**raw, "algorithm": {"name": "entry_clip", "clip": -1}})


def test_a_non_elementwise_rule_is_not_silently_batched(rules, capsys):
    rules("norm_clip", NormClip)
    raw = {**BASE, "algorithm": {"name": "norm_clip", "clip": 0.05}}
    batched = _final({**raw, "engine": "batched"})
    loop = _final({**raw, "engine": "loop"})
    torch.testing.assert_close(batched, loop, rtol=1e-5, atol=1e-6)
    err = capsys.readouterr().err
    assert err.count("NormClip gives other numbers on stacked clients") == 1, err


def test_the_self_check_sees_the_difference_it_guards_against():
    from wirelessfl.engine.batch import ClientBatch
    from wirelessfl.engine.client import ClientTask, LocalHParams
    from wirelessfl.models import build_model

    model = build_model("fcnn", (1, 4, 4), 3, seed=0, hidden=5)
    hp = LocalHParams(lr=0.5, batch_size=4, steps=2)
    g = torch.Generator().manual_seed(0)
    data = ArrayDataset(torch.randn(16, 1, 4, 4, generator=g), torch.randint(0, 3, (16,), generator=g), 3)
    tasks = [ClientTask(client=i, params=model.params(), indices=torch.arange(8 * i, 8 * i + 8).numpy(),
                        seed=i) for i in range(2)]
    rule = NormClip(model, hp, 0.01)
    ex = BatchedExecutor("cpu")
    stacked = ex._run_group(rule, data, ClientBatch.from_tasks(tasks), hp)
    alone = ex._loop.run(rule, data, tasks, hp)
    assert not all(torch.allclose(s.delta[k], a.delta[k], rtol=1e-4, atol=1e-6)
                   for s, a in zip(stacked, alone) for k in s.delta)
    assert not ex._batchable(rule, data, tasks, hp)            # checked: falls back
    declared = type("Declared", (NormClip,), {"elementwise": False})(model, hp, 0.01)
    assert not ex._batchable(declared, data, tasks, hp)        # declared: no check needed


class TinyNet(FLModel):
    """A user's model: one linear layer."""

    def __init__(self, sample_shape, num_classes, width=3):
        super().__init__()
        n = 1
        for s in sample_shape:
            n *= s
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(n, width), nn.ReLU(), nn.Linear(width, num_classes))

    def forward(self, x):
        return self.body(x)


def _blobs(data_dir):
    g = torch.Generator().manual_seed(1)
    y = torch.arange(120) % 3
    x = torch.randn(120, 5, generator=g) * 0.3 + torch.nn.functional.one_hot(y, 5).float()
    return DatasetSplits("blobs", ArrayDataset(x[:90], y[:90], 3), ArrayDataset(x[90:], y[90:], 3))


def test_a_registered_model_and_dataset_run_from_a_config(tmp_path):
    wirelessfl.register_model("tiny_net", TinyNet)
    wirelessfl.register_dataset("blobs", _blobs)
    try:
        raw = {"name": "mine", "seed": 0, "rounds": 3,
               "data": {"dataset": "blobs", "num_clients": 3, "partition": "iid"},
               "model": {"name": "tiny_net", "options": {"width": 4}},
               "local": {"lr": 0.5, "batch_size": 10, "steps": 5}}
        wirelessfl.run_job(wirelessfl.open_run(raw), tmp_path / "r", quiet=True)
        rows = wirelessfl.RunRecord(tmp_path / "r").rows()
        assert rows[-1]["test_accuracy"] > 0.6  # three separable blobs: far above chance
    finally:
        del MODELS["tiny_net"]
        from wirelessfl.data.datasets import USER_DATASETS
        del USER_DATASETS["blobs"]


def test_bad_registrations_are_refused():
    with pytest.raises(ValueError, match="already"):
        wirelessfl.register_model("fcnn", TinyNet)
    with pytest.raises(TypeError, match="FLModel"):
        wirelessfl.register_model("x1", nn.Linear)
    with pytest.raises(ValueError, match="already"):
        wirelessfl.register_dataset("mnist", _blobs)
    with pytest.raises(TypeError, match="LocalSGD"):
        wirelessfl.register_local_rule("x2", object)
    with pytest.raises(ValueError, match="already"):
        wirelessfl.register_local_rule("fedavg", EntryClip, ClipOptions)
    from wirelessfl.algorithms.fedavg import FedAvgHParams

    with pytest.raises(TypeError, match="no init"):   # a class, but not an algorithm
        wirelessfl.register_algorithm("mine", FedAvgHParams, int)
    with pytest.raises(TypeError, match="no run"):
        wirelessfl.register_algorithm("mine_sim", FedAvgHParams, dict, kind="simulation")
    assert "mine" not in wirelessfl.algorithm_names()


def _median_step(algo, state, results):
    """Tutorial 2's FedMedian server step: along the coordinate-wise median of the Δ_i."""
    median = {k: torch.stack([r.delta[k] for r in results]).median(0).values for k in state.params}
    params, opt = algo.server_opt.step(state.params, median, state.opt_state)
    return algo.finish_round(state, params, opt, results)


def test_a_user_aggregate_override_gets_every_full_delta_and_folding_changes_no_number():
    """No hidden fold: a FedAvg subclass that overrides its server phase (a median) sees each
    client's whole Δ_i; FedAvg's own fold and an unfolded mean give the same model. Written
    against the phase's earlier name, ``aggregate``, it still runs (with a FutureWarning)."""
    from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams

    seen = []

    with pytest.warns(FutureWarning, match="server_update"):
        class FedMedian(FedAvg):
            def aggregate(self, state, plan, results, delivery=None):
                seen.append([{k: tuple(v.shape) for k, v in r.delta.items()} for r in results])
                return _median_step(self, state, results)

    class Unfolded(FedAvg):
        folds_deltas = False

    assert FedAvg.reads_deltas_through_combine() and not FedMedian.reads_deltas_through_combine()
    registry.register("fedmedian_t", FedAvgHParams, FedMedian)
    registry.register("unfolded_t", FedAvgHParams, Unfolded)
    try:
        _final({**BASE, "algorithm": {"name": "fedmedian_t"}})
        shapes = {k: tuple(v.shape) for k, v in build_params().items()}
        assert seen and all(d == shapes for r in seen for d in r)
        folded = _final({**BASE, "algorithm": {"name": "fedavg"}})
        unfolded = _final({**BASE, "algorithm": {"name": "unfolded_t"}})
        torch.testing.assert_close(folded, unfolded, rtol=1e-5, atol=1e-7)
    finally:
        registry.unregister("fedmedian_t")
        registry.unregister("unfolded_t")


def build_params():
    return open_run(wirelessfl.resolve_config({**BASE, "algorithm": {"name": "fedavg"}})).exp.model.params()


@pytest.mark.parametrize("damage, match", [
    ("labels", r"labels run 0\.\.4, outside \[0, 3\)"),
    ("shape", "differ; one model cannot read both"),
])
def test_a_plugin_dataset_is_checked_at_the_door(damage, match):
    """A registered dataset with labels past its classes, or test samples of another shape,
    is refused in one line when it loads (not an IndexError from torch mid-training)."""
    from wirelessfl.data import load_dataset
    from wirelessfl.data.datasets import USER_DATASETS

    def bad(folder):
        s = _blobs(folder)
        if damage == "labels":
            return DatasetSplits("bad", ArrayDataset(s.train.x, s.train.y * 2, 3), s.test)
        return DatasetSplits("bad", s.train, ArrayDataset(s.test.x[:, :1], s.test.y, 3))

    wirelessfl.register_dataset("bad_blobs", bad)
    try:
        with pytest.raises(ValueError, match=match):
            load_dataset("bad_blobs")
    finally:
        del USER_DATASETS["bad_blobs"]


class NarrowNet(TinyNet):
    """A user's model with one output column too few."""

    def __init__(self, sample_shape, num_classes, width=3):
        super().__init__(sample_shape, num_classes - 1, width)


class FrozenNet(TinyNet):
    """A user's model with nothing to train."""

    def __init__(self, sample_shape, num_classes, width=3):
        super().__init__(sample_shape, num_classes, width)
        for p in self.parameters():
            p.requires_grad_(False)


class ArgmaxNet(TinyNet):
    """A user's model that returns class ids' one-hot rows as integers (an argmax at its end)."""

    def forward(self, x):
        out = super().forward(x)
        return torch.nn.functional.one_hot(out.argmax(1), out.shape[1])


@pytest.mark.parametrize("model, match", [(NarrowNet, r"outputs of shape \(2, 2\)"),
                                          (FrozenNet, "no trainable parameters"),
                                          (ArgmaxNet, "torch.int64 outputs; it must give float")])
def test_a_plugin_model_is_checked_at_the_door(model, match):
    from wirelessfl.data.datasets import USER_DATASETS
    from wirelessfl.errors import ConfigError

    wirelessfl.register_model("door_net", model)
    wirelessfl.register_dataset("door_blobs", _blobs)
    try:
        raw = {"seed": 0, "rounds": 1, "data": {"dataset": "door_blobs", "num_clients": 3,
                                                "partition": "iid"},
               "model": {"name": "door_net"}}
        with pytest.raises(ConfigError, match=match):
            open_run(wirelessfl.resolve_config(raw))
    finally:
        del MODELS["door_net"]
        del USER_DATASETS["door_blobs"]


class Blowup(LocalSGD):
    """A user's rule that diverges: its correction multiplies the gradient by 1e38."""

    elementwise = True

    def __init__(self, model, hp, clip):
        super().__init__(model, hp)

    def correct(self, grads, params, start, ctx):
        return {k: g * 1e38 for k, g in grads.items()}


def test_divergence_advice_names_the_plugin_in_use(rules, tmp_path):
    """A run that diverges with a plug-in rule says which plug-in was in use, beside the
    advice to lower the learning rate."""
    from wirelessfl.errors import TrainingDiverged

    rules("blowup", Blowup)
    with pytest.raises(TrainingDiverged, match=r"plug-ins in use.*local rule Blowup"):
        wirelessfl.run_job(wirelessfl.open_run({**BASE, "algorithm": {"name": "blowup"}}),
                           tmp_path / "r", quiet=True)


class Shrunk(LocalSGD):
    """A broken rule: one number per parameter instead of a gradient."""

    elementwise = True

    def __init__(self, model, hp, clip):
        super().__init__(model, hp)

    def correct(self, grads, params, start, ctx):
        return {k: g.sum().reshape(1) for k, g in grads.items()}


class Emptied(Shrunk):
    def correct(self, grads, params, start, ctx):
        return {}


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_a_rule_whose_correction_has_the_wrong_shape_is_refused_in_one_line(rules, engine):
    """correct() returning (1,) tensors used to train silently by broadcasting, and {} failed
    with a bare key error: both are one client error naming the rule and the parameter, and
    from the command line one line (exit 2)."""
    from wirelessfl.engine.client import ClientError

    rules("shrunk", Shrunk)
    rules("emptied", Emptied)
    with pytest.raises(ClientError, match=r"local rule Shrunk: correct\(\) returned \(1,\) for"):
        _final({**BASE, "engine": engine, "algorithm": {"name": "shrunk"}})
    with pytest.raises(ClientError, match=r"local rule Emptied: correct\(\) returned \[\]"):
        _final({**BASE, "engine": engine, "algorithm": {"name": "emptied"}})


def test_an_algorithm_written_with_the_earlier_phase_name_gives_fedavg_s_numbers():
    """``aggregate`` calling ``super().aggregate`` (the earlier name of ``server_update``):
    the adapter runs it as the server phase, and it reaches FedAvg's own, the same rows."""
    from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams

    calls = []
    with pytest.warns(FutureWarning, match="rename it `server_update`"):
        class Old(FedAvg):
            def aggregate(self, state, plan, results, delivery=None):
                calls.append(len(results))
                return super().aggregate(state, plan, results, delivery)

    raw = {"seed": 1, "rounds": 2, "eval_every": 1, "device": "cpu",
           "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 20},
           "model": {"name": "linear"}, "local": {"lr": 0.05, "batch_size": 10, "steps": 2}}
    registry.register("old_phase_t", FedAvgHParams, Old)
    try:
        rows = {}
        for name in ("fedavg", "old_phase_t"):
            exp = open_run({**raw, "algorithm": {"name": name}}).exp
            state = exp.initial_state()
            for _ in range(2):
                state, _ = exp.algorithm.apply(state)
            rows[name] = state.params
    finally:
        registry.unregister("old_phase_t")
    assert calls == [6, 6]
    for k, v in rows["fedavg"].items():
        assert torch.equal(v, rows["old_phase_t"][k])


def test_a_user_server_phase_over_the_air_is_refused_not_run_without_the_channel():
    """Tutorial 2's kind of rule (a median of the clients' Δ_i) never sees the channel: over the
    air the server receives only the noisy sum, so the run is refused with the ways out. A
    rule that aggregates through combine and says so runs, with the channel's noise."""
    from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams

    class FedMedian(FedAvg):
        def server_update(self, state, plan, results, delivery=None):
            return _median_step(self, state, results)

    class Through(FedAvg):
        uses_uplink = True

        def server_update(self, state, plan, results, delivery=None):
            return super().server_update(state, plan, results, delivery)

    assert not FedMedian.uses_uplink and Through.uses_uplink and FedAvg.uses_uplink
    raw = {"seed": 1, "rounds": 1, "device": "cpu",
           "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 20},
           "model": {"name": "linear"}, "local": {"lr": 0.05, "batch_size": 10, "steps": 2},
           "network": {"model": "aircomp", "aggregation": "over_the_air"}}
    registry.register("median_air_t", FedAvgHParams, FedMedian)
    registry.register("through_air_t", FedAvgHParams, Through)
    try:
        with pytest.raises(ValueError, match="receives only their noisy sum"):
            open_run({**raw, "algorithm": {"name": "median_air_t"}})
        exp = open_run({**raw, "algorithm": {"name": "through_air_t"}}).exp
        _, report = exp.algorithm.apply(exp.initial_state())
        assert report.aircomp_mse > 0
        open_run({**raw, "network": {"model": "tdma"}, "algorithm": {"name": "median_air_t"}})
    finally:
        registry.unregister("median_air_t")
        registry.unregister("through_air_t")
