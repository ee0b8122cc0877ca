"""Differential privacy of the FedAvg family (issue 73, item 1): clipping, Gaussian noise and
the privacy spent, accounted by Google's dp-accounting and checked against closed forms."""

import math

import pytest
import torch

pytest.importorskip("dp_accounting", reason="algorithm.dp needs the [privacy] extra")

from scipy import optimize, stats  # noqa: E402

from wirelessfl.run.kinds import open_run, run_job  # noqa: E402
from wirelessfl.run.records import RunRecord  # noqa: E402
from wirelessfl.server.privacy import epsilon, library, round_event  # noqa: E402

RAW = {"seed": 4, "rounds": 6, "eval_every": 2,
       "data": {"dataset": "synthetic", "num_clients": 20, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3}}
DP = {"name": "fedavg", "dp": "central", "weighting": "uniform", "clients_per_round": 5,
      "dp_noise": 4.0, "dp_clip": 0.5}


def _analytic_gaussian_epsilon(sigma, delta):
    """Balle & Wang (ICML 2018), Theorem 8: the exact ε(δ) of one Gaussian mechanism of
    noise multiplier σ (sensitivity 1): δ = Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ)."""
    def gap(eps):
        return (stats.norm.cdf(0.5 / sigma - eps * sigma)
                - math.exp(eps) * stats.norm.cdf(-0.5 / sigma - eps * sigma) - delta)
    return optimize.brentq(gap, 1e-9, 100.0)


@pytest.mark.parametrize("z", [0.8, 1.0, 2.0])
def test_one_gaussian_round_is_the_analytic_gaussian_mechanism(z):
    """The library's PLD accountant on one Gaussian mechanism equals Balle & Wang's exact
    ε(δ) to 1e-3 relative."""
    dp = library()
    pld = dp.pld.PLDAccountant()
    pld.compose(dp.GaussianDpEvent(z))
    assert pld.get_epsilon(1e-5) == pytest.approx(_analytic_gaussian_epsilon(z, 1e-5), rel=1e-3)


def test_pld_is_at_most_rdp_for_dp_fedavg_at_z1_q001_over_1000_rounds():
    """The issue's case (Poisson sampling q = 0.01, z = 1, 1,000 rounds, δ = 1e-5): PLD's ε
    (1.83) is at most RDP's (2.10), the looser bound."""
    dp = library()
    event = dp.SelfComposedDpEvent(dp.PoissonSampledDpEvent(0.01, dp.GaussianDpEvent(1.0)), 1000)
    rdp, pld = dp.rdp.RdpAccountant(), dp.pld.PLDAccountant()
    rdp.compose(event)
    pld.compose(event)
    e_rdp, e_pld = rdp.get_epsilon(1e-5), pld.get_epsilon(1e-5)
    print(f"z=1, q=0.01, 1000 rounds, delta=1e-5: PLD {e_pld:.3f}, RDP {e_rdp:.3f}")
    assert e_pld <= e_rdp and 1.0 < e_pld < 3.0


