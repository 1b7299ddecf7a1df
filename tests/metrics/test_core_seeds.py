"""The worked figures of docs/background.md, each an independent check of one formula."""

from __future__ import annotations

import math

import numpy as np
import pytest

from precisionbot import metrics


def test_mse_and_max_error_seed_000() -> None:
    errors = metrics.logprob_errors([0.0, 0.0, 0.0, 0.0], [0.1, 0.1, 0.05, 0.2])
    assert errors["mse"] == pytest.approx(0.015625, rel=1e-12)
    assert errors["max_abs"] == pytest.approx(0.2, rel=1e-12)
    assert errors["rmse"] == pytest.approx(0.125, rel=1e-12)
    # delta = lp_ref - lp_test, as everywhere: a test path that is more confident gives a negative mean.
    assert errors["mean"] == pytest.approx(-0.1125, rel=1e-12)


def test_kl_example_seed_000() -> None:
    kl = metrics.kl_divergence(np.log([0.7, 0.2, 0.1]), np.log([0.6, 0.3, 0.1]))
    assert float(kl) == pytest.approx(0.0268, abs=5e-5)


def test_hand_logprob_seed_000() -> None:
    lp = metrics.log_softmax([2.0, 1.0, 0.5, -1.0])
    lse = 2.0 - lp[0]
    assert lse == pytest.approx(2.50, abs=0.005)
    assert lp[2] == pytest.approx(-2.00, abs=0.005)


@pytest.mark.parametrize(("margin", "expected", "rel"), [(0.1, 0.24, 0.01), (0.5, 2e-4, 0.02), (1.0, 7.7e-13, 0.01)])
def test_flip_probability_seed_003(margin: float, expected: float, rel: float) -> None:
    assert float(metrics.flip_probability(margin, 0.1)) == pytest.approx(expected, rel=rel)


def test_accuracy_bound_seed_003() -> None:
    assert metrics.accuracy_bound([7e-4] * 500) == pytest.approx(0.4, abs=0.02)
    # "a 2-point drop needs mean KL > 1.6e-6" over 500 steps
    assert metrics.accuracy_bound([1.6e-6] * 500) == pytest.approx(0.02, rel=1e-6)


def test_k3_matches_sglang_formula_on_moderate_deltas() -> None:
    logr = np.array([-0.3, -0.01, 0.02, 0.5, 2.0])
    assert metrics.k3(logr) == pytest.approx(np.exp(logr) - 1 - logr, rel=1e-12)


def test_sglang_mean_k3_is_mean_of_sample_means() -> None:
    # Sample 0 has 3 positions, sample 1 one: the mean of means weighs samples, not tokens.
    values = np.array([0.0, 0.0, 0.3, 1.0])
    sample = np.array([0, 0, 0, 1])
    expected = (0.1 + 1.0) / 2
    assert metrics.sglang_mean_k3(values, sample) == pytest.approx(expected)
    assert metrics.sglang_mean_k3(values, sample) != pytest.approx(float(np.mean(values)))


def test_rel_diff_matches_definition() -> None:
    x = np.array([1.0, 2.0, 3.0])
    assert metrics.rel_diff(x, x) == 0.0
    assert metrics.rel_diff(x, -x) == pytest.approx(2.0)
    assert metrics.rel_diff(np.zeros(3), np.zeros(3)) == 0.0
    y = x + np.array([1e-3, 0, 0])
    assert metrics.rel_diff(x, y) == pytest.approx(1 - 2 * x @ y / (x @ x + y @ y), rel=1e-9)
    assert math.isfinite(metrics.rel_diff(x, y))
