from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from precisionbot.metrics.flips import poisson_sf
from precisionbot.report.buckets import bucket_rows
from precisionbot.report.evidence import Reading, flip_evidence, read_position
from precisionbot.report.heat_strip import LEVELS, ZERO, level, render_strip, worst_strips
from precisionbot.results import CheckResult, PositionRecord, Verdict, WorstPosition


def pos(delta: float, gap: float | None = None, flip: bool | None = None) -> WorstPosition:
    return WorstPosition(0, 0, 0, "x", -1.0, -1.0 - delta, delta, 0.0, margin_ref=gap, flip=flip)


@pytest.mark.parametrize(
    ("delta", "gap", "flip", "reading", "systematic"),
    [
        # Seed 001: the Falcon flip, gap 0.455, Δ −0.51.
        (-0.51, 0.455, True, Reading.BUG, True),
        (0.05, 0.455, True, Reading.BUG, True),  # the gap alone convicts
        (0.28, 5.1, False, Reading.BUG, False),  # |Δ| > 0.1: far above bf16 noise
        (-0.2, None, None, Reading.BUG, False),
        (0.05, 0.2, True, Reading.UNATTRIBUTABLE, False),
        (0.05, 0.35, True, Reading.UNCLEAR, False),  # between 0.3 and 0.4
        (0.001, 2.0, False, Reading.NOISE, False),
        (0.01, None, None, Reading.NOISE, False),
        (0.05, 2.0, False, Reading.UNCLEAR, False),
        (math.nan, None, None, Reading.BUG, False),
    ],
)
def test_read_position(delta: float, gap: float | None, flip: bool | None, reading: Reading, systematic: bool) -> None:
    ev = read_position(pos(delta, gap, flip))
    assert ev.reading is reading
    assert ev.systematic_flip is systematic
    assert ev.why


@given(st.integers(min_value=0, max_value=400), st.floats(min_value=1e-3, max_value=300.0))
def test_poisson_tail_matches_scipy(observed: int, expected: float) -> None:
    reference = float(scipy_stats.poisson.sf(observed - 1, expected))
    assert poisson_sf(observed, expected) == pytest.approx(reference, rel=1e-7, abs=1e-300)


def test_flip_evidence() -> None:
    ev = flip_evidence(41, 4.2)
    assert ev is not None and ev.excess
    ev = flip_evidence(3, 3.4)
    assert ev is not None and not ev.excess
    assert flip_evidence(None, 3.0) is None
    assert flip_evidence(3, math.nan) is None
    ev = flip_evidence(1, 0.0)
    assert ev is not None and ev.excess  # no flip was expected at all


@pytest.mark.parametrize(
    ("value", "bar"),
    [
        (0.0, ZERO),
        (1e-9, "▁"),
        (5e-6, "▂"),
        (5e-5, "▃"),
        (5e-4, "▄"),
        (5e-3, "▅"),
        (0.05, "▆"),
        (0.5, "▇"),
        (1.0, "█"),
        (30.0, "█"),
        (math.nan, "█"),
        (math.inf, "█"),
    ],
)
def test_level(value: float, bar: str) -> None:
    assert level(value) == bar


def test_render_strip_bins_by_maximum() -> None:
    values = np.array([0.0] * 10 + [0.5] + [0.0] * 9)
    bars, per_bar = render_strip(values, width=4)
    assert per_bar == 5 and bars == ZERO * 2 + "▇" + ZERO
    assert render_strip(np.array([]), width=4) == ("", 1)
    assert len(render_strip(np.full(1000, 1e-3), width=64)[0]) <= 64


def test_worst_strips_pick_the_worst_samples_and_their_onset() -> None:
    n = 50
    sample = np.repeat(np.arange(3), n).astype(np.int32)
    position = np.tile(np.arange(n)[::-1], 3).astype(np.int32)  # stored out of order on purpose
    delta = np.zeros(3 * n)
    delta[n : 2 * n] = np.where(np.arange(n)[::-1] >= 20, 0.4, 0.0)  # sample 1 diverges from position 20
    record = PositionRecord(sample, position, np.zeros_like(sample), delta, np.zeros(3 * n))
    (first, *_rest) = worst_strips("match", record, samples=2, width=50)
    assert first.sample == 1 and first.onset == "20"
    assert first.bars == ZERO * 20 + "▆" * 30
    assert LEVELS[0] not in first.bars


def test_bucket_shapes() -> None:
    def check(raw: object) -> CheckResult:
        return CheckResult("golden", Verdict.FAIL, stats={"flips_by_margin": raw})

    rows = bucket_rows(check({"[1, inf)": {"flips": 3, "positions": 100}, "[0, 0.1)": {"flips": 2, "positions": 10}}))
    assert [(r.bucket, r.flips, r.rate) for r in rows] == [("[0, 0.1)", "2", "20%"), ("[1, ∞)", "3", "3%")]
    rows = bucket_rows(check({"0-0.1": 3, "1+": 0}))
    assert [(r.bucket, r.flips, r.positions) for r in rows] == [("[0, 0.1)", "3", "–"), ("[1, ∞)", "0", "–")]
    rows = bucket_rows(check([{"lo": 0.3, "hi": 1.0, "flips": 4, "positions": 9120, "band_rate": 0.0}]))
    assert [(r.bucket, r.rate, r.band_rate) for r in rows] == [("[0.3, 1)", "0.044%", "0%")]
    assert bucket_rows(check(None)) == ()
    assert bucket_rows(check({"nonsense": 1})) == ()


def test_a_value_just_over_a_threshold_never_reads_as_equal_to_it() -> None:
    assert read_position(pos(0.1004)).why == "|Δ| 0.1004 > 0.1"
    assert read_position(pos(0.05, 0.4001, True)).why == "flip at gap 0.4001 > 0.4, the systematic-flip gap"
