"""``CheckOutput``: what a check returns, its result and the per-position arrays behind it."""

from __future__ import annotations

from dataclasses import dataclass

from precisionbot.results.run import CheckResult, PositionRecord


@dataclass(frozen=True)
class CheckOutput:
    """A check's result plus its per-position arrays (written as ``DIR/<check>.npz``)."""

    result: CheckResult
    record: PositionRecord | None = None
