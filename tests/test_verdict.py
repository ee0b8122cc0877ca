"""Verdicts are two-sided tests at a stated level: scipy's answers, paired where the seeds match."""

import dataclasses
import functools

import numpy as np
import pytest
from scipy import stats

from wirelessfl.report.verdict import ALPHA, Comparison, compare, overall, within

NAN = float("nan")


@pytest.mark.parametrize("seed", range(6))
def test_welch_is_scipy_s_unequal_variance_t_test(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(10, 1 + seed % 3, size=3 + seed % 4)
    b = rng.normal(10.5, 1, size=4 + seed % 3)
    got = compare(a, b, lower=True)  # no seeds given: unpaired
    want = stats.ttest_ind(a, b, equal_var=False)
    assert got.test == "Welch t" and got.p == pytest.approx(want.pvalue, rel=1e-9)
    assert got.df == pytest.approx(want.df, rel=1e-9)
    ci = want.confidence_interval(0.95)
    assert (got.low, got.high) == (pytest.approx(ci.low, rel=1e-9), pytest.approx(ci.high, rel=1e-9))
    ahead = a.mean() < b.mean()
    assert got.verdict == ("undecided" if want.pvalue >= ALPHA else "holds" if ahead
                           else "does not hold")


@pytest.mark.parametrize("seed", range(6))
def test_paired_is_scipy_s_related_t_test_seed_by_seed(seed):
    rng = np.random.default_rng(100 + seed)
    n = 3 + seed
    base = rng.normal(70, 5, size=n)
    a, b = base + rng.normal(0.4, 0.5, size=n), base
    order = rng.permutation(n)  # the better series' runs listed in another order
    got = compare(a[order], b, lower=False, seeds=(order.tolist(), list(range(n))))
    want = stats.ttest_rel(a, b)
    assert got.test == "paired t" and got.df == n - 1
    assert got.p == pytest.approx(want.pvalue, rel=1e-9)
    ci = want.confidence_interval(0.95)
    assert (got.low, got.high) == (pytest.approx(ci.low, rel=1e-9), pytest.approx(ci.high, rel=1e-9))


def test_pairing_decides_what_the_seeds_spread_hides():
    """The textbook case: a small, consistent gain on seeds that differ a lot. Paired, the
    seed's own effect cancels (p ≈ 1e-4); unpaired, the spread between seeds swamps it."""
    base = np.array([60.0, 70.0, 80.0, 65.0, 75.0])
    a = base + np.array([1.0, 1.2, 0.9, 1.1, 1.05])
    seeds = ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
    paired, welch = compare(a, base, lower=False, seeds=seeds), compare(a, base, lower=False)
    assert paired.verdict == "holds" and paired.p < 1e-3
    assert welch.verdict == "undecided" and welch.p > 0.5
    assert paired.gap == pytest.approx(1.05) and paired.low > 0
    assert "paired t, 4 df" in paired.text() and "95% CI" in paired.text()


def test_two_seeds_never_decide():
    for lower in (True, False):
        got = compare(np.array([1.0, 1.0001]), np.array([50.0, 50.0001]), lower=lower,
                      seeds=([0, 1], [0, 1]))
        assert got.verdict == "undecided" and "at least 3" in got.reason
    assert compare(np.array([1.0]), np.array([2.0, 3.0, 4.0]), lower=True).verdict == "undecided"


def test_seeds_that_missed_the_target_go_to_fisher_s_exact_test():
    five, none = np.array([3.0, 4.0, 5.0, 3.0, 4.0]), np.full(5, NAN)
    got = compare(five, none, lower=True)
    assert got.verdict == "holds" and got.test == "Fisher exact"
    assert got.p == pytest.approx(stats.fisher_exact([[5, 0], [0, 5]])[1])  # 0.0079
    assert compare(none, five, lower=True).verdict == "does not hold"
    three = compare(np.array([1.0, 2.0, 3.0]), np.full(3, NAN), lower=True)
    assert three.verdict == "undecided" and three.p == pytest.approx(0.1)
    assert compare(np.full(3, NAN), np.full(3, NAN), lower=True).reason.startswith("neither")


def test_no_spread_is_an_exact_gap_and_equal_values_decide_nothing():
    a, b = np.array([2.0, 2.0, 2.0]), np.array([3.0, 3.0, 3.0])
    assert compare(a, b, lower=True, seeds=([0, 1, 2], [0, 1, 2])).verdict == "holds"
    assert compare(a, a.copy(), lower=True).verdict == "undecided"


def test_a_figure_says_how_many_settings_were_decided():
    held, open_ = Comparison("holds", "paired t"), Comparison("undecided", "paired t")
    assert overall([held, held], seeds=3).startswith("holds in all 2 settings; 2 of 2 decided")
    assert overall([held, open_], seeds=5) == ("holds in 1, undecided in 1 of 2 settings; 1 of 2 "
                                               "decided by a two-sided test at the 5% level")
    assert "needs at least 3" in overall([open_], seeds=2)


@pytest.mark.parametrize("seed", range(8))
def test_closeness_is_scipy_s_two_one_sided_tests(seed):
    """TOST: p is the larger one-sided p of scipy's t-tests against -margin and +margin."""
    rng = np.random.default_rng(200 + seed)
    n, margin = 3 + seed % 4, 1.0
    base = rng.normal(80, 3, size=n)
    a, b = base + rng.normal((seed % 4) * 0.5 - 0.5, 0.4, size=n), base
    if seed % 2:  # paired, the runs listed in another order
        order = rng.permutation(n)
        got = within(a[order], b, margin, seeds=(order.tolist(), list(range(n))))
        d = a - b
        lo = stats.ttest_1samp(d, -margin, alternative="greater")
        hi = stats.ttest_1samp(d, margin, alternative="less")
        ci = stats.ttest_1samp(d, 0).confidence_interval(1 - 2 * ALPHA)
        assert got.test == "paired t"
    else:
        b = rng.normal(80, 2, size=n + 1)  # unpaired: Welch
        got = within(a, b, margin)
        lo = stats.ttest_ind(a + margin, b, equal_var=False, alternative="greater")
        hi = stats.ttest_ind(a - margin, b, equal_var=False, alternative="less")
        ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(1 - 2 * ALPHA)
        assert got.test == "Welch t"
    assert got.p == pytest.approx(max(lo.pvalue, hi.pvalue), rel=1e-9)
    assert (got.low, got.high) == (pytest.approx(ci.low, rel=1e-9), pytest.approx(ci.high, rel=1e-9))
    assert (got.verdict == "holds") == (got.p < ALPHA)
    assert (got.verdict == "does not hold") == (ci.high < -margin or ci.low > margin)
    assert "90% CI" in got.text() and "against ±1" in got.text()


def test_closeness_decides_close_far_and_noisy_and_never_on_two_seeds():
    s = [0, 1, 2, 3, 4]
    ref = np.array([81.0, 81.6, 80.7, 81.2, 81.4])
    assert within(ref + [0.1, -0.2, 0.15, 0.0, -0.1], ref, 1.0, (s, s)).verdict == "holds"
    assert within(ref - [5.1, 4.2, 6.0, 5.5, 4.8], ref, 1.0, (s, s)).verdict == "does not hold"
    assert within(ref + [3.0, -3.0, 2.5, -2.0, 0.1], ref, 1.0, (s, s)).verdict == "undecided"
    assert within(ref[:2] + 0.01, ref[:2], 1.0, (s[:2], s[:2])).verdict == "undecided"
    assert within(np.array([NAN, 81, 81]), ref[:3], 1.0).verdict == "undecided"
    for bad in (0.0, -1.0, NAN, float("inf")):
        with pytest.raises(ValueError, match="margin"):
            within(ref, ref, bad)
    text = overall([within(ref + 0.01 * np.arange(5), ref, 1.0, (s, s))] * 2, 5)
    assert text.startswith("holds in all 2 settings") and "two one-sided tests" in text


# ----------------------------------------------------- censored times to the target (issue 91)
def _logrank_by_hand(a, ra, b, rb):
    """The two-sample log-rank chi-square written out: at each distinct event time, the
    observed events of a against their expectation under one hazard, and its variance."""
    times = np.unique(np.concatenate([a[ra], b[rb]]))
    o_minus_e, var = 0.0, 0.0
    for t in times:
        na, nb = (a >= t).sum(), (b >= t).sum()
        da, db = ((a == t) & ra).sum(), ((b == t) & rb).sum()
        n, d = na + nb, da + db
        o_minus_e += da - d * na / n
        if n > 1:
            var += d * (na / n) * (nb / n) * (n - d) / (n - 1)
    from scipy.stats import chi2
    return float(chi2.sf(o_minus_e ** 2 / var, 1)), o_minus_e


def test_the_censored_comparison_is_the_log_rank_test_computed_by_hand():
    from wirelessfl.report.verdict import censored

    a = np.array([40.0, 55.0, 60.0, 80.0, 100.0])
    ra = np.array([True, True, True, True, False])
    b = np.array([90.0, 120.0, 150.0, 100.0, 160.0])
    rb = np.array([True, True, True, False, False])
    p, o_minus_e = _logrank_by_hand(a, ra, b, rb)
    got = censored(a, ra, b, rb)
    assert got.test == "log-rank" and got.p == pytest.approx(p, rel=1e-9)
    assert o_minus_e > 0 and got.verdict == ("holds" if p < 0.05 else "undecided")


def test_scipy_logrank_matches_its_own_documented_example():
    """The library's own example (scipy.stats.logrank's docs: two groups of recovery times,
    the control's censored at 10): the statistic and p our verdict reads."""
    from scipy import stats

    x = stats.CensoredData(uncensored=[0.02, 0.43, 0.49, 0.55, 0.74, 0.93, 1.26],
                           right=[1.52, 1.61, 1.79])
    y = stats.CensoredData(uncensored=[0.16, 0.31, 0.55, 0.61, 0.77, 1.05],
                           right=[1.51, 1.62, 1.68, 1.77, 1.81])
    res = stats.logrank(x=x, y=y)
    a = np.array([0.02, 0.43, 0.49, 0.55, 0.74, 0.93, 1.26, 1.52, 1.61, 1.79])
    ra = np.arange(10) < 7
    b = np.array([0.16, 0.31, 0.55, 0.61, 0.77, 1.05, 1.51, 1.62, 1.68, 1.77, 1.81])
    rb = np.arange(11) < 6
    p, _ = _logrank_by_hand(a, ra, b, rb)
    assert res.pvalue == pytest.approx(p, rel=1e-9)


def test_a_series_censored_below_its_comparator_never_does_not_hold():
    """HIST's Fig. 4 case: stopped at 57 MB in every seed, against a comparator that reached
    the target at 115-200 MB: undecided, saying the budget stops short; three seeds there at
    70-80 MB and two censored at 100 (before any of the comparator's), it holds (p = 0.049);
    run on past the comparator's values without reaching it, it does not hold; four seeds at
    72-76 MB hold, unless the fifth runs on past every comparator value without reaching it
    (log-rank: undecided, p = 0.49)."""
    seeds = ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
    other = np.array([115.0, 150.0, 200.0, 130.0, 170.0])
    for mine, budget, want in [
            (np.full(5, np.nan), np.full(5, 57.0), "undecided"),
            (np.array([70.0, np.nan, 80.0, np.nan, 75.0]), np.full(5, 100.0), "holds"),
            (np.full(5, np.nan), np.full(5, 400.0), "does not hold"),
            (np.array([72.0, 74.0, 76.0, 73.0, np.nan]), np.full(5, 100.0), "holds"),
            (np.array([72.0, 74.0, 76.0, 73.0, np.nan]), np.full(5, 300.0), "undecided")]:
        got = compare(mine, other, True, seeds, budgets=(budget, np.full(5, np.nan)))
        assert got.verdict == want, (mine, got.text())
        assert got.test == "log-rank"
    short = compare(np.full(5, np.nan), other, True, seeds,
                    budgets=(np.full(5, 57.0), np.full(5, np.nan)))
    assert "stops short" in short.text()


def test_p_is_printed_to_three_digits_so_a_decided_p_never_reads_as_the_level():
    c = compare(np.array([1.0, 2.1, 3.3, 4.0]), np.array([1.5, 2.9, 3.6, 4.8]), True,
                ([0, 1, 2, 3], [0, 1, 2, 3]))
    assert f"p = {c.p:.3g}" in c.text()
    from wirelessfl.report.verdict import _p
    assert _p(0.0496) == "= 0.0496"


PAPERS = ("codesign", "dynamic", "fadamgc", "fedast", "hist", "rafed")


@functools.cache
def _figures(paper, scale):
    """Every figure of a paper at a scale (loaded once for the tests below)."""
    from wirelessfl.report.spec import load_figures

    return tuple(load_figures(paper, scale))


def test_a_claim_naming_a_trend_its_check_does_not_compute_is_refused():
    """A finding that says "grows", "hurts", "less as", "within 5 points" or "46% less" is
    checked only setting by setting, so the claim must own up to it in ``unchecked``; every
    figure of every paper does (they load), and a claim without it is one line."""
    from wirelessfl.report.spec import check_claim_spec, checked_text
    from wirelessfl.run.config import ConfigError

    claim = {"finding": "HIST needs less uplink, and less as N grows", "better": "HIST",
             "than": "HFedAvg", "measure": "uplink_mb_per_client"}
    series = {"HIST": {}, "HFedAvg": {}}
    with pytest.raises(ConfigError, match="less as"):
        check_claim_spec({"claim": claim, "series": series}, "figure x")
    check_claim_spec({"claim": {**claim, "unchecked": "'less as N grows': no trend test"},
                      "series": series}, "figure x")
    assert "no trend" in checked_text(claim) and "HIST has lower" in checked_text(claim)
    question = {**claim, "finding": "(question, after X 2020) it holds"}
    check_claim_spec({"claim": question, "series": series}, "figure x")
    for scale in ("quick", "paper"):
        assert all(_figures(paper, scale) for paper in PAPERS)


def test_every_paper_scale_time_to_target_claim_states_its_budget_rule():
    """A claim read at the target (rounds, uplink, simulated time) says what budget each series
    had and at which resource the claim is stated (claim.budget), so a reader sees whether a
    run that missed the target was censored short of its comparator."""
    words = {"round": "round", "uplink_mb_per_client": "uplink",
             "uplink_mb_paper_per_client": "uplink", "sim_time_s": "time",
             "time_to_target": "time", "all_done": "time"}
    seen = 0
    for paper in PAPERS:
        for fig in _figures(paper, "paper"):
            claim = fig.spec.get("claim") or {}
            on = claim.get("measure")
            if not (claim.get("better") or claim.get("close")) or on not in words:
                continue
            seen += 1
            assert words[on] in str(claim.get("budget", "")), (paper, fig.name)
            assert "censored" in claim["budget"] or "short of" in claim["budget"], fig.name
            # and the rule holds: each run of the first series has the cap (rounds or
            # simulated time) and the stop at the target of its comparator's run beside it
            a, b = claim.get("better") or claim.get("close"), claim.get("than") or claim.get("to")
            cap = {(r.panel, str(r.value), r.seed): _cap(r) for r in fig.runs if r.series == b}
            pairs = [(_cap(r), cap.get((r.panel, str(r.value), r.seed),
                                       cap.get((r.panel, "None", r.seed))))
                     for r in fig.runs if r.series == a]
            assert pairs and all(mine == theirs for mine, theirs in pairs if theirs), fig.name
    assert seen >= 20


def _cap(run):
    return run.raw.get("rounds"), run.raw.get("max_time"), bool(run.raw.get("stop_at_target"))


def test_a_report_states_the_budget_its_runs_had_and_labels_the_paper_scale_rule():
    """A quick report prints the paper scale's budget rule as that, and the budget its own
    runs had, read from their configs (a series' caps, whether a run stops at the target)."""
    from wirelessfl.report.claims import Verdict
    from wirelessfl.report.figures import readme_section
    from wirelessfl.report.spec import Figure, RunSpec, budget_here

    claim = {"measure": "round", "better": "A", "than": "B", "budget": "the rule"}
    stop = {"stop_at_target": True, "target_accuracy": 0.5}
    runs = [RunSpec("", "A", n, 0, {"rounds": n, **stop}, "N") for n in (5, 7)]
    runs += [RunSpec("", "B", 5, 0, {"rounds": 9, "stop_at_target": False}, "N")]
    fig = Figure("f", {"kind": "curves", "claim": claim, "series": {}}, tuple(runs), "quick")
    assert budget_here(fig) == ("A: 5 / 7 rounds; B: 9 rounds; some runs stop at the target, "
                                "the others spend their whole budget")
    text = readme_section(fig, [], Verdict("finding", (), "undecided"))
    assert "- **Budget rule at paper scale:** the rule" in text
    assert f"- **Budget of these runs:** {budget_here(fig)}" in text
    paper = readme_section(dataclasses.replace(fig, scale="paper"), [], Verdict("x", (), "y"))
    assert "- **Budget:** the rule" in paper
    no_caps = dataclasses.replace(fig, runs=(RunSpec("", "A", 1, 0, {"tasks": []}, "N"),))
    assert budget_here(no_caps) == ""
