from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from precisionbot import metrics
from precisionbot.metrics import flips as noise
from precisionbot.metrics.onset import concentration, sample_shapes


def test_flips_by_margin_buckets() -> None:
    margins = np.array([0.05, 0.05, 0.2, 0.5, 2.0, 3.0])
    flips = np.array([True, False, True, False, True, False])
    rows = noise.flips_by_margin(margins, flips)
    assert [r["bucket"] for r in rows] == ["[0, 0.1)", "[0.1, 0.3)", "[0.3, 1)", "[1, ∞)"]
    assert [(r["positions"], r["flips"]) for r in rows] == [(2, 1), (1, 1), (1, 0), (2, 1)]
    assert rows[0]["rate"] == 0.5


def test_flip_probability_matches_scipy_normal_cdf() -> None:
    m = np.linspace(0, 1.2, 25)
    ref = stats.norm.cdf(-m / (math.sqrt(2) * 0.1))
    assert metrics.flip_probability(m, 0.1) == pytest.approx(ref, rel=1e-9, abs=1e-300)
    with pytest.raises(ValueError, match="sigma"):
        metrics.flip_probability(0.1, 0.0)


def test_expected_flips_exact_matches_poisson_binomial_by_simulation() -> None:
    margins = np.full(200, 0.15)
    p = float(metrics.flip_probability(0.15, 0.1))
    result = noise.expected_flips(margins, observed=60, sigma_nats=0.1)
    assert result.expected == pytest.approx(200 * p)
    # All p equal: the Poisson-binomial is a binomial, so scipy gives the exact tail.
    assert result.p_at_least_observed == pytest.approx(stats.binom.sf(59, 200, p), rel=1e-9)
    assert noise.expected_flips(margins, observed=0, sigma_nats=0.1).p_at_least_observed == 1.0


def test_expected_flips_poisson_branch_and_verdict() -> None:
    margins = np.full(10_000, 0.4)  # p ≈ 2.3e-3 each, 10k live positions → Poisson branch
    p = float(metrics.flip_probability(0.4, 0.1))
    few = noise.expected_flips(margins, observed=20, sigma_nats=0.1)
    many = noise.expected_flips(margins, observed=80, sigma_nats=0.1)
    assert few.p_at_least_observed == pytest.approx(stats.poisson.sf(19, 10_000 * p), rel=1e-6)
    assert many.p_at_least_observed == pytest.approx(stats.poisson.sf(79, 10_000 * p), rel=1e-6)
    assert not few.more_than_noise and many.more_than_noise


def test_noise_band_and_confident_flips() -> None:
    pair = noise.PairComparison(
        margins_nats=np.array([0.05, 0.2, 1.5]),
        flips=np.array([True, True, False]),
        kl=np.array([1e-4, 2e-4, 1e-9]),
        delta_lp=np.array([0.01, -0.01, 0.0]),
    )
    band = noise.noise_band([pair])
    assert band.max_flip_margin_nats == 0.2 and band.pairs == 1 and not band.is_zero
    assert band.kl_p50 == pytest.approx(1e-4)
    assert noise.NoiseBand.from_dict(band.to_dict()) == band
    flips = noise.confident_flips([0.1, 0.3, 0.9], [True, True, False], band)
    assert flips.tolist() == [False, True, False]
    assert noise.confident_flips([0.5, 1.5], [True, True], None).tolist() == [False, True]
    zero = noise.noise_band([noise.PairComparison(np.ones(3), np.zeros(3, bool), np.zeros(3), np.zeros(3))])
    assert zero.is_zero and zero.kl_p99 == noise.KL_FLOOR
    with pytest.raises(ValueError, match="producer"):
        noise.noise_band([])


def test_confident_flip_limit_band_delta_and_zero_band() -> None:
    band = noise.NoiseBand(pairs=1, max_flip_margin_nats=0.2, sigma_nats=0.01, kl_p99=1e-4)
    assert noise.confident_flip_limit(band, 1.0) == 0.2
    # Producers that moved single logprobs by 0.15 can flip a top-2 gap of up to 0.3.
    assert noise.confident_flip_limit(band, 1.0, band_abs_delta_nats=0.15) == pytest.approx(0.3)
    assert noise.confident_flips([0.25, 0.35], [True, True], band, 1.0, 0.15).tolist() == [False, True]
    zero = noise.NoiseBand(pairs=1, max_flip_margin_nats=0.0)
    assert zero.is_zero and noise.confident_flip_limit(zero, 0.7, band_abs_delta_nats=5.0) == 0.7
    assert noise.confident_flip_limit(None, 0.7) == 0.7


def test_sample_shapes_onset_and_concentration() -> None:
    values = np.array([0.5, 0.4, 0.0, 0.0, 0.0, 0.0, 0.3, 0.0])
    sample = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    a, b = sample_shapes(values, sample, threshold=0.1)
    assert (a.onset, a.leading_run, a.from_first) == (0, 2, True)
    assert (b.onset, b.leading_run, b.from_first) == (2, 0, False)
    assert sample_shapes([0.0], [3], 0.1)[0].onset is None
    assert concentration([5.0] + [0.0] * 19) == 1.0
    assert concentration([1.0] * 20) == pytest.approx(0.1)
    assert concentration([0.0, 0.0]) == 0.0


@pytest.mark.parametrize(
    ("observed", "expected"), [(5, 1.0), (60, 30.0), (20, 40.0), (30_000, 29_000.0), (12_000, 9_000.0)]
)
def test_poisson_sf_matches_scipy(observed: int, expected: float) -> None:
    assert noise.poisson_sf(observed, expected) == pytest.approx(stats.poisson.sf(observed - 1, expected), rel=2e-3)


def test_poisson_sf_is_bounded_in_time_for_absurd_inputs() -> None:
    # A result.json may claim any count: the report must answer at once, not loop 10^12 times.
    assert noise.poisson_sf(10**12, 2e12) == pytest.approx(1.0)
    assert noise.poisson_sf(2 * 10**12, 10**12) == pytest.approx(0.0, abs=1e-300)
    assert noise.poisson_sf(float("inf"), 3.0) == 0.0
    assert noise.poisson_sf(0, 3.0) == 1.0 and noise.poisson_sf(3, 0.0) == 0.0
