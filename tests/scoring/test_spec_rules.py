"""``spec_decode``'s acceptance rule: main's floor from one figure or from its stored reruns, against scipy's t
quantile and on simulated reruns (its false-alarm rate is the stated alpha)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from precisionbot.scoring.spec_rules import (
    ACCEPT_ALPHA,
    ACCEPT_REL_TOL,
    Acceptance,
    MainAcceptance,
    acceptance_fell,
    acceptance_floor,
)


def test_one_figure_is_judged_with_the_relative_tolerance() -> None:
    assert acceptance_floor([2.0]) == pytest.approx(2.0 * (1 - ACCEPT_REL_TOL))
    assert acceptance_fell(1.89, 2.0) and not acceptance_fell(1.91, 2.0)
    with pytest.raises(ValueError, match="no figure"):
        acceptance_floor([])


def test_reruns_that_agree_to_the_bit_leave_the_relative_tolerance() -> None:
    assert acceptance_floor([1.8, 1.8, 1.8]) == pytest.approx(1.8 * (1 - ACCEPT_REL_TOL))


@pytest.mark.parametrize("lengths", [[1.5, 1.9, 2.3], [1.7, 1.8, 1.9, 1.75, 1.85, 1.8, 1.78, 1.82]])
def test_a_noisy_main_widens_the_floor_to_its_prediction_bound(lengths: list[float]) -> None:
    r = len(lengths)
    bound = np.mean(lengths) - stats.t.ppf(1 - ACCEPT_ALPHA, r - 1) * np.std(lengths, ddof=1) * math.sqrt(1 + 1 / r)
    expected = min(float(bound), float(np.mean(lengths)) * (1 - ACCEPT_REL_TOL))
    assert acceptance_floor(lengths) == pytest.approx(expected, rel=1e-9)


def test_the_spread_allowance_false_alarms_at_about_alpha() -> None:
    # A clean PR is one more rerun of main: with a spread far wider than 5 %, the floor is the prediction bound
    # alone, and a PR drawn from main's own distribution falls below it at about ACCEPT_ALPHA.
    rng = np.random.default_rng(7)
    trials, alarms = 20_000, 0
    for _ in range(trials):
        draws = rng.normal(2.0, 0.4, 5)
        alarms += acceptance_fell(float(draws[-1]), [float(x) for x in draws[:-1]])
    assert alarms / trials == pytest.approx(ACCEPT_ALPHA, abs=0.004)


def test_main_acceptance_words_say_which_allowance_set_the_floor() -> None:
    measured = MainAcceptance.measured(Acceptance(10, 30, 8))
    assert (measured.length, measured.rate, measured.stored) == (1.8, pytest.approx(8 / 30), False)
    assert measured.tolerance_text() == "more than 5 % below main"
    tight = MainAcceptance((1.8, 1.8, 1.8), (0.4, 0.4, 0.4), stored=True, baseline="run")
    assert tight.tolerance_text() == "below the floor 1.71: main's 3 stored reruns less 5 %"
    assert tight.fell(1.70) and not tight.fell(1.72)
    wide = MainAcceptance((1.5, 1.9, 2.3), (0.2, 0.3, 0.4), stored=True)
    assert "their spread (alpha 0.01), wider than 5 %" in wide.tolerance_text()
    assert not wide.fell(1.5)  # main's own lowest rerun is no fall


def test_acceptance_counters() -> None:
    assert Acceptance(0, 0, 0).mean_length == 1.0 and Acceptance(0, 0, 0).rate == 0.0
    assert Acceptance(4, 12, 6).mean_length == 2.5 and Acceptance(4, 12, 6).rate == 0.5
