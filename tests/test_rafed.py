"""RA-Fed / RAM-Fed (docs/papers/rafed.md): limits, memory, masks, policies, operator C."""

import numpy as np
import pytest
import torch
from torch.func import functional_call

from wirelessfl.algorithms.rafed.masks import (
    draw,
    draw_levels,
    kept_units,
    parameter_fraction,
    ratio_for_fraction,
)
from wirelessfl.models import build_model
from wirelessfl.net.compression import compress, quantize_bound, relative_error
from wirelessfl.run.config import ConfigError, resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.rounds import RoundsJob
from wirelessfl.server.submodel import Submodel

SYN = {"seed": 5, "rounds": 2,
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 40},
       "model": {"name": "mlp", "options": {"hidden": [16, 12]}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3, "weight_decay": 5e-4}}


def _exp(name="rafed", engine=None, **algorithm):
    raw = {**SYN, "algorithm": {"name": name, **algorithm}}
    if engine:
        raw["engine"] = engine
    return open_run(raw).exp


def _rounds(exp, n=2):
    state, reports = exp.initial_state(), []
    for _ in range(n):
        state, report = exp.algorithm.apply(state)
        reports.append(report)
    return state, reports


def _close(a, b, **kw):
    for k in a:
        torch.testing.assert_close(a[k], b[k], **kw)


@pytest.mark.parametrize("name", ["rafed", "ramfed"])
def test_full_masks_equal_uniform_fedavg(name):
    fedavg = _rounds(_exp("fedavg", weighting="uniform"), 3)[0]
    ours = _rounds(_exp(name, ratios=[1.0]), 3)[0]
    _close(ours.params, fedavg.params, rtol=1e-5, atol=1e-6)


def test_first_ramfed_round_is_rafed_on_covered_and_leaves_the_rest():
    kw = {"ratios": [0.25], "policy": "prefix"}   # units beyond the prefix stay uncovered
    x0 = _exp("rafed", **kw).initial_state()
    ra, rep = _exp("rafed", **kw).algorithm.apply(x0)
    ram, _ = _exp("ramfed", **kw).algorithm.apply(x0)
    _close(ram.params, ra.params, rtol=1e-5, atol=1e-7)
    assert torch.equal(ra.params["fc1.weight"][4:], x0.params["fc1.weight"][4:])
    assert rep.covered_fraction < 1.0
    # round 2: uncovered coordinates of RAM-Fed still do not move (ū = 0 there), covered
    # ones differ from RA-Fed by the memory terms
    ram2, _ = _exp("ramfed", **kw).algorithm.apply(ram)
    assert torch.equal(ram2.params["fc1.weight"][4:], x0.params["fc1.weight"][4:])


def test_ramfed_memory_moves_uncovered_coordinates_by_ubar():
    """Round 2 of RAM-Fed, by hand from the stored memories (eq. of §2.3)."""
    exp = _exp("ramfed", ratios=[0.25], policy="rolling")  # round 2 leaves unit 0 uncovered
    algo = exp.algorithm
    s1, _ = algo.apply(exp.initial_state())
    assert len(s1.client_states) == 6 and all(v.device.type == "cpu"
                                              for t in s1.client_states.values() for v in t.values())
    usum = {k: sum(t[k] for t in s1.client_states.values()) for k in s1.params}
    _close(s1.opt_state.usum, usum)
    s2, rep = algo.apply(s1)
    n, lr = 6, 0.05
    # coordinates nobody covers in round 2 move by exactly γ ū
    stacked = algo._selections(1, np.arange(6), algo.base_ratio, s1.params)
    subs = [stacked.client(i) for i in range(6)]
    cov = sum(s.mask(s1.params)["fc1.weight"] for s in subs)
    free = cov == 0
    assert free.any()
    expect = s1.params["fc1.weight"] - lr * usum["fc1.weight"] / n
    torch.testing.assert_close(s2.params["fc1.weight"][free], expect[free])


def test_memory_float16_halves_the_store():
    s32 = _rounds(_exp("ramfed", ratios=[1.0]), 1)[0]
    s16 = _rounds(_exp("ramfed", ratios=[1.0], memory_dtype="float16"), 1)[0]
    from wirelessfl.engine.client_store import nbytes
    assert nbytes(s16.client_states) * 2 == nbytes(s32.client_states)
    d = sum(v.numel() for v in s32.params.values())
    assert nbytes(s32.client_states) == 6 * d * 4


