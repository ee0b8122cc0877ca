"""Robust aggregation rules and simulated attacks (issue 73, item 3 and the first of item 4):
each rule equals a plain NumPy implementation, resists an outlier, costs no Python per client,
and is refused where it cannot work (over the air)."""

import cProfile
import pstats

import numpy as np
import pytest
import torch

from wirelessfl.run.kinds import open_run
from wirelessfl.server.aggregation import Mean
from wirelessfl.server.robust import (
    Bulyan,
    Krum,
    Median,
    NormBounded,
    StackedRule,
    TrimmedMean,
    robust_aggregator,
)

RAW = {"seed": 4, "rounds": 4,
       "data": {"dataset": "synthetic", "num_clients": 10, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3}}


def _stack(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(n, 3, 4, generator=g, dtype=torch.float64),
            "b": torch.randn(n, 5, generator=g, dtype=torch.float64)}


def _flat(stack):
    return np.concatenate([v.reshape(v.shape[0], -1).numpy() for v in stack.values()], 1)


def _np_krum(x, f, m):
    n = len(x)
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    near = max(1, min(n - 1, n - f - 2))
    scores = np.array([np.sort(np.delete(d[i], i))[:near].sum() for i in range(n)])
    return x[np.argsort(scores, kind="stable")[:m]].mean(0)


def _np_bulyan(x, f):
    """Bulyan as El Mhamdi et al. write it: Krum among the rows left, θ = n − 2f times, then
    per coordinate the mean of the β = θ − 2f chosen values closest to their median."""
    left, chosen = list(range(len(x))), []
    for _ in range(len(x) - 2 * f):
        sub = x[left]
        if len(left) == 1:
            pick = 0
        else:
            d = ((sub[:, None] - sub[None]) ** 2).sum(-1)
            near = max(1, min(len(left) - 1, len(left) - f - 2))
            pick = int(np.argmin([np.sort(np.delete(d[i], i))[:near].sum()
                                  for i in range(len(left))]))
        chosen.append(left.pop(pick))
    s = x[chosen]
    beta = len(chosen) - 2 * f
    out = np.empty(x.shape[1])
    for j in range(x.shape[1]):
        order = np.argsort(np.abs(s[:, j] - np.median(s[:, j])), kind="stable")[:beta]
        out[j] = s[order, j].mean()
    return out


