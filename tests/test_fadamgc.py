"""FAdamGC, FA-NT and LocalAdam: the sanity tests of docs/papers/fadamgc.md §2.9."""

import dataclasses

import numpy as np
import pytest
import torch

from wirelessfl.algorithms.fadamgc.local import AdamClientState, TrackedAdam
from wirelessfl.data.arrays import ArrayDataset
from wirelessfl.engine import client_store
from wirelessfl.engine.client import ClientTask, LocalHParams
from wirelessfl.engine.client_store import ClientStore, StaleStore
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import open_run

RAW = {"seed": 2, "data": {"dataset": "synthetic", "num_clients": 10, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.0}},
       "local": {"lr": 0.003, "batch_size": 10, "steps": 5}}


def _exp(algorithm, engine="batched"):
    return open_run({**RAW, "engine": engine, "algorithm": algorithm}).exp


def _rounds(exp, n):
    """The initial state and the states after each of n rounds, each with a copy of the client
    store as that round left it (the store itself is updated in place by the next round)."""
    states, live = [exp.initial_state()], exp.initial_state()
    for _ in range(n):
        live = exp.algorithm.apply(live)[0]
        states.append(_kept(live))
    return states


def _kept(state):
    held = state.client_states
    return dataclasses.replace(state, client_states=held.copy() if isinstance(held, ClientStore)
                               else held)


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_without_tracking_fadamgc_is_local_adam_bit_for_bit(engine):
    gc = _rounds(_exp({"name": "fadamgc", "clients_per_round": 4, "tracked": 0}, engine), 3)[-1]
    la = _rounds(_exp({"name": "local_adam", "clients_per_round": 4}, engine), 3)[-1]
    for k in gc.params:
        assert torch.equal(gc.params[k], la.params[k])


def test_y_is_the_mean_of_every_client_correction_after_every_round():
    exp = _exp({"name": "fadamgc", "clients_per_round": 4, "tracked": 2})
    zeros = {k: torch.zeros_like(v) for k, v in exp.initial_state().params.items()}
    for state in _rounds(exp, 4)[1:]:
        ys = [client_store.load(s.y, zeros) if s is not None and s.y is not None else zeros
              for s in (state.client_states.get(i) for i in range(10))]
        for k in zeros:
            mean = sum(y[k] for y in ys) / 10
            torch.testing.assert_close(state.opt_state.y[k], mean, rtol=1e-5, atol=1e-7)
    assert sum(s.y is not None for s in state.client_states.values()) >= 2
    assert all(isinstance(s, AdamClientState) for s in state.client_states.values())  # typed


def test_v_persists_only_for_sampled_clients():
    exp = _exp({"name": "fadamgc", "clients_per_round": 3})
    s1, r1 = exp.algorithm.apply(exp.initial_state())
    before = s1.client_states.copy()
    s2, r2 = exp.algorithm.apply(s1)
    assert set(before) == set(r1.clients) and len(r1.clients) == 3
    for u, st in before.items():
        if u in r2.clients:  # sampled again: its v_i moved on
            assert not torch.equal(s2.client_states[u].v["fc1.weight"], st.v["fc1.weight"])
        else:  # not sampled: kept as it was
            for k, v in st.v.items():
                assert torch.equal(s2.client_states[u].v[k], v)


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_local_steps_leave_the_stored_v_and_the_received_model_as_they_were(engine):
    """The moments are updated in place: on copies, never on the store's v_i or the start."""
    exp = _exp({"name": "fadamgc", "clients_per_round": 4}, engine=engine)
    s1, _ = exp.algorithm.apply(exp.initial_state())
    stored = {u: {k: v.clone() for k, v in st.v.items()} for u, st in s1.client_states.items()}
    held = s1.client_states[next(iter(s1.client_states))].v  # a client's copy, read before
    kept = {k: v.clone() for k, v in held.items()}
    params = {k: v.clone() for k, v in s1.params.items()}
    s2, r2 = exp.algorithm.apply(s1)
    for k, v in held.items():  # what a client read is its own copy
        assert torch.equal(v, kept[k])
    for u in set(stored) - set(r2.clients):  # not sampled again: its v_i as stored
        for k, v in s2.client_states[u].v.items():
            assert torch.equal(v, stored[u][k])
    for k, v in s1.params.items():
        assert torch.equal(v, params[k])
    with pytest.raises(StaleStore, match="updated by a later round"):
        s1.client_states[next(iter(stored))]  # the store moved on with the round