def test_the_runs_epsilon_is_the_library_s_direct_call():
    dp = library()
    for mode, n, k in (("central", 100, 10), ("central", 20, 20), ("local", 50, 5)):
        acc = dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)
        base = dp.GaussianDpEvent(3.0 / 2)
        one = base if mode == "local" or k == n else dp.SampledWithoutReplacementDpEvent(n, k, base)
        acc.compose(dp.SelfComposedDpEvent(one, 40))
        assert epsilon(mode, 3.0, 40, n, k, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
        assert round_event(mode, 3.0, n, k) == one
    assert epsilon("central", 3.0, 0, 100, 10, 1e-5) == 0.0
    assert epsilon("central", 3.0, 80, 100, 10, 1e-5) > epsilon("central", 3.0, 40, 100, 10, 1e-5)


@pytest.mark.parametrize("mode, share", [("central", 1 / 5), ("local", 1.0)])
def test_the_noise_has_the_configured_variance_and_clipping_bounds_every_update(mode, share):
    """Monte Carlo: the added noise per entry has variance (share·z·C)²; central noise is
    added once to the mean (share 1/K), local noise to each clipped update."""
    algo = open_run({**RAW, "algorithm": {**DP, "dp": mode}}).exp.algorithm
    tree = {"w": torch.zeros(400, 100, dtype=torch.float64)}
    noisy = algo.privacy.noise(tree, 3, share * 4.0 * 0.5)["w"]
    want = (share * 4.0 * 0.5) ** 2
    assert abs(noisy.var().item() - want) < 0.03 * want
    from wirelessfl.server.robust import clip_rows

    stack = {"a": torch.randn(7, 30, dtype=torch.float64) * 5, "b": torch.randn(7, 4) * 5}
    clipped = clip_rows(stack, 0.5)
    norms = torch.cat([v.reshape(7, -1).double() for v in clipped.values()], 1).norm(dim=1)
    assert (norms <= 0.5 + 1e-6).all()


def test_rows_carry_epsilon_and_a_target_stops_the_run_before_it_is_exceeded(tmp_path):
    raw = {**RAW, "rounds": 40, "eval_every": 10, "algorithm": {**DP, "dp_target_epsilon": 5.0}}
    run_job(open_run(raw), tmp_path / "r", quiet=True)
    rows = RunRecord(tmp_path / "r").rows()
    algo = open_run(raw).exp.algorithm
    last = rows[-1]["round"]
    assert last < 40 and rows[-1]["epsilon"] <= 5.0 < algo.epsilon(last + 1)
    assert [r["epsilon"] for r in rows[1:]] == [algo.epsilon(r["round"]) for r in rows[1:]]
    run_job(open_run(raw), tmp_path / "r", resume=True, quiet=True)  # stopped: trains no more
    assert RunRecord(tmp_path / "r").rows()[-1]["round"] == last


@pytest.mark.parametrize("mode", ["central", "local"])
def test_dp_runs_resume_to_their_uninterrupted_rows(mode, cut_and_resume):
    full, resumed = cut_and_resume({**RAW, "algorithm": {**DP, "dp": mode}}, after=3)
    assert resumed == full


@pytest.mark.parametrize("setting, match", [
    ("algorithm.dp_clip=-1", "dp_clip"),
    ("algorithm.dp_delta=1", "dp_delta"),
    ("algorithm.weighting=samples", "weighting: uniform"),
    ("algorithm.dp=shuffle", "dp"),
    ("network.model=aircomp", "over_the_air"),
    ("algorithm.dp_clip_quantile=1.0", "dp_clip_quantile"),
    ("algorithm.dp_clip_lr=0.5", "adaptive clipping"),
    ("algorithm.dp_clip_quantile=0.5 --set algorithm.dp_count_noise=1.0", "2·dp_count_noise"),
    ("algorithm.dp_clip_quantile=0.5 --set algorithm.dp=local", "dp: central"),
    ("algorithm.dp_noise=0", "channel's noise alone"),
    ("algorithm.dp_noise=-1", "dp_noise"),
])
def test_bad_dp_settings_are_one_line_each(cli_error, setting, match):
    over = setting.startswith("network")
    net = {"network": {"model": "aircomp", "aggregation": "over_the_air"}} if over else {}
    args = [] if over else [part for one in setting.split(" --set ") for part in ("--set", one)]
    err = cli_error({**RAW, "algorithm": DP, **net}, *args)
    assert match in err, err


def test_the_channel_s_noise_multiplier_comes_from_the_logged_mse_and_is_topped_up():
    """Over the air (normalise off: one symbol is worth γ), the round's channel multiplier is
    z_t = γ·√(MSE/2)·K/C from the logged MSE; the clients top it up to z, so ε is the
    central mechanism's at z."""
    from wirelessfl.server.privacy import top_up

    assert top_up(3.0, 5.0) == pytest.approx(4.0) and top_up(6.0, 5.0) == 0.0
    raw = {**RAW, "algorithm": {**DP, "dp": "over_the_air", "dp_noise": 1.0},
           "network": {"model": "aircomp", "aggregation": "over_the_air", "snr_db": -10.0,
                       "normalise": False}}
    job = open_run(raw)
    state = job.exp.initial_state()
    for _ in range(3):
        state, report = job.exp.algorithm.apply(state)
        gamma, k, c = RAW["local"]["lr"], DP["clients_per_round"], DP["dp_clip"]
        want = gamma * math.sqrt(report.aircomp_mse / 2) * k / c
        assert report.dp_channel_noise == pytest.approx(want, rel=1e-9)
    central = open_run({**RAW, "algorithm": {**DP, "dp_noise": 1.0}}).exp.algorithm
    assert report.epsilon == central.epsilon(3)


def test_dp_modes_match_their_links():
    over = {"model": "aircomp", "aggregation": "over_the_air"}
    with pytest.raises(ValueError, match="over_the_air"):
        open_run({**RAW, "algorithm": {**DP, "dp": "over_the_air"}})  # exact link
    with pytest.raises(ValueError, match="over_the_air"):
        open_run({**RAW, "algorithm": DP, "network": over})  # central noise over the air


ADAPTIVE = {**DP, "dp_clip_quantile": 0.5, "dp_clip_lr": 0.3, "dp_noise": 1.0,
            "dp_count_noise": 2.0}


def test_adaptive_clipping_follows_andrew_et_al_s_update_and_pays_for_the_count():
    """C_{t+1} = C_t·exp(−η(b̃ − γ)) with b̃ = (count + N(0, σ_b²))/K, from the round's own
    count of updates within C_t (written out here); the sum's multiplier is
    z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) ≥ z; the rows log C_t; ε is unchanged."""
    import numpy as np

    from wirelessfl.server.privacy import update_noise
    from wirelessfl.server.robust import row_norms

    exp = open_run({**RAW, "rounds": 3, "algorithm": ADAPTIVE}).exp
    algo = exp.algorithm
    assert algo.privacy.noise_multiplier(5) == pytest.approx((1.0 - 4.0 ** -2) ** -0.5)
    with pytest.raises(ValueError, match="2·dp_count_noise"):
        update_noise(1.0, 0.25)
    assert update_noise(1.0, 2.0) == pytest.approx((1.0 - 0.25 ** 2) ** -0.5)
    state = exp.initial_state()
    clips = []
    for t in range(3):
        plan = algo.configure(state)
        results = algo.train(state, plan)
        from wirelessfl.engine.batch import ClientResults

        stack = ClientResults.from_list(results).delta_stack()
        c = algo.privacy.clip_norm(state)
        within = int((row_norms(stack) <= c).sum())
        noise = algo.env.seeds.generator("dp_count", t).standard_normal()
        want = c * math.exp(-0.3 * ((within + 2.0 * noise) / 5 - 0.5))
        state, report = algo.server_update(state, plan, results)
        clips.append(c)
        assert state.privacy.clip == pytest.approx(want, rel=1e-12)
        assert report.dp_clip_norm == c
    assert clips[0] == 0.5 and len(set(clips)) == 3
    fixed = open_run({**RAW, "algorithm": {**DP, "dp_noise": 1.0}}).exp.algorithm
    assert algo.epsilon(3) == fixed.epsilon(3)
    assert np.isfinite(clips).all()


def test_the_clip_norm_moves_toward_the_target_quantile_of_the_norms():
    """Monte Carlo of the update alone: norms drawn from one distribution, the clip norm after
    200 rounds sits near its γ-quantile (within the noise of the count)."""
    import numpy as np

    from wirelessfl.server.privacy import next_clip

    rng, clip = np.random.default_rng(0), 0.01
    for _ in range(300):
        norms = rng.lognormal(0.0, 0.5, size=50)
        clip = next_clip(clip, int((norms <= clip).sum()), 50, 0.7, 0.2, 2.5, rng)
    want = float(np.exp(0.5 * 0.5244))  # the 0.7-quantile of lognormal(0, 0.5)
    assert abs(math.log(clip / want)) < 0.15, (clip, want)


def test_adaptive_clipping_resumes_to_its_uninterrupted_rows(cut_and_resume):
    """C_t is in the checkpoint: a cut and resumed run continues from it."""
    full, resumed = cut_and_resume({**RAW, "algorithm": ADAPTIVE}, after=3)
    assert resumed == full
    assert len({r["dp_clip_norm"] for r in full if r.get("dp_clip_norm")}) > 2


OTA = {"model": "aircomp", "aggregation": "over_the_air", "normalise": False}


def test_grid_down_is_a_conservative_one_percent_grid():
    from wirelessfl.server.privacy import grid_down

    for z in (1e-3, 0.37, 1.0, 2.5, 123.4):
        g = grid_down(z)
        assert z / 1.0101 < g <= z and grid_down(g) == g
    assert grid_down(0.0) == 0.0 and grid_down(math.inf) == math.inf


@pytest.mark.parametrize("z", [0.0, 1.0])
def test_over_the_air_rounds_are_accounted_at_their_own_multipliers(z):
    """ε after each round is the RDP accountant's composition of the rounds' own events at
    z̄_t = max(z, z_t), z_t from the logged MSE (rounded down to the 1 % grid); with z = 0
    (the channel alone) nothing is added and ε is the channel's alone."""
    from wirelessfl.server.privacy import grid_down

    dp = library()
    raw = {**RAW, "algorithm": {**DP, "dp": "over_the_air", "dp_noise": z},
           "network": {**OTA, "snr_db": 5.0}}
    job = open_run(raw)
    state, mults = job.exp.initial_state(), []
    acc = dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)
    plain = dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)
    for _ in range(3):
        state, report = job.exp.algorithm.apply(state)
        mults.append(max(z, grid_down(report.dp_channel_noise)))
        acc.compose(dp.SampledWithoutReplacementDpEvent(20, 5, dp.GaussianDpEvent(mults[-1] / 2)))
        plain.compose(dp.GaussianDpEvent(mults[-1] / 2))  # the bound without amplification
        assert report.epsilon == pytest.approx(min(acc.get_epsilon(1e-5),
                                                   plain.get_epsilon(1e-5)), rel=1e-9)
    assert state.privacy.multipliers == tuple(mults)
    if z == 0:  # the channel alone at 5 dB: below a topped-up round's noise, so a larger ε
        topped = open_run({**raw, "algorithm": {**raw["algorithm"], "dp_noise": 1.0}})
        assert max(mults) < 1.0 and report.epsilon > topped.exp.algorithm.epsilon(3)