def test_extracted_equals_masked_training_and_dropped_units_contribute_nothing():
    kw = {"ratios": [0.5, 0.25, 1.0]}
    a = _rounds(_exp("rafed", training="extract", **kw), 2)[0]
    b = _rounds(_exp("rafed", training="mask", **kw), 2)[0]
    _close(a.params, b.params, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["rafed", "ramfed", "heterofl", "fjord", "fedrolex"])
def test_loop_equals_batched(name):
    kw = {"ratios": [0.5, 0.25, 1.0]}
    a = _rounds(_exp(name, engine="loop", **kw), 2)[0]
    b = _rounds(_exp(name, engine="batched", **kw), 2)[0]
    _close(a.params, b.params, rtol=1e-4, atol=1e-6)


def test_baseline_settings_differ_from_rafed_where_they_should():
    kw = {"ratios": [0.5, 0.25, 1.0]}
    ra = _rounds(_exp("rafed", **kw), 1)[0].params
    for name in ("heterofl", "fjord", "fedrolex", "feddropout", "fedavg_small"):
        other = _rounds(_exp(name, **kw), 1)[0].params
        assert not torch.allclose(other["fc1.weight"], ra["fc1.weight"]), name
    # HeteroFL's scaler is the only difference from prefix RA-Fed
    pre = _rounds(_exp("rafed", policy="prefix", **kw), 1)[0].params
    het = _rounds(_exp("heterofl", scaler=False, **kw), 1)[0].params
    _close(pre, het)


def test_unit_coverage_is_logged_and_guaranteed_by_the_coverage_aware_policy():
    _, (rep,) = _rounds(_exp("rafed", ratios=[0.25], policy="coverage_aware", gamma_min=1), 1)
    assert rep.unit_coverage_min >= 1
    _, (rnd,) = _rounds(_exp("rafed", ratios=[0.25], policy="prefix"), 1)
    assert rnd.unit_coverage_min == 0 and rnd.covered_fraction < 1


def test_coverage_aware_guarantees_gamma_min():
    g = build_model("mlp", (1, 28, 28), 10, seed=0).unit_groups
    ratios = [1 / 16] * 40 + [1 / 8] * 10
    for gmin in (1, 2, 3):
        for seed in range(5):
            sels = draw("coverage_aware", g, ratios, 0, np.random.default_rng(seed), gamma_min=gmin)
            for grp in g:
                count = np.bincount(np.concatenate([s[grp.name].numpy() for s in sels]),
                                    minlength=grp.size)
                assert count.min() >= gmin
                assert [len(s[grp.name]) for s in sels] == [kept_units(grp, r) for r in ratios]
    with pytest.raises(ValueError, match="gamma_min"):
        draw("coverage_aware", g, ratios, 0, np.random.default_rng(0), gamma_min=10)
    # the plain random policy leaves units uncovered here
    sels = draw("random", g, [1 / 16] * 4, 0, np.random.default_rng(0))
    assert len(np.unique(np.concatenate([s["fc1"].numpy() for s in sels]))) < 200