class Quadratic(TrackedAdam):
    """f_i(x) = ½ mean_b (a_b x − b_b)² with exact (full-batch) gradients."""

    def objective(self, params, buffers, start, x, y, w, ctx):
        r = x[:, 0] * params["x"][0]
        data = 0.5 * ((r - y) ** 2 * w).sum()
        return data, data


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.x = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x * self.x


def _quadratic_round(correction, targets, y_i, y):
    """One local round of each client at x* = 0, exact gradients (batch = all samples)."""
    model = _Model()
    n = 4
    xs = torch.ones(len(targets) * n, 1)
    ys = torch.cat([torch.full((n,), float(b)) for b in targets])
    data = ArrayDataset(xs, ys, 1)
    hp = LocalHParams(lr=0.1, batch_size=n, steps=3)
    rule = Quadratic(model, hp, correction)
    start = {"x": torch.zeros(1)}
    tasks = [ClientTask(i, start, np.arange(i * n, i * n + n), seed=i,
                        state=AdamClientState(y={"x": torch.tensor([y_i[i]])}),
                        broadcast={"y": {"x": torch.tensor([y])}, "tracked": set()})
             for i in range(len(targets))]
    results = LoopExecutor().run(rule, data, tasks, hp)
    return sum(float(r.delta["x"]) for r in results) / len(results)


def test_fixed_point_on_heterogeneous_quadratics():
    """At x* with y_i = ∇f_i(x*): FAdamGC stays exactly; LocalAdam and FA-NT move (§2.9 item 3)."""
    targets = [2.0, -1.0, -1.0]  # ∇f_i(0) = −b_i = (−2, 1, 1): x* = 0, ∇f(0) = 0 exactly
    grads = [-b for b in targets]
    assert _quadratic_round("pre", targets, grads, 0.0) == 0.0
    assert _quadratic_round("none", targets, grads, 0.0) != 0.0
    # FA-NT with its own self-consistent values: y_i = Δ_i(x*) (sign at a first step), y = mean
    directions = [float(np.sign(g)) for g in grads]
    moved = _quadratic_round("post", targets, directions, float(np.mean(directions)))
    assert abs(moved) > 1e-3


def test_beta2_zero_steps_are_bounded_by_the_local_rate():
    exp = _exp({"name": "fadamgc", "betas": [0.9, 0.0], "clients_per_round": 4})
    model, hp = exp.model, LocalHParams(lr=0.01, batch_size=10, steps=6)
    params = exp.initial_state().params
    env = exp.algorithm.env
    tasks = [ClientTask(u, params, env.client_indices[u], seed=u,
                        broadcast={"y": {k: torch.randn_like(v) for k, v in params.items()},
                                   "tracked": set()}) for u in range(3)]
    for r in LoopExecutor().run(TrackedAdam(model, hp, "pre", (0.9, 0.0)), env.train, tasks, hp):
        for d in r.delta.values():  # |Δ| ≤ 1 per coordinate and step
            assert float(d.abs().max()) <= 6 * 0.01 + 1e-7


def test_vector_counts_and_round_time():
    exp = open_run({**RAW, "algorithm": {"name": "fadamgc", "clients_per_round": 4},
                           "network": {"model": "fixed", "rate_mbps": 100, "step_seconds": 0.02}}).exp
    state = exp.initial_state()
    _, report = exp.algorithm.apply(state)
    d = sum(v.numel() for v in state.params.values())
    assert report.uplink_params == pytest.approx((1 + 2 / 4) * d)  # S̃ = S/2 tracked
    assert report.downlink_params == pytest.approx(2 * d)         # x and y
    seconds = exp.link.round_seconds(report, np.random.default_rng(0))
    assert seconds == pytest.approx((2 * d + 1.5 * d) * 32 / 1e8 + 5 * 0.02)
    _, la = _exp({"name": "local_adam", "clients_per_round": 4}).algorithm.apply(state)
    assert la.uplink_params == pytest.approx(d) and la.downlink_params == pytest.approx(d)


