from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from precisionbot import metrics

CONTRACT_KEYS = {"positions", "p50", "p99", "p999", "max", "frac_over"}


def test_contract_keys_and_values_against_numpy() -> None:
    rng = np.random.default_rng(0)
    v = rng.exponential(1e-3, 10_000)
    s = metrics.tail_stats(v)
    assert set(s) >= CONTRACT_KEYS
    assert s["positions"] == 10_000
    assert s["p50"] == pytest.approx(np.percentile(v, 50))
    assert s["p999"] == pytest.approx(np.percentile(v, 99.9))
    assert s["p001"] == pytest.approx(np.percentile(v, 0.1))
    assert s["max"] == v.max() and s["argmax"] == int(np.argmax(v))
    assert set(s["frac_over"]) == {"1e-4", "1e-3", "1e-2"}
    assert s["frac_over"]["1e-3"] == pytest.approx(np.mean(v > 1e-3))
    assert s["mean_se"] == pytest.approx(np.std(v, ddof=1) / 100)


def test_nonfinite_is_reported_with_its_position() -> None:
    v = np.array([0.1, np.nan, 0.2, np.inf])
    s = metrics.tail_stats(v)
    assert s["nonfinite"] == 2 and s["nonfinite_at"] == [1, 3]
    assert s["max"] == 0.2 and s["positions"] == 4
    all_bad = metrics.tail_stats([np.nan])
    assert all_bad["nonfinite"] == 1 and math.isnan(all_bad["max"])


def test_single_position_and_empty_input() -> None:
    s = metrics.tail_stats([3e-5])
    assert s["p50"] == s["max"] == s["min"] == 3e-5 and s["mean_se"] == 0.0
    with pytest.raises(ValueError, match="empty"):
        metrics.tail_stats([])


@settings(max_examples=50, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 300), elements=st.floats(0, 1e3)))
def test_percentiles_are_monotone(v: np.ndarray) -> None:
    s = metrics.tail_stats(v)
    chain = [s["min"]] + [s[metrics.percentile_key(q)] for q in metrics.PERCENTILES] + [s["max"]]
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(chain))


def test_threshold_and_percentile_keys() -> None:
    assert metrics.threshold_key(1e-4) == "1e-4"
    assert metrics.threshold_key(2.5e-3) == "2.5e-3"
    assert [metrics.percentile_key(q) for q in metrics.PERCENTILES] == [
        "p001",
        "p01",
        "p05",
        "p10",
        "p50",
        "p90",
        "p95",
        "p99",
        "p999",
    ]


def test_delta_p_and_same_top() -> None:
    lp_ref = np.log([0.5, 0.25])
    lp_test = np.log([0.6, 0.2])
    s = metrics.delta_p_stats(lp_ref, lp_test)
    assert s["mean"] == pytest.approx(0.025)
    assert s["rms"] == pytest.approx(math.sqrt((0.1**2 + 0.05**2) / 2))
    rate, se = metrics.same_top(np.array([False, False, True, False]))
    assert rate == 0.75 and se == pytest.approx(math.sqrt(0.75 * 0.25 / 4))


def test_mean_block_se_accounts_for_correlated_neighbours() -> None:
    rng = np.random.default_rng(3)
    iid = rng.normal(0, 1, 64 * 400)
    m, se = metrics.mean_block_se(iid)
    assert m == pytest.approx(np.mean(iid))
    assert se == pytest.approx(np.std(iid, ddof=1) / math.sqrt(iid.size), rel=0.15)  # iid: the plain se
    # Runs of 32 equal values: the plain se is ~√32 too small; block means see the correlation.
    runs = np.repeat(rng.normal(0, 1, 800), 32)
    _, block_se = metrics.mean_block_se(runs)
    naive = np.std(runs, ddof=1) / math.sqrt(runs.size)
    assert block_se > 3 * naive
    assert metrics.mean_block_se([1.0, 3.0]) == (2.0, 1.0)
    with pytest.raises(ValueError, match="empty"):
        metrics.mean_block_se([np.nan])