@pytest.mark.parametrize("n", [1, 3, 7, 8, 12])
def test_bulyan_equals_a_plain_numpy_implementation(n):
    stack = _stack(n, 10 + n)
    x = _flat(stack)
    for f in (0, 1, 2):
        got = Bulyan(f).aggregate_stack(stack, np.ones(n), np.random.default_rng(0))[0]
        fit = min(f, max(0, (n - 3) // 4))  # the f this round can tolerate
        np.testing.assert_allclose(_flat({k: v[None] for k, v in got.items()})[0],
                                   _np_bulyan(x, fit), rtol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 7, 8])
def test_each_rule_equals_a_plain_numpy_implementation(n):
    stack = _stack(n, n)
    x, rng, w = _flat(stack), np.random.default_rng(0), np.ones(n)

    def got(rule):
        return _flat({k: v[None] for k, v in rule.aggregate_stack(stack, w, rng)[0].items()})[0]

    np.testing.assert_allclose(got(Median()), np.median(x, 0), rtol=1e-12)
    for trim in (0.0, 0.2, 0.4):
        cut = int(np.floor(trim * n))
        want = np.sort(x, 0)[cut:n - cut].mean(0)
        np.testing.assert_allclose(got(TrimmedMean(trim)), want, rtol=1e-12)
    for f, m in ((0, 1), (1, 1), (2, 3)):
        np.testing.assert_allclose(got(Krum(f, m)), _np_krum(x, f, m), rtol=1e-12)
    norms = np.linalg.norm(x, axis=1)
    clipped = x * np.minimum(1.0, 0.7 / norms)[:, None]
    np.testing.assert_allclose(got(NormBounded(0.7)), clipped.mean(0), rtol=1e-12)
    assert (np.linalg.norm(_flat(NormBounded(0.7).clipped(stack)), axis=1) <= 0.7 + 1e-12).all()


def test_the_rules_resist_one_huge_outlier_and_the_mean_does_not():
    stack = _stack(9, 1)
    bad = {k: v.clone() for k, v in stack.items()}
    for v in bad.values():
        v[4] = 1e6
    w, rng = np.ones(9), np.random.default_rng(0)
    honest = np.abs(np.delete(_flat(stack), 4, axis=0)).max()
    for rule in (Median(), TrimmedMean(0.2), Krum(1), Bulyan(1), NormBounded(1.0)):
        hit = _flat({k: v[None] for k, v in rule.aggregate_stack(bad, w, rng)[0].items()})
        assert np.abs(hit).max() <= honest + 1.0, rule  # within the honest rows' range
    mean = _flat({k: v[None] for k, v in Mean().aggregate_stack(bad, w, rng)[0].items()})
    assert np.abs(mean).max() > 1e4


def test_the_rules_cost_no_python_per_client():
    def calls(rule, n):
        prof = cProfile.Profile()
        prof.runcall(rule.aggregate_stack, _stack(n), np.ones(n), np.random.default_rng(0))
        return pstats.Stats(prof).total_calls

    for rule in (Median(), TrimmedMean(0.1), Krum(1, 2), NormBounded(1.0)):
        assert calls(rule, 200) == calls(rule, 8), rule


def test_attackers_are_a_fixed_fraction_and_sign_flip_is_exact():
    raw = {**RAW, "algorithm": {"name": "fedavg", "attack": "sign_flip", "attackers": 0.3,
                                "attack_scale": 2.0}}
    algo = open_run(raw).exp.algorithm
    assert len(algo.attackers) == 3 and set(algo.attackers) < set(range(10))
    assert np.array_equal(open_run(raw).exp.algorithm.attackers, algo.attackers)  # per run
    stack = _stack(10)
    out = algo.attacked(stack, np.arange(10), 0)
    factor = np.where(np.isin(np.arange(10), algo.attackers), -2.0, 1.0)
    for k in stack:
        torch.testing.assert_close(out[k], stack[k] * torch.as_tensor(factor).reshape(
            -1, *[1] * (stack[k].dim() - 1)))


def test_the_noise_attack_has_the_configured_variance():
    """Monte Carlo: an attacker's added noise has variance (s · its row's RMS)² per entry."""
    raw = {**RAW, "algorithm": {"name": "fedavg", "attack": "noise", "attackers": 0.5,
                                "attack_scale": 3.0}}
    algo = open_run(raw).exp.algorithm
    stack = {"w": torch.ones(10, 20000, dtype=torch.float64) * 0.5}
    out = algo.attacked(stack, np.arange(10), 7)["w"] - stack["w"]
    bad = np.isin(np.arange(10), algo.attackers)
    var = out[torch.as_tensor(bad)].var().item()
    assert abs(var - (3.0 * 0.5) ** 2) < 0.03 * (3.0 * 0.5) ** 2
    assert (out[torch.as_tensor(~bad)] == 0).all()


def test_label_flip_trains_the_attackers_on_flipped_labels_and_no_one_else():
    """The attackers' own samples read K − 1 − y, every other sample its label; the inputs are
    the same tensor; a round trains on it (loop = batched) and the uploads are left as sent."""
    raw = {**RAW, "algorithm": {"name": "fedavg", "attack": "label_flip", "attackers": 0.3}}
    exp = open_run(raw).exp
    algo, clean = exp.algorithm, open_run({**RAW, "algorithm": {"name": "fedavg"}}).exp
    train, before = algo.env.train, clean.algorithm.env.train
    assert train.x is exp.splits.train.x or torch.equal(train.x, before.x)
    bad = np.concatenate([algo.env.client_indices[c] for c in algo.attackers])
    flipped = np.zeros(len(train), bool)
    flipped[bad] = True
    y, y0 = train.y.cpu().numpy(), before.y.cpu().numpy()
    assert (y[flipped] == train.num_classes - 1 - y0[flipped]).all()
    assert (y[~flipped] == y0[~flipped]).all() and flipped.sum() > 0
    stack = _stack(10)
    assert algo.attacked(stack, np.arange(10), 0) is stack
    rows = {}
    for engine in ("loop", "batched"):
        run = open_run({**raw, "engine": engine, "rounds": 2}).exp
        state, _ = run.algorithm.apply(run.initial_state())
        rows[engine] = state.params
    for k in rows["loop"]:
        torch.testing.assert_close(rows["loop"][k], rows["batched"][k], rtol=1e-4, atol=1e-6)


def test_label_flip_is_refused_where_clients_share_samples():
    raw = {**RAW, "data": {**RAW["data"], "dataset": "synthetic"},
           "algorithm": {"name": "fedavg", "attack": "label_flip", "attackers": 0.3}}
    from wirelessfl.algorithms.attacks import flipped_labels
    from wirelessfl.errors import ConfigError

    env = open_run({**raw, "algorithm": {"name": "fedavg"}}).exp.algorithm.env
    import dataclasses

    shared = dataclasses.replace(env, client_indices=(env.client_indices[0],) * 2)
    with pytest.raises(ConfigError, match="several clients"):
        flipped_labels(shared, np.array([0]))


@pytest.mark.parametrize("algorithm", [
    {"name": "fedavg", "robust": "median", "attack": "sign_flip", "attackers": 0.2},
    {"name": "scaffold", "robust": "trimmed_mean", "trim": 0.2},
    {"name": "fedprox", "mu": 0.01, "robust": "krum", "byzantine": 2, "krum_select": 3},
    {"name": "fadamgc", "robust": "norm_bounded", "norm_bound": 0.5, "attack": "scaled",
     "attackers": 0.1, "attack_scale": 10.0},
])
def test_robust_runs_train_and_resume(algorithm, cut_and_resume):
    full, resumed = cut_and_resume({**RAW, "algorithm": algorithm})
    assert resumed == full


def test_norm_bounded_goes_over_the_air_and_the_order_statistics_do_not():
    over = {"model": "aircomp", "aggregation": "over_the_air"}
    run = open_run({**RAW, "algorithm": {"name": "fedavg", "robust": "norm_bounded"},
                    "network": over})
    assert "AirComp" in repr(run.exp.algorithm.aggregator)
    for rule in ("median", "trimmed_mean", "krum", "bulyan"):
        with pytest.raises(ValueError, match="not a sum"):
            open_run({**RAW, "algorithm": {"name": "fedavg", "robust": rule}, "network": over})
    with pytest.raises(ValueError, match="not a sum"):
        robust_aggregator("median", run.exp.algorithm.uplink)


@pytest.mark.parametrize("setting, match", [
    ("algorithm.trim=0.5", "trim"),
    ("algorithm.norm_bound=-1", "norm_bound"),
    ("algorithm.trim=0.2", "robust: trimmed_mean"),
    ("algorithm.attack=sign_flip", "attackers"),
    ("algorithm.robust=zeno", "robust"),
    ("algorithm.byzantine=2", "robust: krum or bulyan"),
    ("algorithm.attack=label_flip", "attackers"),
])
def test_bad_robust_settings_are_one_line_each(cli_error, setting, match):
    assert match in cli_error({**RAW, "algorithm": {"name": "fedavg"}}, "--set", setting)


def test_bulyan_with_too_few_clients_for_its_f_is_one_line(cli_error):
    err = cli_error({**RAW, "algorithm": {"name": "fedavg", "robust": "bulyan"}},
                    "--set", "algorithm.byzantine=2")
    assert "4f + 3 = 11" in err
    open_run({**RAW, "algorithm": {"name": "fedavg", "robust": "bulyan", "byzantine": 1}})


@pytest.mark.parametrize("settings, match", [
    ({"byzantine": 4}, "2f + 3 = 11"),            # 10 clients: f = 4 is too many
    ({"byzantine": 1000000}, "2f + 3"),
    ({"byzantine": 1, "krum_select": 10}, "n - f = 9"),
])
def test_krum_s_f_and_selection_are_checked_against_the_round_s_clients(cli_error, settings,
                                                                       match):
    err = cli_error({**RAW, "algorithm": {"name": "fedavg", "robust": "krum", **settings}})
    assert match in err
    open_run({**RAW, "algorithm": {"name": "fedavg", "robust": "krum", "byzantine": 3,
                                   "krum_select": 7}})


def test_a_scaled_attack_at_scale_one_is_no_attack_and_is_refused(cli_error):
    raw = {**RAW, "algorithm": {"name": "fedavg", "attack": "scaled", "attackers": 0.2}}
    assert "no attack" in cli_error(raw)
    open_run({**raw, "algorithm": {**raw["algorithm"], "attack_scale": 10.0}})


def test_bulyan_s_selection_costs_a_few_operators_per_chosen_row():
    """Bulyan's Krum rounds are sequential by definition: Python grows by a fixed few calls per
    chosen row, and nothing else grows with the clients."""
    def calls(n):
        prof = cProfile.Profile()
        prof.runcall(Bulyan(1).aggregate_stack, _stack(n), np.ones(n), np.random.default_rng(0))
        return pstats.Stats(prof).total_calls

    per_row = (calls(200) - calls(40)) / 160
    assert 0 < per_row <= 12, per_row


def test_an_algorithm_that_combines_its_own_way_refuses_a_rule():
    with pytest.raises(ValueError, match="its own way"):
        open_run({**RAW, "algorithm": {"name": "feddyn", "robust": "median"}})


def _alie_ipm_numpy(rows, bad, attack, eps=1.0):
    """ALIE and IPM written from their papers in NumPy, row by row."""
    from scipy.stats import norm

    honest = rows[~bad]
    mu = honest.mean(0)
    out = rows.copy()
    if attack == "ipm":
        out[bad] = -eps * mu
        return out
    n, f = len(rows), int(bad.sum())
    s = int(np.floor(n / 2 + 1)) - f
    z = norm.ppf((n - s) / n)
    out[bad] = mu - z * honest.std(0, ddof=1)
    return out


@pytest.mark.parametrize("attack, eps", [("alie", 1.0), ("ipm", 0.1), ("ipm", 4.0)])
def test_alie_and_ipm_equal_numpy_transcriptions_of_their_papers(attack, eps):
    from wirelessfl.algorithms.attacks import literature_attack

    rng = np.random.default_rng(3)
    stack = {"w": torch.as_tensor(rng.normal(size=(9, 3, 4))), "b": torch.as_tensor(
        rng.normal(size=(9, 5)))}
    bad = np.zeros(9, bool)
    bad[[1, 4]] = True
    got = literature_attack(stack, torch.as_tensor(bad), attack, eps)
    rows = np.concatenate([stack["w"].numpy().reshape(9, -1), stack["b"].numpy()], 1)
    want = _alie_ipm_numpy(rows, bad, attack, eps)
    np.testing.assert_allclose(np.concatenate([got["w"].numpy().reshape(9, -1),
                                               got["b"].numpy()], 1), want, rtol=1e-12)


def test_an_alie_run_against_the_median_trains_and_resumes(cut_and_resume):
    algorithm = {"name": "fedavg", "robust": "median", "attack": "alie", "attackers": 0.2}
    full, resumed = cut_and_resume({**RAW, "algorithm": algorithm})
    assert resumed == full


class _CoordinateClip(StackedRule):
    """A user's rule (a test plug-in's): each coordinate clipped to ±0.01, then the link's sum."""

    def __init__(self, uplink=None):
        self.inner = uplink or Mean()
        self.calls = 0

    def aggregate_stack(self, stack, weights, rng, **kwargs):
        self.calls += 1
        return self.inner.aggregate_stack({k: v.clamp(-0.01, 0.01) for k, v in stack.items()},
                                          weights, rng, **kwargs)


class _Middle(StackedRule):
    """A user's order statistic (not a sum): the coordinate-wise median of the stack."""

    def __init__(self, uplink=None):
        pass

    def aggregate_stack(self, stack, weights, rng, **kwargs):
        return Median().aggregate_stack(stack, weights, rng)


@pytest.fixture
def registered(monkeypatch):
    """The two rules registered for one test (and gone after it)."""
    from wirelessfl.server import robust

    monkeypatch.setattr(robust, "_REGISTERED", dict(robust._REGISTERED))
    robust.register_aggregator("coord_clip", _CoordinateClip, over_the_air=True)
    robust.register_aggregator("middle", _Middle)
    return robust


def test_a_registered_rule_runs_batched_loop_equal_and_once_a_round(registered):
    """One class on the stacked client dimension: called once a round with every client's row,
    the loop engine equal to the batched one, and the model moves by its output."""
    params = {}
    for engine in ("loop", "batched"):
        exp = open_run({**RAW, "engine": engine, "rounds": 2,
                        "algorithm": {"name": "fedavg", "robust": "coord_clip"}}).exp
        state = exp.initial_state()
        for _ in range(2):
            state, _ = exp.algorithm.apply(state)
        assert exp.algorithm.aggregator.calls == 2
        params[engine] = state.params
    for k in params["loop"]:
        torch.testing.assert_close(params["loop"][k], params["batched"][k], rtol=1e-4, atol=1e-6)
    mean = open_run({**RAW, "rounds": 2, "algorithm": {"name": "fedavg"}}).exp
    state, _ = mean.algorithm.apply(mean.initial_state())
    assert any(not torch.allclose(state.params[k], params["batched"][k]) for k in state.params)


def test_a_registered_rule_runs_over_a_digital_link_and_over_the_air_only_as_a_sum(registered):
    tdma = {"model": "tdma", "snr_db": 0.0, "params_per_vector": 10**6, "step_seconds": 0.01,
            "deadline_s": 1.2}
    for rule in ("coord_clip", "middle"):
        exp = open_run({**RAW, "rounds": 2, "network": tdma,
                        "algorithm": {"name": "fedavg", "robust": rule}}).exp
        state, report = exp.algorithm.apply(exp.initial_state())
        assert all(torch.isfinite(v).all() for v in state.params.values())
    over = {"model": "aircomp", "aggregation": "over_the_air"}
    exp = open_run({**RAW, "network": over, "algorithm": {"name": "fedavg", "robust": "coord_clip"}}).exp
    assert not exp.algorithm.aggregator.exact and "AirComp" in repr(exp.algorithm.aggregator.inner)
    with pytest.raises(ValueError, match="not a sum"):
        open_run({**RAW, "network": over, "algorithm": {"name": "fedavg", "robust": "middle"}})


def test_registering_is_checked_and_list_shows_the_choices(registered, capsys, tmp_path):
    from wirelessfl.cli import main

    plugin = tmp_path / "my_rule.py"
    plugin.write_text("from wirelessfl.server.robust import Mean, register_aggregator\n"
                      "class Plain(Mean):\n"
                      "    def __init__(self, uplink=None):\n"
                      "        pass\n"
                      "register_aggregator('from_plugin', Plain, over_the_air=True)\n")
    assert main(["list", "--algorithms", "--plugin", str(plugin)]) in (0, None)
    assert "|from_plugin}" in capsys.readouterr().out

    for name, rule in (("median", _Middle), ("not a name", _Middle), ("x", dict)):
        with pytest.raises(ValueError):
            registered.register_aggregator(name, rule)
    assert main(["list", "--algorithms"]) in (0, None)
    out = capsys.readouterr().out
    assert "robust='mean' {mean|median|" in out and "|coord_clip|middle|from_plugin}" in out
    assert "attack='none' {none|sign_flip|" in out and "dp='none' {none|central|" in out
