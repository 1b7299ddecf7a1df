"""The figures' data (pure): thinning keeps what matters, is bounded and deterministic; onsets and splits."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from precisionbot.report import chart_data as figures
from precisionbot.results import CheckResult, PositionRecord, Verdict
from tests.report import html_scenarios, scenarios


def test_thin_line_keeps_every_spike_and_is_bounded() -> None:
    value = np.full(10_000, 1e-8)
    value[[17, 5_003, 9_999]] = [0.5, 2.0, 0.3]
    value[40] = np.nan
    x, y = figures.thin_line(np.arange(10_000), value, points=400)
    assert len(x) == len(y) <= 400
    assert np.isinf(y).sum() == 1  # NaN is drawn at the top, never dropped
    assert {0.5, 2.0, 0.3} <= set(y[np.isfinite(y)].tolist())
    assert np.all(np.diff(x) > 0)


def test_thin_line_floors_zeros() -> None:
    _, y = figures.thin_line(np.arange(3), np.array([0.0, 1e-20, 1e-3]))
    assert y.tolist() == [figures.FLOOR, figures.FLOOR, 1e-3]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 6000), n_flips=st.integers(0, 50), points=st.integers(10, 3000))
def test_thin_scatter_keeps_flips_bounded_and_deterministic(n: int, n_flips: int, points: int) -> None:
    rng = np.random.default_rng(n)
    kl = rng.lognormal(-10, 3, n)
    flip = np.zeros(n, dtype=bool)
    flip[rng.choice(n, min(n, n_flips), replace=False)] = True
    keep = figures.thin_scatter(kl, flip, points)
    assert len(keep) <= max(points, 0) or len(keep) == n <= points
    assert len(set(keep.tolist())) == len(keep)
    if flip.sum() <= points:
        assert set(np.flatnonzero(flip)) <= set(keep.tolist())
    if n > points and n_flips < points // 2:
        assert int(np.argmax(kl)) in keep  # the worst position is always drawn
    assert np.array_equal(keep, figures.thin_scatter(kl, flip, points))


def test_position_lines_pick_the_worst_samples_and_mark_the_onset() -> None:
    record = scenarios.restore_record(n_samples=6, n_pos=200)
    check = CheckResult(name="prefill_cache_hit", verdict=Verdict.FAIL)
    lines = figures.position_lines(check, record, {"chunked_prefill_size": 64})
    assert lines is not None and lines.measure == "k3" and lines.samples == 6
    assert len(lines.lines) == figures.LINE_SAMPLES
    # Broken from the first generated token: every drawn sample's onset is its first position.
    assert all(line.onset == 1536 for line in lines.lines)
    assert lines.threshold == figures.ONSET_K3
    assert lines.boundaries == (("prefill chunk", (1600, 1664, 1728)),)  # positions 1536..1735


def test_a_clean_check_has_no_onset() -> None:
    record = scenarios.restore_record(n_samples=2, n_pos=100, broken=False)
    lines = figures.position_lines(CheckResult(name="match", verdict=Verdict.PASS), record, {})
    assert lines is not None and all(line.onset is None for line in lines.lines)


def test_golden_figures_use_kl_and_split_prose_from_code() -> None:
    (section,) = html_scenarios.charts()
    figs = figures.section_figures(section.run, section.records)
    golden = next(f for f in figs.lines if f.check == "golden")
    assert golden.measure == "KL" and golden.threshold == 3.8e-5  # the noise band's KL p99
    assert figs.scatter is not None and figs.scatter.flips > 0
    assert int(figs.scatter.flip.sum()) == figs.scatter.flips  # 4,200 positions: nothing thinned
    assert figs.scatter.confident_margin == 0.42
    assert figs.cdf is not None and [s.name for s in figs.cdf.series] == ["code", "prose"]
    assert sum(s.positions for s in figs.cdf.series) == len(section.records["golden"])
    assert all(np.all(np.diff(s.kl) >= 0) for s in figs.cdf.series)
    assert figs.depth is not None and figs.depth.labels[-1] == "decode tail"
    (bars,) = figs.buckets
    assert bars.labels[0] == "[0, 0.1)" and bars.band_rate[0] == 0.004 and bars.flips[0] == 22
    assert len(figs) == 3 + 1 + 1 + 1 + 1


def test_no_records_no_per_position_figures() -> None:
    (section,) = scenarios.inconclusive()
    figs = figures.section_figures(section.run, {})
    assert len(figs) == 0


def test_kl_cdf_without_kinds_is_one_curve() -> None:
    record = html_scenarios.golden_record(n_samples=2, n_pos=50)
    cdf = figures.kl_cdf(CheckResult(name="golden", verdict=Verdict.PASS), record)
    assert cdf is not None and [s.name for s in cdf.series] == ["all positions"]
    assert len(cdf.fraction) == figures.CDF_POINTS


def test_record_values_k3_for_helpers() -> None:
    record = PositionRecord.from_lists([0, 0], [5, 6], [1, 2], [-1.0, -2.0], [-1.0, -2.5])
    values, measure = figures.record_values(CheckResult(name="match", verdict=Verdict.PASS), record)
    assert measure == "k3" and values[0] == 0.0 and abs(values[1] - (np.exp(0.5) - 1.5)) < 1e-15
