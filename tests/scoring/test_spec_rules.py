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
    SampleAcceptance,
    acceptance_fell,
    acceptance_floor,
    pooled,
    text_key,
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


def _samples(*rows: tuple[str, int, int, int]) -> tuple[SampleAcceptance, ...]:
    return tuple(SampleAcceptance(text, Acceptance(v, d, a)) for text, v, d, a in rows)


def test_pairing_compares_only_the_samples_whose_text_is_mains_in_every_rerun() -> None:
    reruns = (
        _samples(("a", 10, 30, 18), ("b", 10, 30, 18), ("c", 10, 30, 9)),
        _samples(("a", 10, 30, 18), ("b", 10, 30, 18), ("c", 10, 30, 9)),
        _samples(("a", 10, 30, 18), ("b", 10, 30, 18), ("x", 10, 30, 9)),  # sample 2's text differs here
    )
    main = MainAcceptance((2.5, 2.5, 2.5), (0.5, 0.5, 0.5), stored=True, samples=reruns)
    # The PR changed sample 1's text (its acceptance fell with it) and kept 0 and 2.
    pr = _samples(("a", 10, 30, 17), ("B", 10, 30, 1), ("c", 10, 30, 9))
    paired = main.paired(pr)
    assert paired is not None and (paired.compared, paired.samples) == (1, 3)  # sample 2 is not main's in rerun 3
    assert paired.main.lengths == (2.8, 2.8, 2.8) and paired.pr == Acceptance(10, 30, 17)
    assert not paired.fell() and paired.scope_text() == "over the 1 of 3 samples whose text is main's"
    # The whole run would have fallen: 1 + 27/30 = 1.9 against main's 2.5.
    assert main.fell(1.9)


def test_pairing_keeps_a_draft_regression_on_unchanged_text_and_says_when_nothing_is_comparable() -> None:
    main = MainAcceptance.measured(Acceptance(20, 60, 36), _samples(("a", 10, 30, 18), ("b", 10, 30, 18)))
    worse = main.paired(_samples(("a", 10, 30, 4), ("b", 10, 30, 4)))
    assert worse is not None and worse.compared == 2 and worse.fell() and worse.scope_text() == ""
    none_kept = main.paired(_samples(("A", 10, 30, 0), ("B", 10, 30, 0)))
    assert none_kept is not None and not none_kept.judged and not none_kept.fell()


def test_pairing_needs_per_sample_figures_on_both_sides_of_the_same_count() -> None:
    with_samples = MainAcceptance.measured(Acceptance(10, 30, 18), _samples(("a", 10, 30, 18)))
    assert MainAcceptance.measured(Acceptance(10, 30, 18)).paired(_samples(("a", 10, 30, 18))) is None
    assert with_samples.paired(None) is None
    assert with_samples.paired(_samples(("a", 5, 15, 9), ("b", 5, 15, 9))) is None


def test_text_key_tells_token_lists_apart() -> None:
    assert text_key([1, 23]) == text_key((1, 23)) != text_key([12, 3]) != text_key([1, 2, 3])
    assert pooled([Acceptance(1, 2, 1), Acceptance(3, 4, 2)]) == Acceptance(4, 6, 3)
