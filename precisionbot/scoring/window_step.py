"""The window-step rule: a step in the logprob error where generation crosses the sliding window (issue 11).

A one-key error in the sliding-window hand-off (decode keeping W - 1 keys where prefill keeps W, a ring
buffer off by one) is small in magnitude — under production noise ``match``'s mean k3 stays below
``kl_div`` — but it has a place: it starts at the window's edge and stays. Seed 002's "onset
mid-generation / window handoff" is that place. This rule looks for it where the engine reports a sliding
window (``sliding_window_size`` in ``/server_info``) and the generation crosses it.

Per sample and per candidate edge — generated token ``W`` (a decode-side window or ring buffer) and context
position ``W`` (the whole context filling the window) — it compares the ``L`` compared positions just after
the edge with the ``L`` just before (``L`` = the shorter side, at most ``W``, at least ``MIN_SIDE``). The
statistic is a ratio of medians of the *scaled* error ``|δ| / (1 − p_ref)`` (``δ = lp_ref − lp_test``,
``p_ref = e^lp_ref``): a logit error ``ε`` moves a token's logprob by about ``(1 − p)·ε``, so dividing by
``1 − p`` keeps the statistic from reading "the text became more confident after the edge" (a repetition
loop has tiny k3) as "the kernel became more exact" — or the reverse as a step. Medians, because one
token carries a mean. A sample *steps* when the ratio is at least ``STEP_RATIO``; the rule fails when more
than half the eligible samples step at the same edge, with at least ``MIN_SAMPLES`` eligible.

The thresholds are measured (benchmarks/RESULTS.md, "Window-step rule"): clean production reruns and the
``swa-decode-window`` fault on the builtin hybrid preset.

Pure (numpy only): arrays in, a :class:`WindowStep` per edge out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from precisionbot.fmt import count
from precisionbot.fmt import plain as _fmt
from precisionbot.results import CheckResult, PositionRecord, Verdict

MIN_SIDE = 32
"""Compared positions needed on each side of the edge for a sample to count (a median of fewer is noise)."""
STEP_RATIO = 1.5
"""A sample steps when the median scaled error after the edge is at least this many times the one before."""
MIN_SAMPLES = 3
"""Eligible samples needed before "most samples" means anything."""
EDGES = ("generated", "context")
"""``generated``: the edge is generated token ``W``; ``context``: the scored token has ``W`` tokens before it."""


@dataclass(frozen=True)
class WindowStep:
    """The rule's outcome at one edge; ``as_stats()`` is what the check keeps (so a reader can re-judge it)."""

    edge: str
    window: int
    samples: int
    """Samples with at least ``MIN_SIDE`` compared positions on both sides of the edge."""
    stepped: int
    """Of those, samples whose ratio is at least ``STEP_RATIO``."""
    median_ratio: float

    @property
    def fails(self) -> bool:
        return step_fails(self.samples, self.stepped)

    def as_stats(self) -> dict[str, Any]:
        return asdict(self)

    def reason(self) -> str:
        where = "generated token" if self.edge == "generated" else "context length"
        return (
            f"the logprob error steps up at the sliding window's edge ({where} {count(self.window)}) in "
            f"{self.stepped} of {self.samples} samples (median scaled error after / before: "
            f"{_fmt(self.median_ratio)}x; a sample steps at {_fmt(STEP_RATIO)}x): the window hand-off differs "
            "between decode and prefill"
        )


def step_fails(samples: int, stepped: int) -> bool:
    """The verdict from the counts alone (``verification`` re-derives it from a result's stats)."""
    return samples >= MIN_SAMPLES and 2 * stepped > samples


def scaled_error(lp_ref: np.ndarray[Any, Any], lp_test: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``|δ| / (1 − p_ref)``; a token the reference is certain of (``p_ref`` = 1 in float64) scales by 1e-12."""
    err: np.ndarray[Any, Any] = np.abs(lp_ref - lp_test) / np.maximum(-np.expm1(lp_ref), 1e-12)
    return err


def sample_ratio(err: np.ndarray[Any, Any], at: np.ndarray[Any, Any], edge: int) -> float | None:
    """Median after / median before over equal spans next to ``edge`` (``at``: each position's index on the
    edge's axis, increasing); None when either side has fewer than ``MIN_SIDE`` positions."""
    before, after = err[at < edge], err[at >= edge]
    span = min(len(before), len(after), edge)
    if span < MIN_SIDE:
        return None
    lo, hi = float(np.median(before[-span:])), float(np.median(after[:span]))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    if lo <= 0:
        return None if hi <= 0 else float("inf")
    return hi / lo


def window_steps(
    sample: np.ndarray[Any, Any],
    position: np.ndarray[Any, Any],
    lp_ref: np.ndarray[Any, Any],
    lp_test: np.ndarray[Any, Any],
    prompt_tokens: Mapping[int, int],
    window: int,
) -> tuple[WindowStep, ...]:
    """One :class:`WindowStep` per edge the generation crosses with enough positions (possibly none)."""
    err = scaled_error(np.asarray(lp_ref, dtype=np.float64), np.asarray(lp_test, dtype=np.float64))
    out = []
    for edge in EDGES:
        ratios = []
        for s in np.unique(sample):
            sel = sample == s
            pos = position[sel]
            order = np.argsort(pos, kind="stable")
            at = pos[order] - (prompt_tokens.get(int(s), 0) if edge == "generated" else 0)
            r = sample_ratio(err[sel][order], at, window)
            if r is not None:
                ratios.append(r)
        if ratios:
            stepped = sum(r >= STEP_RATIO for r in ratios)
            out.append(WindowStep(edge, window, len(ratios), int(stepped), float(np.median(ratios))))
    return tuple(out)


def judge_window_step(check: CheckResult, record: PositionRecord, window: int) -> CheckResult:
    """Keep the rule's statistic in ``stats["window_step"]`` (the edge with the most stepping samples) and
    turn a PASS into FAIL when it fails (a FAIL gets the reason added; an INCONCLUSIVE stays as it is)."""
    prompts = {s.sample: s.prompt_tokens for s in check.samples}
    steps = window_steps(record.sample, record.position, record.lp_ref, record.lp_test, prompts, window)
    if not steps:
        return check
    worst = max(steps, key=lambda w: (w.fails, w.stepped / w.samples, w.median_ratio))
    stats = {**check.stats, "window_step": worst.as_stats()}
    if check.verdict is Verdict.PASS and worst.fails:
        return replace(check, verdict=Verdict.FAIL, stats=stats, reasons=(worst.reason(), *check.reasons[1:]))
    if check.verdict is Verdict.FAIL and worst.fails:
        return replace(check, stats=stats, reasons=(*check.reasons, worst.reason()))
    return replace(check, stats=stats)
