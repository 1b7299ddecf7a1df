"""``precisionbot.metrics.rerun_stats``: the distribution functions against scipy (float64), the PR-vs-main test on
simulated runs with known answers (false-alarm rate at the stated significance, power for a doubling), and
the threshold fit against scipy's log-normal and noncentral-t references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from precisionbot.metrics import rerun_stats as ns


@pytest.mark.parametrize("df", [2, 3, 4, 7, 19, 99])
def test_student_t_matches_scipy(df: int) -> None:
    for t in (-12.0, -2.5, -0.3, 0.0, 0.4, 1.9, 3.7, 8.0, 40.0):
        assert ns.t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-9, abs=1e-300)
    for q in (1e-4, 0.025, 0.5, 0.9, 0.975, 0.999, 0.9999):
        assert ns.t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-8, abs=1e-10)


def test_incomplete_beta_matches_scipy() -> None:
    for a, b, x in [(0.5, 0.5, 0.3), (2.0, 0.5, 0.99), (10.0, 3.0, 0.7), (1.5, 0.5, 1e-6), (50.0, 0.5, 0.97)]:
        assert ns.betainc(a, b, x) == pytest.approx(special.betainc(a, b, x), rel=1e-10)


@pytest.mark.parametrize("n", [5, 12, 40, 300])
@pytest.mark.parametrize("p", [0.99, 0.9999])
def test_tolerance_factor_is_the_exact_noncentral_t_factor(n: int, p: float) -> None:
    exact = stats.nct.ppf(0.9, n - 1, stats.norm.ppf(p) * math.sqrt(n)) / math.sqrt(n)
    assert ns.tolerance_factor(n, p, 0.9) == pytest.approx(exact, rel=1e-6)


def _runs(rng: np.random.Generator, reruns: int, samples: int, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample mean k3 with a prompt effect, a whole-run effect and heavy per-sample noise."""
    prompt = rng.normal(math.log(1e-3), 1.0, samples)

    def run(scale: float) -> np.ndarray:
        return scale * np.exp(prompt + rng.normal(0, 0.1) + 0.4 * rng.standard_t(4, samples))

    return np.stack([run(1.0) for _ in range(reruns)]), run(factor)


def test_false_alarm_rate_on_clean_pairs_is_the_stated_significance() -> None:
    rng = np.random.default_rng(2026)
    alpha, pairs = 0.05, 600
    p_values = []
    for _ in range(pairs):
        main, pr = _runs(rng, 5, 32, 1.0)
        c = ns.compare_to_main(main, pr, alpha=alpha, min_ratio=1.0)
        assert c is not None
        p_values.append(c.p_value)
    rate = float(np.mean(np.array(p_values) < alpha))
    # Binomial(600, 0.05): 3 standard deviations is ±2.7 %.
    assert 0.023 <= rate <= 0.077
    # Calibrated across the range, not only at alpha: p-values of clean pairs are close to uniform.
    assert stats.kstest(p_values, "uniform").pvalue > 0.001


def test_a_doubling_is_flagged() -> None:
    rng = np.random.default_rng(19581)
    flagged = 0
    for _ in range(200):
        main, pr = _runs(rng, 8, 32, 2.0)
        c = ns.compare_to_main(main, pr, alpha=0.01, min_ratio=1.5)
        assert c is not None
        flagged += c.regression
        assert c.ci_low <= c.ratio <= c.ci_high
    assert flagged >= 190  # >= 95 % power at these noise levels