def test_the_channel_alone_adds_no_noise_of_its_own():
    """With dp_noise 0 the received mean is the clipped updates' over the air, as sent."""
    base = {**RAW, "network": {**OTA, "snr_db": 5.0}}
    alone = open_run({**base, "algorithm": {**DP, "dp": "over_the_air", "dp_noise": 0.0}}).exp
    topped = open_run({**base, "algorithm": {**DP, "dp": "over_the_air", "dp_noise": 1.0}}).exp
    a, _ = alone.algorithm.apply(alone.initial_state())
    b, _ = topped.algorithm.apply(topped.initial_state())
    gen_used = [torch.equal(a.params[k], b.params[k]) for k in a.params]
    assert not all(gen_used)  # the top-up moved the model; the channel alone did not add it


def test_over_the_air_dp_resumes_to_its_uninterrupted_rows(cut_and_resume):
    """The rounds' multipliers are state: a resumed run composes the same ε."""
    raw = {**RAW, "algorithm": {**DP, "dp": "over_the_air", "dp_noise": 0.0},
           "network": {**OTA, "snr_db": 5.0}}
    full, resumed = cut_and_resume(raw, after=3)
    assert resumed == full and all(math.isfinite(r["epsilon"]) for r in full[1:])


def test_a_target_stops_the_channel_alone_at_the_last_round_s_estimate(tmp_path):
    raw = {**RAW, "rounds": 30, "eval_every": 1,
           "algorithm": {**DP, "dp": "over_the_air", "dp_noise": 0.0, "dp_target_epsilon": 1500.0},
           "network": {**OTA, "snr_db": 5.0}}
    run_job(open_run(raw), tmp_path / "r", quiet=True)
    rows = RunRecord(tmp_path / "r").rows()
    assert 1 < rows[-1]["round"] < 30 and rows[-1]["epsilon"] <= 1500.0


