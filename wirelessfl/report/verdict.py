"""Whether one series beats another over seeds: a two-sided test at a stated level, and its interval.

A figure's claim (:mod:`wirelessfl.report.claims`) compares two series in each setting, one
value per seed. The runs of two series share their seed, and with it their data partition
and initial model, so when both sides ran the same seeds the comparison is **paired**: a
paired t-test on the per-seed differences (n − 1 degrees of freedom), which removes the
seed's own effect and is usually sharper. Otherwise it is **Welch's t-test** (unequal
variances, Welch–Satterthwaite degrees of freedom). Either way the decision is two-sided at
level :data:`ALPHA` (5%): *holds* when p < α and the better series is ahead, *does not hold*
when p < α and it is behind, *undecided* otherwise. Beside it go the gap (mean of the
better series minus the other's, or the mean paired difference), its 95% interval
``gap ± t_{0.975, df}·se`` and p.

A setting needs at least :data:`MIN_SEEDS` seeds a series to be decided: with 2 seeds a
t-test has 1 degree of freedom (t_{0.975} = 12.7) and its interval says little, so 2 seeds
never decide.

**Censored runs.** When some seeds did not reach the target, the t-tests cannot be used. A
run that stopped before the target is *right-censored* at the resource it had spent by then
(its budget: the measure's value at its last row), never a failure: it says only that the
target lies beyond that value. Given those budgets, the two series' times to the target are
compared with the log-rank test of ``scipy.stats.logrank`` (two-sided, the same level, the
censored runs as ``CensoredData.right_censored``), and the direction is the one-sided test
that is the smaller. A series can then *not hold* only when it is behind **and** every run
of it that did not reach the target was censored at or beyond the largest value at which the
other series reached it: the other reached the target at a resource this one also spent
without reaching it. A series censored below the comparator's value is *undecided* ("the
budget stops short of the comparator"). Without budgets (a caller that gives none), the
counts of seeds that reached the target are compared with Fisher's exact test (two-sided),
which decides only with enough seeds (5 against 0 of 5: p = 0.008; 3 against 0 of 3:
p = 0.1, undecided).

Examples
--------
>>> import numpy as np
>>> c = compare(np.array([10.2, 12.1, 14.3, 16.1]), np.array([10.0, 12.0, 14.0, 16.0]),
...             lower=False, seeds=([0, 1, 2, 3], [0, 1, 2, 3]))
>>> c.verdict, c.test, c.df
('holds', 'paired t', 3.0)
>>> compare(np.array([1.0, 2.0]), np.array([5.0, 6.0]), lower=True).verdict
'undecided'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

#: Two-sided level of every verdict.
ALPHA = 0.05
#: Fewest seeds a series needs for its setting to be decided.
MIN_SEEDS = 3


@dataclass(frozen=True)
class Comparison:
    """One setting's verdict and the test behind it.

    Attributes
    ----------
    verdict : str
        ``holds``, ``does not hold`` or ``undecided``.
    test : str
        ``paired t``, ``Welch t``, ``log-rank``, ``Fisher exact`` or ``""`` (no test: why is
        in ``reason``).
    df : float or None
        The t-test's degrees of freedom.
    gap, low, high : float or None
        Mean difference (better minus other; the mean paired difference) and its 95%
        interval.
    p : float or None
        Two-sided p-value.
    reason : str
        Why a setting is undecided without a test (too few seeds, equal values).
    """

    verdict: str
    test: str = ""
    df: float | None = None
    gap: float | None = None
    low: float | None = None
    high: float | None = None
    p: float | None = None
    reason: str = ""
    #: The interval's confidence: 0.95, or 0.90 for a closeness test (:func:`within`).
    confidence: float = 0.95
    #: A closeness test's margin (the gap's bound), else None.
    margin: float | None = None

    @property
    def decided(self) -> bool:
        """Whether the setting was decided (holds or does not hold)."""
        return self.verdict != "undecided"

    def text(self) -> str:
        """``holds (paired t, 3 df: gap 0.175, 95% CI [0.03, 0.32], p = 0.03)``.

        A closeness test adds its margin (``90% CI [-0.4, 0.2] against ±1``), and its
        ``TOST p`` is the larger of its two one-sided tests' (near 1 when the gap is beyond the
        margin: the interval then says by how much).
        """
        if not self.test:
            return f"{self.verdict} ({self.reason})" if self.reason else self.verdict
        if self.test == "Fisher exact":
            return f"{self.verdict} ({self.reason}; Fisher's exact test, p {_p(self.p)})"
        if self.test == "log-rank":
            return f"{self.verdict} ({self.reason}; log-rank test, p {_p(self.p)})"
        df = f"{self.df:.3g}" if self.df is not None else "?"
        bound, p = ("", "p") if self.margin is None else (f" against ±{self.margin:g}", "TOST p")
        return (f"{self.verdict} ({self.test}, {df} df: gap {self.gap:.3g}, "
                f"{100 * self.confidence:g}% CI [{self.low:.3g}, {self.high:.3g}]{bound}, "
                f"{p} {_p(self.p)})")


def _p(p: float | None) -> str:
    """P to 3 significant digits (0.0496, not 0.05, which reads as the level itself)."""
    return "= ?" if p is None else f"= {p:.3g}" if p >= 1e-4 else "< 1e-4"


def compare(better: np.ndarray, other: np.ndarray, lower: bool,
            seeds: tuple[Sequence[int], Sequence[int]] | None = None,
            alpha: float = ALPHA,
            budgets: tuple[np.ndarray, np.ndarray] | None = None) -> Comparison:
    """Whether ``better`` beats ``other`` (one value per seed; NaN: not reached).

    ``lower``: lower values are better. ``seeds`` (each side's seeds, in the order of its
    values): when both sides ran the same seeds the test is paired, seed with seed.
    ``budgets`` (each side's, per seed): where a run did not reach the target, the value it
    was censored at (module notes: log-rank, and "does not hold" only beyond the comparator).
    """
    a, b = np.asarray(better, float), np.asarray(other, float)
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not fa.any() and not fb.any():
        return Comparison("undecided", reason="neither side reached the target")
    if not fa.all() or not fb.all():
        if budgets is not None and lower:
            ca, cb = (np.asarray(x, float) for x in budgets)
            if ca.shape == a.shape and cb.shape == b.shape and np.isfinite(
                    ca[~fa]).all() and np.isfinite(cb[~fb]).all():
                return censored(np.where(fa, a, ca), fa, np.where(fb, b, cb), fb, alpha)
        return _reached(int(fa.sum()), a.size, int(fb.sum()), b.size, alpha)
    if (few := _few(a, b)) is not None:
        return few
    gap, se, df, test = _gap(a, b, seeds)
    if se == 0:  # no spread at all: the gap is exact
        if gap == 0:
            return Comparison("undecided", test, df, 0.0, 0.0, 0.0, 1.0, "equal values")
        p = 0.0
    else:
        p = float(2 * stats.t.sf(abs(gap) / se, df))
    half = float(stats.t.ppf(0.975, df)) * se
    ahead = (gap < 0) == lower
    verdict = ("holds" if ahead else "does not hold") if p < alpha else "undecided"
    return Comparison(verdict, test, df, gap, gap - half, gap + half, p)


def within(a: np.ndarray, b: np.ndarray, margin: float,
           seeds: tuple[Sequence[int], Sequence[int]] | None = None,
           alpha: float = ALPHA) -> Comparison:
    """Whether ``a`` and ``b`` are within ``margin`` of each other (one value per seed).

    Two one-sided tests (TOST; Schuirmann 1987) at level ``alpha`` each, on the gap
    ``a − b`` (paired or Welch t as in :func:`compare`): *holds* (close) when both reject,
    i.e. the ``1 − 2α`` (90%) interval of the gap lies inside ``(−margin, margin)``; *does not
    hold* when the gap is beyond the margin at the same level, i.e. the interval lies wholly
    outside ``[−margin, margin]``; *undecided* otherwise. ``p`` is the TOST p-value (the
    larger of the two one-sided p-values). A NaN on either side (a run that diverged or
    missed its target) leaves the setting undecided.

    >>> within(np.array([81.2, 80.9, 81.5]), np.array([81.0, 81.1, 81.3]), 1.0,
    ...        seeds=([0, 1, 2], [0, 1, 2])).verdict
    'holds'
    """
    if not 0 < margin < math.inf:
        raise ValueError(f"within: margin must be a positive finite number, got {margin!r}")
    a, b = np.asarray(a, float), np.asarray(b, float)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return Comparison("undecided", margin=margin,
                          reason="a seed has no value (diverged, or did not reach the target)")
    if (few := _few(a, b)) is not None:
        return replace(few, margin=margin)
    gap, se, df, test = _gap(a, b, seeds)
    if se == 0:  # the gap is exact
        inside = abs(gap) < margin
        return Comparison("holds" if inside else "does not hold", test, df, gap, gap, gap,
                          0.0 if inside else 1.0, confidence=1 - 2 * alpha, margin=margin)
    half = float(stats.t.ppf(1 - alpha, df)) * se
    low, high = gap - half, gap + half
    p = float(max(stats.t.sf((gap + margin) / se, df), stats.t.cdf((gap - margin) / se, df)))
    verdict = ("holds" if -margin < low and high < margin
               else "does not hold" if high < -margin or low > margin else "undecided")
    return Comparison(verdict, test, df, gap, low, high, p, confidence=1 - 2 * alpha,
                      margin=margin)


def _few(a: np.ndarray, b: np.ndarray) -> Comparison | None:
    """Undecided with too few seeds a side (:data:`MIN_SEEDS`), else None."""
    if min(a.size, b.size) >= MIN_SEEDS:
        return None
    n = min(a.size, b.size)
    return Comparison("undecided", gap=float(a.mean() - b.mean()) if n else None,
                      reason=f"{n} seed{'s' * (n != 1)} a side: a verdict needs at least "
                             f"{MIN_SEEDS} per series")


def _gap(a: np.ndarray, b: np.ndarray,
         seeds: tuple[Sequence[int], Sequence[int]] | None) -> tuple[float, float, float, str]:
    """The gap ``a − b``, its standard error, degrees of freedom and test (paired or Welch t).

    Paired (seed with seed) when both sides ran the same seeds, else Welch–Satterthwaite.
    """
    paired = seeds is not None and len(seeds[0]) == a.size and len(seeds[1]) == b.size \
        and sorted(seeds[0]) == sorted(seeds[1]) and len(set(seeds[0])) == a.size
    if paired:
        order_a, order_b = np.argsort(list(seeds[0])), np.argsort(list(seeds[1]))
        d = a[order_a] - b[order_b]
        n = d.size
        gap, se, df, test = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), n - 1.0, "paired t"
    else:
        va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
        gap, se, test = float(a.mean() - b.mean()), float(math.sqrt(va + vb)), "Welch t"
        df = float((va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))) \
            if va + vb > 0 else float(a.size + b.size - 2)
    return gap, se, df, test


def censored(a: np.ndarray, reached_a: np.ndarray, b: np.ndarray, reached_b: np.ndarray,
             alpha: float = ALPHA) -> Comparison:
    """Times to the target, some right-censored, compared by the log-rank test (module notes).

    ``a``/``b``: each seed's value at the target where ``reached_*``, else its budget (the
    value it was censored at); lower is better. ``a`` is the series claimed better.
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    ra, rb = np.asarray(reached_a, bool), np.asarray(reached_b, bool)
    counts = (f"reached the target in {int(ra.sum())}/{a.size} against {int(rb.sum())}/{b.size} "
              "seeds, the others censored at their budgets")
    if min(a.size, b.size) < MIN_SEEDS:
        return Comparison("undecided", reason=f"{counts}; a verdict needs at least {MIN_SEEDS} "
                                              "seeds a series")
    data = [stats.CensoredData.right_censored(x, ~r) for x, r in ((a, ra), (b, rb))]
    with np.errstate(invalid="ignore", divide="ignore"):
        res = stats.logrank(*data, alternative="two-sided")
    p = float(res.pvalue)
    # the statistic is a's reached count over its expectation, standardised: > 0 when a
    # reaches the target sooner than b
    ahead = float(res.statistic) > 0
    if not np.isfinite(p):  # nothing to compare at risk (e.g. censored before any event)
        p = 1.0
    short_of = bool(rb.any()) and bool((a[~ra] < b[rb].max()).any())
    short = (f"; the budget stops short of the comparator's value ({a[~ra].min():.4g} < "
             f"{b[rb].max():.4g})") if short_of else ""
    if p < alpha and ahead:
        return Comparison("holds", "log-rank", p=p, reason=counts)
    if p < alpha and not short_of:
        return Comparison("does not hold", "log-rank", p=p, reason=counts)
    # undecided; behind but censored before the comparator's value: its budget cannot tell
    return Comparison("undecided", "log-rank", p=p, reason=counts + short)