def test_prefix_is_heterofl_nested_and_rolling_is_fedrolex_window():
    g = build_model("lenet5", (1, 28, 28), 10, seed=0).unit_groups
    sels = draw("prefix", g, [1.0, 0.5, 0.25], 7, np.random.default_rng(0))
    for grp in g:
        full, half, quarter = (s[grp.name].tolist() for s in sels)
        assert full == list(range(grp.size))
        assert half == list(range(-(-grp.size // 2))) and set(quarter) <= set(half)
    fc1 = next(x for x in g if x.name == "fc1")
    for q in (0, 5, 119, 130):
        (sel,) = draw("rolling", [fc1], [0.25], q, np.random.default_rng(0))
        assert sel["fc1"].tolist() == sorted((q + j) % 120 for j in range(30))


def test_static_policy_keeps_each_clients_units():
    exp = _exp("rafed", ratios=[0.5], policy="static")
    algo = exp.algorithm
    p = exp.initial_state().params
    a = algo._selections(0, np.arange(6), algo.base_ratio, p)
    b = algo._selections(9, np.arange(6), algo.base_ratio, p)
    assert all(torch.equal(x.dims["fc1.weight"][0], y.dims["fc1.weight"][0]) for x, y in zip(a, b))
    assert not torch.equal(a[0].dims["fc1.weight"][0], a[1].dims["fc1.weight"][0])


def test_lstm_gate_indices_are_consistent():
    m = build_model("char_lstm", (80,), 80, seed=0).eval()
    params = m.params()
    units = torch.tensor([3, 17, 42, 99])
    sub = Submodel(m.unit_groups, {"hidden": units}, params)
    small = sub.slice(params)
    assert small["ih.weight"].shape == (16, 8) and small["hh.weight"].shape == (16, 4)
    assert small["fc.weight"].shape == (80, 4)
    for b in range(4):  # gate block b, unit j: row b·H + j of the full matrix
        torch.testing.assert_close(small["hh.weight"][4 * b:4 * b + 4],
                                   params["hh.weight"][b * 100 + units][:, units])
    masked = {k: v * sub.mask(params)[k] for k, v in params.items()}
    x = torch.randint(0, 80, (3, 12)).float()
    torch.testing.assert_close(functional_call(m, small, (x,)), functional_call(m, masked, (x,)))


def test_resnet_groupnorm_keeps_an_even_channel_count():
    m = build_model("resnet18", (3, 32, 32), 10, seed=0)
    grp = m.unit_groups[2]  # layer2.0.inner: 128 channels
    assert grp.multiple == 2 and kept_units(grp, 0.71) % 2 == 0
    sel = draw("random", m.unit_groups, [0.71], 0, np.random.default_rng(0))[0]
    sub = Submodel(m.unit_groups, sel, m.params())
    out = functional_call(m.eval(), sub.slice(m.params()), (torch.randn(2, 3, 32, 32),))
    assert out.shape == (2, 10)


def test_parameter_fraction_of_fifty_percent_setting():
    m = build_model("mlp", (1, 28, 28), 10, seed=0)
    shapes = {k: v.shape for k, v in m.params().items()}
    r = ratio_for_fraction(m.unit_groups, shapes, 0.5)
    assert 0.5 <= parameter_fraction(m.unit_groups, shapes, r) < 0.51
    exp = _exp("ramfed", fraction=0.5)
    _, (rep,) = _rounds(exp, 1)
    assert 0.45 < rep.param_fraction < 0.6 and rep.neuron_ratio < 0.9


def test_quantiser_unbiased_within_its_bound_and_topk_error():
    gen = torch.Generator().manual_seed(0)
    p = {"w": torch.randn(50, generator=gen), "b": torch.rand(7, generator=gen)}
    draws = [compress(p, "quantize", bits=3, gen=gen) for _ in range(4000)]
    mean = {k: torch.stack([d[k] for d in draws]).mean(0) for k in p}
    _close(mean, p, atol=0.02, rtol=0)
    mse = np.mean([sum(float((d[k] - p[k]).pow(2).sum()) for k in p) for d in draws])
    assert 0 < mse <= quantize_bound(p, 3)
    top = compress(p, "topk", keep=0.2, gen=None)
    w2 = relative_error(p, top)
    assert w2 <= 1 - 0.2 and int((top["w"] != 0).sum()) == 10


def test_compressed_downlink_is_logged_and_server_keeps_uncompressed():
    _, (rep,) = _rounds(_exp("rafed", ratios=[1.0], compression="quantize", bits=4), 1)
    assert 0 < rep.compression_w2_sq < 0.05


def test_deadline_policy_gives_each_client_the_largest_level_it_affords():
    levels = [1.0, 0.5, 0.25, 0.125]
    exp = _exp("rafed", ratios=levels, resources="deadline", deadline_quantile=0.5)
    state, (rep,) = _rounds(exp, 1)
    algo = exp.algorithm
    ratios, seconds = algo._ratios(0, np.arange(6), sum(v.numel() for v in state.params.values()))
    assert set(ratios) <= {0.0, *levels} and rep.latency_s == pytest.approx(seconds.max())
    full = algo._ratios.__func__  # full-model times of the same round
    fedavg = _exp("rafed", ratios=[1.0], timing=True)
    _, (rep_full,) = _rounds(fedavg, 1)
    assert rep.latency_s <= rep_full.latency_s and full
    assert (ratios == 1.0).sum() >= 3  # half the clients meet the median deadline in full


def test_bad_settings_are_one_line_errors():
    for bad in ({"ratios": [0.0]}, {"ratios": [1.5]}, {"policy": "best"}, {"gamma_min": 0},
                {"compression": "zip"}, {"bits": 40}, {"fraction": 2.0},
                {"step_widths": True, "policy": "random"}, {"memory_dtype": "int8"}):
        with pytest.raises(ConfigError):
            resolve({**SYN, "algorithm": {"name": "rafed", **bad}})
    from dataclasses import replace

    from wirelessfl.algorithms.rafed.rafed import RAFed, RAFedHParams
    env = _exp("fedavg").algorithm.env
    with pytest.raises(ValueError, match="BatchNorm"):
        RAFed(replace(env, model=build_model("resnet18_bn", (3, 32, 32), 10, seed=0)), RAFedHParams())
    with pytest.raises(ValueError, match="no prunable units"):
        RAFed(replace(env, model=build_model("linear", (1, 28, 28), 10, seed=0)), RAFedHParams())


@pytest.mark.parametrize("algorithm", [
    {"name": "ramfed", "ratios": [0.5, 0.25], "memory_dtype": "float16"},
    {"name": "rafed", "ratios": [0.5, 1.0], "policy": "coverage_aware", "gamma_min": 2,
     "resources": "deadline", "compression": "quantize", "bits": 6}])
def test_resume_equals_uninterrupted(tmp_path, interrupt_after, algorithm):
    """The memories, Σu and Γ* are checkpointed: a resumed run gives the same numbers."""
    import json

    from wirelessfl.run.records import RunRecord

    raw = {**SYN, "name": "r", "rounds": 4, "checkpoint_every": 1, "algorithm": algorithm}
    run_job(open_run(raw), tmp_path / "full", quiet=True)
    exp = open_run(raw).exp
    interrupt_after(exp, 2)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    run_job(open_run(raw), tmp_path / "cut", resume=True, quiet=True)

    def rows(f):
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(f).rows()]

    assert rows(tmp_path / "cut") == rows(tmp_path / "full")
    assert "gamma_star" in rows(tmp_path / "full")[-1]
    assert json.loads((tmp_path / "full" / "summary.json").read_text())["rounds"] == 4


def test_ramfed_round_by_hand_on_covered_and_uncovered_coordinates():
    """θ_{q+1} = θ_q − γ (ū + Σ_n m_n ⊙ (Δ_n − u_n) ⊘ max(Γ, 1)), memories refreshed (§2.3)."""
    exp = _exp("ramfed", ratios=[0.5, 0.25])
    algo, lr, n = exp.algorithm, 0.05, 6
    s1, _ = algo.apply(exp.initial_state())
    clients = np.arange(n)
    stacked = algo._selections(1, clients, algo.base_ratio, s1.params)
    subs = [stacked.client(i) for i in range(n)]  # client by client, as written in §2.3
    rate = [{"inv": torch.tensor(1.0 / r), "allowed": torch.tensor(1)} for r in algo.base_ratio]
    results = algo.train_clients([s.slice(s1.params) for s in subs], clients, 1,
                                 broadcast=[{"rate": r} for r in rate])
    zero = {k: torch.zeros_like(v) for k, v in s1.params.items()}
    masks = [s.mask(s1.params) for s in subs]
    deltas = [s.scatter(zero, {k: v / lr for k, v in r.delta.items()}) for s, r in zip(subs, results)]
    mem = [s1.client_states[c] for c in clients]
    s2, _ = algo.apply(s1)
    for k in s1.params:
        cov = sum(m[k] for m in masks)
        corr = sum(m[k] * (d[k] - u[k]) for m, d, u in zip(masks, deltas, mem)) / cov.clamp(min=1)
        v = sum(u[k] for u in mem) / n + corr
        torch.testing.assert_close(s2.params[k], s1.params[k] - lr * v, rtol=1e-5, atol=1e-6)
        for c, m, d, u in zip(clients, masks, deltas, mem):  # u_n ← u_n + m ⊙ (Δ − u_n)
            torch.testing.assert_close(s2.client_states[c][k], u[k] + m[k] * (d[k] - u[k]))


def test_the_heterofl_preset_learns_fashion_mnist(fmnist):
    """The shipped preset (no scaler on this normalisation-free MLP: with it, NaN in round 2)
    learns above chance in two rounds on real Fashion-MNIST."""
    from wirelessfl.engine.client import evaluate
    from wirelessfl.run.config import load_raw

    raw = load_raw("heterofl_fmnist")
    assert raw["algorithm"]["scaler"] is False
    exp = open_run({**raw, "rounds": 2}).exp
    state, reports = _rounds(exp, 2)
    acc, loss = evaluate(exp.model, state.params, exp.splits.test)
    assert acc > 0.4 and np.isfinite(loss)  # chance is 0.1


@pytest.mark.parametrize("name,shape", [("mlp", (1, 28, 28)), ("char_lstm", (80,)),
                                        ("lenet5", (1, 28, 28))])
def test_a_submodel_stack_s_views_are_each_client_s_submodel(name, shape):
    """Stacked views (one operator a parameter) equal the per-client Submodel's, row by row:
    slice, slice_rows, scatter_rows, masks, write_rows and the accumulating add_into."""
    from wirelessfl.server.submodel import SubmodelStack

    m = build_model(name, shape, 80 if name == "char_lstm" else 10, seed=0)
    params = m.params()
    levels = draw_levels("random", m.unit_groups, [0.5, 0.3, 0.5, 0.5], 0,
                         np.random.default_rng(1))
    rows, sel = next((r, s) for r, s in levels if len(r) == 3)
    stack = SubmodelStack(m.unit_groups, sel, params)
    subs = [Submodel(m.unit_groups, {g: s[i] for g, s in sel.items()}, params) for i in range(3)]
    g = torch.Generator().manual_seed(0)
    full = {k: torch.randn((3, *v.shape), generator=g) for k, v in params.items()}
    sliced, rowwise = stack.slice(params), stack.slice_rows(full)
    scattered, masks = stack.scatter_rows(rowwise), stack.masks(params)
    acc = {k: torch.zeros_like(v) for k, v in params.items()}
    stack.add_into(acc, rowwise)
    written = stack.write_rows({k: torch.zeros_like(v) for k, v in full.items()}, rowwise)
    zero = {k: torch.zeros_like(v) for k, v in params.items()}
    for i, sub in enumerate(subs):
        mine = sub.slice({k: v[i] for k, v in full.items()})
        for k in params:
            assert torch.equal(sliced[k][i], sub.slice(params)[k])
            assert torch.equal(rowwise[k][i], mine[k])
            assert torch.equal(masks[k][i], sub.mask(params)[k])
            assert torch.equal(written[k][i], sub.scatter(zero, mine)[k])
            if k in stack.dims:
                assert torch.equal(scattered[k][i], sub.scatter(zero, mine)[k])
    assert stack.num_params() == subs[0].num_params(params)
    for k in params:  # Σ_c of each client's scattered rows (shared ones: the rows' sum)
        want = sum(sub.scatter(zero, sub.slice({j: v[i] for j, v in full.items()}))[k]
                   for i, sub in enumerate(subs))
        torch.testing.assert_close(acc[k], want, rtol=1e-6, atol=1e-6)


def test_a_submodel_stack_refuses_bad_selections_in_one_line():
    from wirelessfl.server.submodel import SubmodelStack

    m = build_model("mlp", (1, 28, 28), 10, seed=0, hidden=[8, 6])
    like, (g1, g2) = m.params(), (m.unit_groups[0].name, m.unit_groups[1].name)
    ok = torch.tensor([[0, 1], [2, 3]])
    for sel, match in [({g1: torch.tensor([[0.5, 1.0]])}, "integers"),
                       ({g1: torch.tensor([0, 1])}, "integers"),
                       ({g1: torch.tensor([[0, 0]])}, "repeat"),
                       ({g1: torch.tensor([[0, 9]])}, r"\[0, 8\)"),
                       ({g1: ok, g2: torch.tensor([[0, 1]])}, "one row per client"),
                       ({"nope": ok}, "unit group")]:
        with pytest.raises(ValueError, match=match) as err:
            SubmodelStack(m.unit_groups, sel, like)
        assert "\n" not in str(err.value)
    with pytest.raises(TypeError, match="selection"):
        SubmodelStack(m.unit_groups, {}, like)