def test_the_channel_alone_is_refused_under_normalisation_and_counted_only_without_it():
    """Normalised symbols make the channel's noise scale with the updates (data-dependent):
    the channel alone is refused there, and a topped-up round is accounted at z."""
    raw = {**RAW, "algorithm": {**DP, "dp": "over_the_air", "dp_noise": 0.0},
           "network": {**OTA, "normalise": True, "snr_db": -20.0}}
    with pytest.raises(ValueError, match="normalise: false"):
        open_run(raw)
    raw["algorithm"]["dp_noise"] = 0.5
    exp = open_run(raw).exp
    state, report = exp.algorithm.apply(exp.initial_state())
    assert state.privacy.multipliers == (0.5,)


CELLS = {"name": "hist", "cells": 2, "split": False, "edge_rounds": 3, "dp": "central",
         "dp_noise": 1.5, "dp_clip": 0.5}


def test_an_edge_aggregation_with_dp_is_the_clipped_mean_plus_its_noise_written_out():
    """PrivateMean: rows clipped to C, then central N(0, (zC/K)²) on the mean, or local
    N(0, (zC)²) on each row, from a generator seeded by the aggregation's stream."""
    import numpy as np

    from wirelessfl.server.privacy import PrivateMean
    from wirelessfl.server.robust import clip_rows

    g = torch.Generator().manual_seed(0)
    stack = {"w": torch.randn(5, 3, 4, generator=g), "b": 3 * torch.randn(5, 4, generator=g)}
    w = np.ones(5)
    for mode in ("central", "local"):
        got, _ = PrivateMean(mode, 0.7, 2.0).aggregate_stack(stack, w, np.random.default_rng(9))
        seed = int(np.random.default_rng(9).integers(2**62))
        gen = torch.Generator().manual_seed(seed)
        clipped = clip_rows(stack, 0.7)
        if mode == "local":
            noisy = {k: v + 1.4 * torch.randn(v.shape, generator=gen) for k, v in clipped.items()}
            want = {k: v.mean(0) for k, v in noisy.items()}
        else:
            want = {k: v.mean(0) + 1.4 / 5 * torch.randn(v.shape[1:], generator=gen)
                    for k, v in clipped.items()}
        for k in stack:
            torch.testing.assert_close(got[k], want[k])