def _reached(got_a: int, n_a: int, got_b: int, n_b: int, alpha: float) -> Comparison:
    """Seeds that reached the target, compared by Fisher's exact test (two-sided)."""
    counts = f"reached the target in {got_a}/{n_a} against {got_b}/{n_b} seeds"
    p = float(stats.fisher_exact([[got_a, n_a - got_a], [got_b, n_b - got_b]])[1])
    if p < alpha and got_a / n_a != got_b / n_b:
        return Comparison("holds" if got_a / n_a > got_b / n_b else "does not hold",
                          "Fisher exact", p=p, reason=counts)
    return Comparison("undecided", "Fisher exact", p=p, reason=counts)


def overall(comparisons: Sequence[Comparison], seeds: int) -> str:
    """A figure's verdict over its settings, with how many were decided at the stated level."""
    n = len(comparisons)
    if not n:
        return "undecided (no setting has both series)"
    held = sum(c.verdict == "holds" for c in comparisons)
    failed = sum(c.verdict == "does not hold" for c in comparisons)
    open_ = n - held - failed
    if held == n:
        out = "holds" if n == 1 else f"holds in all {n} settings"
    elif failed == n:
        out = "does not hold" if n == 1 else f"does not hold in any of the {n} settings"
    elif open_ == n:
        out = "undecided" if n == 1 else f"undecided in all {n} settings"
    else:
        parts = [f"holds in {held}" if held else "", f"does not hold in {failed}" if failed else "",
                 f"undecided in {open_}" if open_ else ""]
        out = ("mixed: " if held and failed else "") + ", ".join(p for p in parts if p) \
            + f" of {n} settings"
    level = f"{100 * ALPHA:g}%"
    margin = comparisons[0].margin
    test, article = ((f"two one-sided tests at the {level} level each (closeness within "
                      f"±{margin:g})", "") if margin is not None
                     else (f"two-sided test at the {level} level", "a "))
    out += f"; {held + failed} of {n} decided by {article}{test}" if n > 1 else f"; {test}"
    if seeds < MIN_SEEDS:
        out += (f" ({seeds} seed{'s' * (seeds != 1)}: a verdict needs at least {MIN_SEEDS} "
                "a series)")
    return out
