"""One result directory's worth of report, the input every output (comment, summary, JSON, HTML) is made from.

Its own module so that the findings (``findings.py``) and the view model (``view.py``) both build on it
without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from precisionbot.report.diagnosis import BaselineStats
from precisionbot.results import PositionRecord, RunResult


@dataclass(frozen=True)
class ReportSection:
    """One result directory's worth of report: a (model, config) cell of a matrix, or the whole run."""

    label: str
    run: RunResult
    previous: RunResult | None = None
    """The previous run on the same PR, for "since the previous run"."""
    baseline_stats: BaselineStats | None = None
    """Per check, the baseline run's own stats; None = ``run.baseline["stats"]`` when it is there."""
    records: Mapping[str, PositionRecord] = field(default_factory=dict)
    """Per-position arrays by check name (the result directory's ``.npz`` files), for the heat strips."""
    directory: str = ""
    """The result directory read, when known: outside GitHub Actions the report says the rest is there."""