@pytest.mark.parametrize("mode, share", [("central", 1 / 25), ("local", 1 / 5)])
def test_the_edge_noise_has_the_configured_variance(mode, share):
    """Monte Carlo on zero updates: the mean carries (zC)²/K² (central) or (zC)²/K (local)."""
    import numpy as np

    from wirelessfl.server.privacy import PrivateMean

    zero = {"w": torch.zeros(5, 4000)}
    got, _ = PrivateMean(mode, 1.0, 3.0).aggregate_stack(zero, np.ones(5),
                                                         np.random.default_rng(1))
    assert float(got["w"].var()) == pytest.approx(9.0 * share, rel=0.06)


def test_dp_in_cells_reports_the_accountant_s_epsilon_for_every_edge_release(tmp_path):
    """Every client is released E times a global round at z, no sampling: ε after t rounds is
    the RDP accountant's for t·E Gaussian events (written out with the library); a target
    stops the run before it is exceeded; HIST's submodel cells are accounted alike."""
    dp = library()
    for algorithm in (CELLS, {**CELLS, "split": True, "dp": "local"}):
        raw = {**RAW, "rounds": 4, "eval_every": 1, "algorithm": algorithm}
        run_job(open_run(raw), tmp_path / algorithm["dp"], quiet=True)
        for row in RunRecord(tmp_path / algorithm["dp"]).rows()[1:]:
            acc = dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)
            acc.compose(dp.GaussianDpEvent(1.5 / 2), row["round"] * 3)
            assert row["epsilon"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    raw = {**RAW, "rounds": 30, "eval_every": 1,
           "algorithm": {**CELLS, "dp_target_epsilon": 60.0}}
    run_job(open_run(raw), tmp_path / "target", quiet=True)
    rows = RunRecord(tmp_path / "target").rows()
    algo = open_run(raw).exp.algorithm
    assert rows[-1]["round"] < 30 and rows[-1]["epsilon"] <= 60.0 < algo.epsilon(rows[-1]["round"] + 1)


def test_a_target_epsilon_the_first_cells_round_spends_is_one_line(cli_error):
    """HFedAvg used to train 0 rounds and exit 0; it refuses the setting as FedAvg does."""
    err = cli_error({**RAW, "algorithm": {**CELLS, "dp_target_epsilon": 0.5}})
    assert "spent by the first round" in err


def test_dp_in_cells_resumes_to_its_uninterrupted_rows(cut_and_resume):
    full, resumed = cut_and_resume({**RAW, "algorithm": CELLS}, after=3)
    assert resumed == full


@pytest.mark.parametrize("algorithm, match", [
    ({**CELLS, "dp": "over_the_air"}, "is exact"),
    ({**CELLS, "split": True, "aggregation": "aircomp"}, "dp over_the_air"),
    ({**CELLS, "dp": "over_the_air", "dp_noise": 0.0, "aggregation": "aircomp"}, "FedAvg family"),
    ({"name": "hist", "dp_clip": 2.0}, "dp_clip"),
])
def test_bad_dp_settings_in_cells_are_one_line(cli_error, algorithm, match):
    assert match in cli_error({**RAW, "algorithm": algorithm})


def test_hist_over_the_air_edges_top_the_channel_up():
    """HIST's AirComp cells with dp over_the_air train, log their MSE and ε at z."""
    raw = {**RAW, "algorithm": {**CELLS, "split": True, "aggregation": "aircomp",
                                "dp": "over_the_air"}}
    exp = open_run(raw).exp
    state, report = exp.algorithm.apply(exp.initial_state())
    assert report.aircomp_mse is not None and report.epsilon == exp.algorithm.epsilon(1)


@pytest.mark.parametrize("snr_db, above", [(20.0, False), (-25.0, True)])
def test_adaptive_clipping_over_the_air_tops_up_to_z_delta_and_counts_a_louder_channel(
        snr_db, above):
    """Over the air the sum is topped up to z_Δ (the count's share paid); a round whose channel
    gives less is accounted at z exactly, one that gives more at the joint multiplier of its
    sum max(z_Δ, z_t) and the count (z_t on the 1 % grid); C_t moves and is logged."""
    from wirelessfl.server.privacy import grid_down, joint_noise, update_noise

    raw = {**RAW, "algorithm": {**ADAPTIVE, "dp": "over_the_air"},
           "network": {**OTA, "snr_db": snr_db}}
    exp = open_run(raw).exp
    algo, state = exp.algorithm, exp.initial_state()
    z_delta = update_noise(1.0, 2.0)
    assert joint_noise(z_delta, 2.0) == pytest.approx(1.0)
    for _ in range(3):
        state, report = algo.apply(state)
        z_t = report.dp_channel_noise
        want = (joint_noise(max(z_delta, grid_down(z_t)), 2.0) if grid_down(z_t) > z_delta
                else 1.0)
        assert state.privacy.multipliers[-1] == want and report.dp_clip_norm is not None
    assert (max(state.privacy.multipliers) > 1.0) == above
    assert len(set(state.privacy.multipliers)) >= 1 and state.privacy.clip != 0.5


def test_epsilon_at_delta_is_in_the_summary_line_and_summary_json(tmp_path, capsys):
    import json

    from wirelessfl.cli import main

    cfg = tmp_path / "dp.yaml"
    cfg.write_text(json.dumps({**RAW, "rounds": 2, "algorithm": DP}))
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    last = RunRecord(tmp_path / "r").rows()[-1]
    assert summary["epsilon"] == last["epsilon"] > 0 and summary["dp_delta"] > 0
    assert f"ε = {summary['epsilon']:.3g} at δ" in capsys.readouterr().out


def test_a_dp_setting_whose_noise_drowns_the_mean_is_warned_about_once(capsys):
    """z·√d/K above 1 (central): the noise on the mean outweighs any clipped update."""
    open_run({**RAW, "algorithm": {**DP, "dp_noise": 50.0}})
    err = capsys.readouterr().err
    assert err.count("will hardly learn") == 1 and "above the clip C" in err
    open_run({**RAW, "algorithm": {**DP, "dp_noise": 1e-4}})
    assert "hardly learn" not in capsys.readouterr().err
