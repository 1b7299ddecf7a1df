"""What the job localizes after a check fails: the failing check's own sample, cut just past its onset, on the
capture path that reproduces the check's two paths. Pure.

A bug that fires only on some inputs (past a chunk or page boundary, deep in a long context) shows only on the
sample that failed, so the job re-runs that sample's tokens, not a prompt of its own: the sample of the check's
worst position, focused on that sample's onset (its first position over the onset threshold; the worst
position itself where no onset is known), and cut ``ONSET_WINDOW`` positions past it, because the
localization names the first position where anything differs and every later one only costs dump space.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from precisionbot.results import CheckResult, SampleTokens

CHECK_PATHS = {
    "match": "decode",
    "prefill_cache_hit": "prefill-cache-hit",
    "decode_cache_hit": "decode-cache-hit",
    "golden": "golden",
    "spec_decode": "spec-decode",
}
"""The capture path (``localize --path``) that reproduces each check's two paths."""

NUMERIC_PARTS = {"spec_decode": "target logprobs"}
"""For a check of several parts, the part whose failure is a numerics divergence (result ``stats.caught_by``):
``spec_decode`` failing on acceptance, the tokens or the sampled path alone moved no logprob of the target,
so there is no op to name."""


def localizable(check: CheckResult) -> bool:
    """Whether a failed ``check`` is one a capture path localizes: it has a path and, where it has parts, the
    numeric one is among those that caught it."""
    if check.name not in CHECK_PATHS:
        return False
    part = NUMERIC_PARTS.get(check.name)
    caught = check.stats.get("caught_by")
    return part is None or (isinstance(caught, list | tuple) and part in caught)


ONSET_WINDOW = 8
"""Positions re-run past the focus."""


@dataclass(frozen=True)
class FailingSample:
    check: str
    path: str
    sample: int
    """The sample's index in the check (result.json's ``worst[].sample``)."""
    focus: int
    """The position localized around: the sample's onset, or its worst position."""
    tokens: SampleTokens
    """The sample's tokens through ``focus + ONSET_WINDOW``."""

    def to_dict(self) -> dict[str, int | str]:
        return {"path": self.path, "sample": self.sample, "focus_position": self.focus,
                "tokens": len(self.tokens.tokens)}  # fmt: skip


def failing_sample(check: CheckResult, samples: Mapping[int, SampleTokens]) -> FailingSample | None:
    """The sample to localize for a failed ``check``; None for a check no path reproduces or without samples."""
    path = CHECK_PATHS.get(check.name)
    if path is None or not samples or not localizable(check):
        return None
    worst = next((w for w in check.worst if w.sample in samples), None)
    sample = worst.sample if worst is not None else min(samples)
    full = samples[sample]
    focus = worst.position if worst is not None else full.scored_from
    summary = next((s for s in check.samples if s.sample == sample), None)
    if summary is not None and summary.onset is not None:
        focus = full.scored_from + summary.onset
    focus = max(full.scored_from, min(focus, len(full.tokens) - 1))
    # The decode path needs two generated tokens: the first comes from the prefill, not a decode step.
    stop = min(len(full.tokens), max(focus + 1 + ONSET_WINDOW, full.scored_from + 2))
    cut = SampleTokens(full.tokens[:stop], full.scored_from, full.cached_prompt, full.decoded)
    return FailingSample(check.name, path, sample, focus, cut)
