"""The HTML charts' log axes follow the data: exact zeros sit on a line a decade below the smallest value that
is not zero (labelled 0), not at a fixed 1e-12 that leaves a mostly bit-identical golden run looking empty."""

from __future__ import annotations

import re

import numpy as np
import pytest

from precisionbot.report.chart_svg import lift, zero_line


def test_zeros_sit_a_decade_below_the_smallest_value() -> None:
    values = np.array([0.0, 0.0, 3e-4, 0.2, 1.9])
    zero = zero_line(values)
    assert zero == pytest.approx(1e-5)
    assert list(lift(values, zero)) == pytest.approx([1e-5, 1e-5, 3e-4, 0.2, 1.9])


def test_all_zeros_still_draw_on_a_visible_line() -> None:
    assert zero_line(np.zeros(5), np.zeros(3)) == pytest.approx(1e-6)


def test_the_charts_axes_span_the_data() -> None:
    pytest.importorskip("matplotlib")
    from precisionbot.report.chart_data import DepthLines, SectionFigures
    from precisionbot.report.chart_svg import section_charts

    fig = DepthLines(labels=("[0, 128)", "[128, 256)", "decode tail"), kl_p50=(0.0, 0.0, 0.27),
                     kl_p99=(0.0, 0.0, 1.8), kl_max=(0.0, 0.0, 1.9))  # fmt: skip
    (chart,) = section_charts("t", SectionFigures(depth=fig))
    ticks = re.findall(r">\s*(1e-?\d+|0)\s*</text>", chart.svg)
    assert "0" in ticks  # the zero line is labelled
    # The axis spans the data: the zero line at 1e-2 (a decade below 0.27, drawn as 0), up to 1.9.
    assert ticks == ["0", "1e-1", "1e0"]
