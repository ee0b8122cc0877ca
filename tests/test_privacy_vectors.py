"""DP of every vector a client sends, the transmitters' count over the air, and calibration
from a target ε (issue 92, items 1-3): :class:`wirelessfl.server.privacy.Privacy`."""

import math

import numpy as np
import pytest
import torch

pytest.importorskip("dp_accounting", reason="algorithm.dp needs the [privacy] extra")

from wirelessfl.run.kinds import open_run, run_job  # noqa: E402
from wirelessfl.run.records import RunRecord  # noqa: E402
from wirelessfl.server.privacy import calibrate, epsilon, library  # noqa: E402

RAW = {"seed": 4, "rounds": 6, "eval_every": 2,
       "data": {"dataset": "synthetic", "num_clients": 20, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3}}
DP = {"dp": "central", "weighting": "uniform", "clients_per_round": 5, "dp_noise": 2.0,
      "dp_clip": 0.5}


def _composed(z, rounds, n, k, delta, vectors):
    """ε of ``rounds`` rounds of ``vectors`` releases of one sample, written with the library:
    the joint Gaussian mechanism on the (clip-normalised) concatenation of the vectors."""
    dp = library()
    acc = dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)
    joint = dp.GaussianDpEvent(z / math.sqrt(vectors) / 2)  # replace-one: sensitivity 2C
    acc.compose(dp.SelfComposedDpEvent(dp.SampledWithoutReplacementDpEvent(n, k, joint), rounds))
    return acc.get_epsilon(delta)


def test_two_gaussian_releases_are_one_at_z_over_root_two():
    """Without sampling, composing the two releases (RDP adds) is exactly one Gaussian at z/√2."""
    dp = library()
    two = dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)
    two.compose(dp.ComposedDpEvent([dp.GaussianDpEvent(1.5), dp.GaussianDpEvent(1.5)]), 7)
    assert epsilon("local", 3.0 / math.sqrt(2), 7, 10, 10, 1e-5) == pytest.approx(
        two.get_epsilon(1e-5), rel=1e-9)


@pytest.mark.parametrize("name, extra", [("scaffold", {}), ("fadamgc", {"tracked": 5})])
def test_the_second_vector_is_accounted_with_the_update(tmp_path, name, extra):
    """SCAFFOLD's Δc_i and FAdamGC's Δy_i are released too: ε is the library's for both."""
    raw = {**RAW, "algorithm": {"name": name, **DP, **extra}}
    algo = open_run(raw).exp.algorithm
    assert algo.privacy.vectors == 2
    assert algo.epsilon(6) == pytest.approx(_composed(2.0, 6, 20, 5, 1e-5, 2), rel=1e-9)
    assert algo.epsilon(6) > open_run({**RAW, "algorithm": {"name": "fedavg", **DP}}
                                      ).exp.algorithm.epsilon(6)
    run_job(open_run({**raw, "name": "dp2"}), tmp_path / "r", quiet=True)
    rows = RunRecord(tmp_path / "r").rows()
    assert rows[-1]["epsilon"] == pytest.approx(algo.epsilon(6), rel=1e-12)


def test_scaffold_s_control_variate_release_is_clipped_and_noised():
    """Monte Carlo: zero Δc_i rows get central N(0, (z·C₂·Σcoef/K)²) on their sum; rows far
    above C₂ are clipped to it (the noise-free part has norm ≤ Σcoef·C₂)."""
    raw = {**RAW, "algorithm": {"name": "scaffold", **DP, "dp_clip_second": 0.3}}
    algo = open_run(raw).exp.algorithm
    state = algo.initial_state() if hasattr(algo, "initial_state") else None
    coef = np.full(5, 1.0 / 20)
    zero = {"w": torch.zeros(5, 20000, dtype=torch.float64)}
    got = algo.release_second(_State(3), zero, coef)["w"]
    want = 2.0 * 0.3 * coef.sum() / 5
    assert float(got.std()) == pytest.approx(want, rel=0.03)
    big = {"w": torch.full((5, 4), 100.0, dtype=torch.float64)}
    quiet = open_run({**raw, "algorithm": {**raw["algorithm"], "dp_noise": 1e-6}}).exp.algorithm
    out = quiet.release_second(_State(0), big, coef)["w"]
    assert float(out.norm()) == pytest.approx(coef.sum() * 0.3, rel=1e-4)
    del state


