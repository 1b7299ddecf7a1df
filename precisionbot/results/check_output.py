"""``CheckOutput``: what a check returns, its result, the per-position arrays behind it, and the compared
samples' tokens (so a failure can be localized on the sample that failed)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from precisionbot.results.run import CheckResult, PositionRecord


@dataclass(frozen=True)
class SampleTokens:
    """One compared sample's tokens, as its request ran: what ``localize:`` re-runs on the engine's dumper.

    Position ``p`` of ``tokens`` is scored from the forward that consumed position ``p - 1``; positions from
    ``scored_from`` on were compared.
    """

    tokens: tuple[int, ...]
    """The compared request's prompt followed by its generated tokens (golden: the teacher-forced sequence)."""
    scored_from: int
    """The prompt's length: the first compared position."""
    cached_prompt: int = 0
    """``decode_cache_hit``: the turn-1 prompt's length, whose decode of ``decoded`` tokens filled the cache."""
    decoded: int = 0


@dataclass(frozen=True)
class CheckOutput:
    """A check's result plus its per-position arrays (written as ``DIR/<check>.npz``) and, by sample index,
    the compared samples' tokens (kept in memory for the run's localization, not written)."""

    result: CheckResult
    record: PositionRecord | None = None
    samples: Mapping[int, SampleTokens] = field(default_factory=dict)
