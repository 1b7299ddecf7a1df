from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from precisionbot import fmt


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, "0"),
        (3.2e-05, "3.2e-05"),
        (3.249e-05, "3.2e-05"),
        (0.0123, "0.012"),
        (1.5, "1.5"),
        (2.0, "2"),
        (1234.5, "1,200"),
        (211538.0, "210,000"),
        (2.5e6, "2.5e+06"),
        (-0.2, "-0.2"),
        (5e-324, "4.9e-324"),
        (math.nan, "NaN"),
        (math.inf, "∞"),
        (-math.inf, "-∞"),
        (None, "–"),
    ],
)
def test_sig(value: float | None, expected: str) -> None:
    assert fmt.sig(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, "0"),
        (3.2e-05, "3.20e-05"),
        (0.001, "0.001"),
        (0.0123456, "0.0123"),
        (9999.0, "1e+04"),
        (12345.0, "1.23e+04"),
        (-0.2, "-0.2"),
        (5e-324, "4.94e-324"),
        (math.inf, "inf"),
    ],
)
def test_plain(value: float, expected: str) -> None:
    assert fmt.plain(value) == expected


@given(st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != 0.0))
def test_plain_never_reads_as_zero(value: float) -> None:
    assert float(fmt.plain(value)) != 0.0


@given(st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != 0.0))
def test_a_nonzero_value_never_reads_as_zero(value: float) -> None:
    # The whole point of the module: a real divergence must never print as a clean "0".
    for digits in (1, 2, 3):
        text = fmt.sig(value, digits).replace(",", "")
        assert float(text) != 0.0
        assert math.copysign(1.0, float(text)) == math.copysign(1.0, value)


@given(st.floats(min_value=1e-300, max_value=1e300))
def test_sig_keeps_two_significant_figures(value: float) -> None:
    assert math.isclose(float(fmt.sig(value).replace(",", "")), value, rel_tol=0.051)


def test_signed_and_logprob_and_percent() -> None:
    assert fmt.signed(0.51) == "+0.51"
    assert fmt.signed(-0.2) == "-0.2"
    assert fmt.signed(0.0) == "0"
    assert fmt.logprob(-1.0412) == "-1.04"
    assert fmt.logprob(-0.000123) == "-0.000123"
    assert fmt.percent(0.0123) == "1.2%"
    assert fmt.percent(1.2e-6) == "0.00012%"
    assert fmt.percent(0.0) == "0%"
    assert fmt.percent(1.0) == "100%"
    assert fmt.percent(0.415) == "42%"


def test_count() -> None:
    assert fmt.count(12345) == "12,345"
    assert fmt.count(12345.0) == "12,345"
    assert fmt.count(None) == "–"
    assert fmt.count(0.5) == "0.5"


@pytest.mark.parametrize(
    ("current", "reference", "expected"),
    [
        (1.0, 1.0, "≈"),
        (1.2, 1.0, "≈"),
        (12.0, 1.0, "×12 ↑"),
        (0.1, 1.0, "×0.1 ↓"),
        (0.0, 0.0, "= 0"),
        (1e-9, 0.0, "new (was 0)"),
        (0.0, 1e-9, "now 0"),
        (None, 1.0, "–"),
        (math.nan, 1.0, "–"),
    ],
)
def test_ratio(current: float | None, reference: float | None, expected: str) -> None:
    assert fmt.ratio(current, reference) == expected


def test_short_sha() -> None:
    assert fmt.short_sha("9f3c2e1d4b5a") == "9f3c2e1"
    assert fmt.short_sha(None) == "–"