class _State:
    """The fields of a server state a release reads."""

    def __init__(self, t):
        self.round, self.privacy = t, None


@pytest.mark.parametrize("name, setting, match", [
    ("scaffold", {"dp_vectors": "model"}, "control-variate changes"),
    ("fadamgc", {"dp_vectors": "model"}, "tracking-term changes"),
    ("scaffold", {"dp_clip_quantile": 0.5, "dp_noise": 1.0}, "adaptive clipping"),
])
def test_what_cannot_be_accounted_is_one_line(cli_error, name, setting, match):
    err = cli_error({**RAW, "algorithm": {"name": name, **DP, **setting}})
    assert match in err and "\n" not in err.strip(), err


def test_a_second_vector_over_the_air_is_refused(cli_error):
    err = cli_error({**RAW, "algorithm": {"name": "scaffold", **DP, "dp": "over_the_air"},
                     "network": {"model": "aircomp", "aggregation": "over_the_air"}})
    assert "dp central or local" in err, err


def test_over_the_air_with_truncation_counts_the_transmitters():
    """A round with silent clients: z_t = σ_t·k/C with k the transmitters, and the noise
    on the received mean is topped up to zC/k (written out)."""
    raw = {**RAW, "algorithm": {"name": "fedavg", **DP, "dp": "over_the_air", "dp_noise": 1.0},
           "network": {"model": "aircomp", "aggregation": "over_the_air", "snr_db": 10.0,
                       "normalise": False, "truncation_db": 0.0}}
    job = open_run(raw)
    algo, state = job.exp.algorithm, job.exp.initial_state()
    seen = 0
    for _ in range(6):
        plan = algo.configure(state)
        results = algo.train(state, plan)
        _, _, info = algo.combine(state, results)
        k = len(plan.clients) - info.silent
        if info.silent and k:
            seen += 1
            assert algo.privacy.channel_multiplier(state, [info], len(plan.clients)) == \
                pytest.approx(info.noise_std * k / 0.5, rel=1e-12)
        state, _ = algo.apply(state)
    assert seen, "no round had silent clients: lower truncation_db's margin in the test"


def test_private_mean_tops_up_to_the_transmitters_mean():
    """An edge aggregation over the air with silent clients: the added noise brings the
    channel's own up to zC/k, not zC/K."""
    from wirelessfl.server.aggregation import AirComp
    from wirelessfl.server.privacy import PrivateMean

    zero = {"w": torch.zeros(8, 40000, dtype=torch.float64)}
    seen = 0
    for seed in range(12):
        inner = AirComp(30.0, 0.05, antennas=2, normalise=False, truncation_db=0.0)
        _, info = inner.aggregate_stack(zero, np.ones(8), np.random.default_rng(seed))
        got, again = PrivateMean("over_the_air", 1.0, 3.0, inner).aggregate_stack(
            zero, np.ones(8), np.random.default_rng(seed))
        k = 8 - info.silent
        if not info.silent or not k or info.noise_std > 3.0 / k:
            continue
        seen += 1
        assert again.silent == info.silent
        assert float(got["w"].std()) == pytest.approx(3.0 / k, rel=0.03)
    assert seen


@pytest.mark.parametrize("mode, target, rounds, n, k", [
    ("central", 8.0, 50, 1000, 50), ("central", 2.0, 200, 6000, 100), ("local", 10.0, 5, 20, 5)])
def test_calibration_round_trip(mode, target, rounds, n, k):
    """z from (ε, δ) by the library's calibration, then ε from z: at most the target, within 1 %."""
    z = calibrate(mode, target, rounds, n, k, 1e-5)
    got = epsilon(mode, z, rounds, n, k, 1e-5)
    assert got <= target * (1 + 1e-9) and got == pytest.approx(target, rel=0.01)