def test_bit_identical_main_and_edge_cases() -> None:
    main = np.full((4, 6), 2e-4)
    same = ns.compare_to_main(main, np.full(6, 2e-4))
    assert same is not None and same.p_value == 0.5 and not same.regression and same.ratio == 1.0
    worse = ns.compare_to_main(main, np.full(6, 4e-4))
    assert worse is not None and worse.p_value == 0.0 and worse.regression
    assert ns.describe(worse) == "2× main's mean k3 (p < 0.001, floor 1.5×)"
    assert ns.describe(same).startswith("within main's noise (1× main")
    # Exact (0) samples on both sides compare equal through the floor, not as log(0).
    zeros = ns.compare_to_main(np.zeros((3, 5)), np.zeros(5))
    assert zeros is not None and zeros.ratio == 1.0 and not zeros.regression
    # Too few reruns or shared samples: no judgement.
    assert ns.compare_to_main(main[:2], np.full(6, 2e-4)) is None
    sparse = main.copy()
    sparse[:, 2:] = np.nan
    assert ns.compare_to_main(sparse, np.full(6, 2e-4)) is None
    with pytest.raises(ValueError, match="samples"):
        ns.compare_to_main(main, np.full(5, 2e-4))


def test_a_tight_main_needs_min_ratio_too() -> None:
    rng = np.random.default_rng(7)
    main = 1e-4 * np.exp(rng.normal(0, 0.01, (6, 16)))
    c = ns.compare_to_main(main, main[0] * 1.2, alpha=0.01, min_ratio=1.5)
    assert c is not None and c.p_value < 0.01 and not c.regression  # significant, but only 1.2x


def test_suggest_matches_the_lognormal_reference() -> None:
    rng = np.random.default_rng(3)
    values = np.exp(rng.normal(math.log(1e-3), 0.4, 200))
    rate = 1e-3
    s = ns.suggest(values, rate)
    shape, _loc, scale = stats.lognorm.fit(values, floc=0)
    n = values.size
    sd = float(np.std(np.log(values), ddof=1))
    assert s.point == pytest.approx(stats.lognorm.ppf(1 - rate, sd, 0, scale), rel=1e-9)
    k = stats.nct.ppf(0.9, n - 1, stats.norm.ppf(1 - rate) * math.sqrt(n)) / math.sqrt(n)
    assert s.threshold == pytest.approx(scale * math.exp(k * sd), rel=1e-6)
    assert s.threshold is not None and s.point is not None and s.threshold > s.point > s.largest_seen * 0.5
    assert shape == pytest.approx(sd * math.sqrt((n - 1) / n), rel=1e-6)


def test_suggested_threshold_holds_its_rate_on_held_out_runs() -> None:
    rng = np.random.default_rng(11)
    rate = 0.01
    exceed = []
    for _ in range(50):
        fit = ns.suggest(np.exp(rng.normal(-7, 0.5, 40)), rate)
        assert fit.threshold is not None
        exceed.append(float(np.mean(np.exp(rng.normal(-7, 0.5, 4000)) > fit.threshold)))
    # Upper 90 % bound: at most ~10 % of fits may exceed the rate, and on average it is well under it.
    assert np.mean(np.array(exceed) > rate) <= 0.2
    assert np.mean(exceed) < rate


def test_suggest_refuses_what_the_reruns_cannot_support() -> None:
    s = ns.suggest(np.exp(np.linspace(-8, -7, 20)), 1e-3)
    assert s.threshold is None and s.needed_reruns == 100 and "needs 100" in (s.refused or "")
    assert ns.reruns_needed(0.01) == 10 and ns.reruns_needed(0.5) == ns.MIN_RERUNS + 2
    zeros = ns.suggest([0.0, 1e-4, 2e-4, 0.0, 3e-4], 0.1)
    assert zeros.threshold is None and "2 of 5 reruns are 0" in (zeros.refused or "")


def test_suggest_refuses_bit_identical_reruns() -> None:
    # The builtin engine's production numerics rerun bit-identically (benchmarks/RESULTS.md): a fit would put
    # the threshold at the value itself, failing any change at all.
    same = ns.suggest([2.1e-5] * 12, 0.01)
    assert same.threshold is None and "bit-identically" in (same.refused or "") and "12 reruns" in (same.refused or "")
    assert ns.suggest([2.1e-5] * 11 + [2.2e-5], 0.01).threshold is not None