@pytest.mark.parametrize("name", ["fadamgc", "fa_nt", "local_adam"])
@pytest.mark.parametrize("sizes", ["equal", "unequal"])
def test_loop_equals_batched(name, sizes):
    """Unequal: a Dirichlet split and one epoch, so stacked clients finish at different
    steps and keep their moments while the others go on."""
    def exp(engine):
        if sizes == "equal":
            return _exp({"name": name, "clients_per_round": 4}, engine)
        return open_run({**RAW, "engine": engine, "algorithm": {"name": name},
                                "data": {**RAW["data"], "partition": "dirichlet_over_clients",
                                         "alpha": 0.5},
                                "local": {**RAW["local"], "epochs": 1,
                                          "batch_size": 8}}).exp
    loop, batched = _rounds(exp("loop"), 3)[-1], _rounds(exp("batched"), 3)[-1]
    for k in loop.params:
        # Adam's normalised steps carry float differences of the stacked GEMMs along
        torch.testing.assert_close(loop.params[k], batched.params[k], rtol=1e-4, atol=5e-5)


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_norm_normaliser_at_beta2_zero_bounds_each_client_step_norm(engine):
    # §2.5 analysis variant: Δ = m / ‖√v̂‖ (one scalar per client), so ‖Δ‖ ≤ 1 per step
    exp = _exp({"name": "fadamgc", "betas": [0.9, 0.0], "eps": 0.0, "normaliser": "norm",
                "clients_per_round": 4, "tracked": 0}, engine)
    _, report = exp.algorithm.apply(exp.initial_state())
    results = exp.algorithm.train_clients([exp.initial_state().params] * 3, [0, 1, 2], 0)
    for r in results:
        norm = float(torch.sqrt(sum((d ** 2).sum() for d in r.delta.values())))
        assert 0 < norm <= r.num_steps * RAW["local"]["lr"] * (1 + 1e-5)
    elementwise = _exp({"name": "fadamgc", "betas": [0.9, 0.0], "eps": 0.0,
                        "clients_per_round": 4, "tracked": 0}, engine)
    other = elementwise.algorithm.train_clients([exp.initial_state().params] * 3, [0, 1, 2], 0)
    assert not torch.allclose(results[0].delta["fc1.weight"], other[0].delta["fc1.weight"])


def test_norm_normaliser_loop_equals_batched():
    algo = {"name": "fadamgc", "normaliser": "norm", "clients_per_round": 4}
    loop = _rounds(_exp(algo, "loop"), 2)[-1]
    batched = _rounds(_exp(algo, "batched"), 2)[-1]
    for k in loop.params:
        torch.testing.assert_close(loop.params[k], batched.params[k], rtol=1e-4, atol=5e-5)


@pytest.mark.parametrize("name", ["fadamgc", "fa_nt"])
def test_warm_start_gives_every_client_a_correction_and_y_their_mean(name):
    exp = _exp({"name": name, "warm_start": True, "clients_per_round": 4})
    state = exp.algorithm.warm_start(exp.initial_state())
    zeros = {k: torch.zeros_like(v) for k, v in state.params.items()}
    ys = [client_store.load(state.client_states[i].y, zeros) for i in range(10)]
    for k in zeros:
        torch.testing.assert_close(state.opt_state.y[k], sum(y[k] for y in ys) / 10)
    assert all(float(y["fc1.weight"].abs().sum()) > 0 for y in ys)
    assert all(s.v is None for s in state.client_states.values())  # v_i^(1) = 0
    if name == "fa_nt":  # the first Δ of Algorithm 2 at (0.9, 0.99): sign(g) element-wise
        a = ys[0]["fc1.weight"].abs()
        assert bool(torch.all((a > 0.999) & (a <= 1) | (a == 0)))
    warm = exp.algorithm.apply(exp.initial_state())[0]
    cold = _exp({"name": name, "clients_per_round": 4}).algorithm.apply(exp.initial_state())[0]
    assert not torch.equal(warm.params["fc1.weight"], cold.params["fc1.weight"])
    assert len(warm.client_states) == 10 and warm.round == 1


def test_library_local_adam_is_fedavg_with_a_bias_corrected_local_adam():
    lib = _rounds(_exp({"name": "local_adam", "adam": "library", "clients_per_round": 4}), 2)[-1]
    raw = {**RAW, "local": {**RAW["local"], "optimizer": "adam", "betas": [0.9, 0.99]},
           "algorithm": {"name": "fedavg", "clients_per_round": 4, "weighting": "uniform"}}
    ref = _rounds(open_run({**raw, "engine": "batched"}).exp, 2)[-1]
    for k in lib.params:
        assert torch.equal(lib.params[k], ref.params[k])
    assert lib.client_states == {}


@pytest.mark.parametrize("algo", [{"name": "fadamgc", "adam": "library"},
                                  {"name": "local_adam", "warm_start": True},
                                  {"name": "fadamgc", "normaliser": "l1"},
                                  {"name": "fadamgc", "clients_per_round": 4, "tracked": 5}])
def test_inconsistent_options_are_refused(algo):
    with pytest.raises(ValueError, match="library|warm_start|normaliser|tracked"):
        resolve({**RAW, "algorithm": algo})