def test_a_run_calibrated_to_epsilon_spends_it(tmp_path):
    """``dp_epsilon``: the run's rows end at the target ε, within 1 %; over the air too."""
    for algo, net in (({"name": "fedavg", **DP}, {}),
                      ({"name": "fedavg", **DP, "dp": "over_the_air"},
                       {"network": {"model": "aircomp", "aggregation": "over_the_air",
                                    "snr_db": 40.0, "normalise": False}})):
        settings = {k: v for k, v in algo.items() if k != "dp_noise"}
        raw = {**RAW, **net, "algorithm": {**settings, "dp_epsilon": 6.0}, "name": "cal"}
        job = open_run(raw)
        assert job.exp.algorithm.privacy.z > 0
        run_job(job, tmp_path / algo["dp"], quiet=True)
        rows = RunRecord(tmp_path / algo["dp"]).rows()
        assert rows[-1]["epsilon"] == pytest.approx(6.0, rel=0.01), algo["dp"]


def test_the_noise_cohort_scales_the_noise_and_the_accountant():
    """``dp_noise_cohort`` M: the mean's noise is zC/M and ε is the accountant's at M of N."""
    raw = {**RAW, "algorithm": {"name": "fedavg", **DP, "dp_noise_cohort": 16}}
    algo = open_run(raw).exp.algorithm
    assert algo.epsilon(6) == pytest.approx(epsilon("central", 2.0, 6, 20, 16, 1e-5), rel=1e-12)
    zero = {"w": torch.zeros(5, 40000, dtype=torch.float64)}

    def mean(rows):
        return {k: v.mean(0) for k, v in rows.items()}, None

    got, _ = algo.privacy.release(zero, mean, _State(1), 1)
    assert float(got["w"].std()) == pytest.approx(2.0 * 0.5 / 16, rel=0.03)


def test_an_old_folder_whose_second_vector_went_unprivatised_is_not_resumed(tmp_path, capsys):
    """A SCAFFOLD run with dp stored before ``dp_vectors`` existed sent Δc_i as it was: resuming
    it under the new accounting would mix two ε's, so it is one line (key_schema.as_made)."""
    import yaml

    from wirelessfl.cli import main

    raw = {**RAW, "rounds": 2, "name": "old", "algorithm": {"name": "scaffold", **DP}}
    run_job(open_run(raw), tmp_path / "r", quiet=True)
    cfg = tmp_path / "r" / "config.yaml"
    stored = yaml.safe_load(cfg.read_text())
    assert stored["algorithm"].pop("dp_vectors") == "all"
    stored["rounds"] = 3
    cfg.write_text(yaml.safe_dump(stored))
    try:
        code = main(["run", "--out", str(tmp_path / "r"), "--resume", "--quiet"])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "dp_vectors model" in err[-1], err


@pytest.mark.parametrize("engine", ["batched", "loop", "low_rank"])
def test_central_dp_folds_its_clipped_mean_and_keeps_the_numbers(engine, monkeypatch):
    """Central DP with a fixed clip folds the Δ_i while training (a round holds one chunk's),
    clipped as they fold; the noisy mean equals the stacked release's to float rounding."""
    from wirelessfl.engine.batch import FoldedResults

    over = {"batched": {"engine": "batched", "max_batch": 2}, "loop": {"engine": "loop"},
            "low_rank": {"engine": "batched", "low_rank": "on",
                         "local": {**RAW["local"], "batch_size": 1, "steps": 2}}}[engine]
    raw = {**RAW, **over,
           "algorithm": {"name": "fedavg", **DP, "dp_clip": 0.05}}
    from wirelessfl.models.lowrank import LowRankDelta

    factored, norms_of = [], LowRankDelta.row_norms_sq
    monkeypatch.setattr(LowRankDelta, "row_norms_sq",
                        lambda self: factored.append(1) or norms_of(self))
    exp = open_run(raw).exp
    algo, state = exp.algorithm, exp.initial_state()
    plan = algo.configure(state)
    results = algo.train(state, plan)
    assert isinstance(results, FoldedResults) and all(r.delta == {} for r in results)
    assert bool(factored) == (engine == "low_rank")  # the factored norms, never densified
    folded, _, _ = algo.combine(state, results)
    stacked = algo.train_clients(plan.starts, plan.clients, 0, buffers=state.buffers)
    norms = [math.sqrt(sum(float(v.detach().double().pow(2).sum()) for v in r.delta.values()))
             for r in stacked]
    assert max(norms) > 0.05  # the clip binds
    assert results.fold.within == sum(n <= 0.05 for n in norms)
    unfolded, _, _ = algo.combine(state, stacked)
    for k in folded:
        torch.testing.assert_close(folded[k], unfolded[k], rtol=1e-5, atol=1e-7)


def test_no_algorithm_offers_dp_with_an_unaccounted_vector():
    """Every registered algorithm that takes ``dp``: either it refuses central DP in one line,
    or every vector its clients upload (``upload_vectors`` > 1 means a second) is accounted."""
    from wirelessfl import registry
    from wirelessfl.algorithms.base import FederatedAlgorithm
    from wirelessfl.errors import ConfigError

    checked = 0
    for name in registry.ENTRIES:
        hp_cls, algo_cls = registry.get(name)
        if "dp" not in {f.name for f in __import__("dataclasses").fields(hp_cls)}:
            continue
        try:
            algo = open_run({**RAW, "algorithm": {"name": name, **DP}}).exp.algorithm
        except (ConfigError, ValueError) as exc:
            assert "\n" not in str(exc), name
            continue
        checked += 1
        sends_more = type(algo).upload_vectors is not FederatedAlgorithm.upload_vectors
        second = getattr(algo, "second_vector", lambda: None)()
        privacy = getattr(algo, "privacy", None)
        if second is not None:  # a second upload: privatised and composed
            assert sends_more and privacy.vectors == 2, name
        else:  # one vector: the model update's release alone
            assert privacy.vectors == 1, name
    assert checked >= 10


@pytest.mark.slow  # 100 rounds of 1,000 clients: about 40 s
def test_the_guide_s_dp_example_learns_at_its_epsilon(fmnist, tmp_path):
    """docs/guide/robustness.md's DP command: above 70 % test accuracy at ε = 8 (δ = 1e-5)."""
    import json

    from wirelessfl.cli import main

    sets = ["rounds=100", "eval_every=50", "data.num_clients=60000",
            "algorithm.clients_per_round=1000", "local.steps=1", "local.batch_size=1",
            "local.lr=0.1", "algorithm.server_lr=5", "algorithm.weighting=uniform",
            "algorithm.dp=central", "algorithm.dp_clip=0.1", "algorithm.dp_epsilon=8"]
    args = ["run", "fedavg_fmnist", "--out", str(tmp_path / "r"), "--quiet"]
    assert main([*args, *[x for s in sets for x in ("--set", s)]]) in (0, None)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["final_accuracy"] > 0.70 and summary["epsilon"] <= 8.0 * 1.0001


@pytest.mark.parametrize("z", [0.3, 0.5, 1.0, 4.0])
def test_central_epsilon_is_the_tighter_of_the_sampled_and_the_plain_bound(z):
    """Both bounds hold for the sampled mechanism; the run reports the smaller, so central DP
    never spends more than local DP at one z (the privacy figure's claim), and at small z the
    plain bound is the one taken."""
    dp = library()
    sampled = dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)
    sampled.compose(dp.SelfComposedDpEvent(
        dp.SampledWithoutReplacementDpEvent(20, 10, dp.GaussianDpEvent(z / 2)), 60))
    plain = epsilon("local", z, 60, 20, 10, 1e-5)
    got = epsilon("central", z, 60, 20, 10, 1e-5)
    assert got == pytest.approx(min(sampled.get_epsilon(1e-5), plain), rel=1e-12)
    assert got <= plain
    if z <= 0.5:
        assert sampled.get_epsilon(1e-5) > plain  # where the sampled bound is the looser
