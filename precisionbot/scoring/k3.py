"""From aligned logprobs to a ``CheckResult``: k3, SGLang's mean, tails, per-sample shape, worst positions, verdict.

Pure (numpy only). ``ref`` is the trusted path (the no-cache replay), ``test`` the path under test (decode,
cache hit): ``delta = lp_ref − lp_test`` is SGLang's ``logr = replay − generation``, ``k3 = e^δ − 1 − δ``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from precisionbot import metrics
from precisionbot.config import ThresholdSet
from precisionbot.fmt import plain as _fmt
from precisionbot.metrics.onset import sample_shapes
from precisionbot.results import (
    CacheStats,
    CheckOutput,
    CheckResult,
    PositionRecord,
    SampleSummary,
    Verdict,
    WorstPosition,
    token_context,
)

WORST_POSITIONS = 10
STAT_THRESHOLDS = (1e-4, 1e-3, 1e-2)


@dataclass(frozen=True)
class AlignedSample:
    """One sample's compared positions: ``position[k]`` indexes the scored token in prompt + output."""

    sample: int
    prompt_tokens: int
    position: np.ndarray[Any, Any]
    token_id: np.ndarray[Any, Any]
    lp_ref: np.ndarray[Any, Any]
    lp_test: np.ndarray[Any, Any]
    token_text: Sequence[str | None] = ()
    top1_ref: np.ndarray[Any, Any] | None = None
    """The reference path's top-1 token id per position (for flips), when known."""
    margin_ref: np.ndarray[Any, Any] | None = None
    """The reference path's top-1 minus top-2 logprob per position, when known."""
    cached_tokens: int | None = None


MIN_KEPT_FRACTION = 0.5
"""A cache helper compares only the prompts that hit the cache: more than this share of them must hit, or the
helper is INCONCLUSIVE (a comparison of the few that hit says little about the cache path)."""


def enough_cache_hits(kept: int, total: int) -> bool:
    """Whether a cache helper's hits are enough to judge: more than half of its prompts."""
    return kept > MIN_KEPT_FRACTION * total


def judge_k3(stats: dict[str, Any], limits: ThresholdSet) -> tuple[Verdict, tuple[str, ...]]:
    """SGLang's rule (``mean_k3 < kl_div``, strict) plus the tail rules; every failed rule is a reason."""
    fails: list[str] = []
    if stats["nonfinite"]:
        fails.append(f"{stats['nonfinite']} position(s) have a non-finite k3 (an infinite logprob difference)")
    mean = stats["mean_k3"]
    if not mean < limits.kl_div:
        limit = f"{limits.kl_div_key} {_fmt(limits.kl_div)}"
        fails.append(f"mean_k3 {_fmt(mean)} is not below {limit} (SGLang's threshold)")
    frac = stats["frac_over"][metrics.threshold_key(limits.token_k3)]
    if frac > limits.max_frac_over:
        fails.append(
            f"{_fmt(100 * frac)} % of positions have k3 over {_fmt(limits.token_k3)} "
            f"(at most {_fmt(100 * limits.max_frac_over)} % allowed)"
        )
    if stats["max"] > limits.max_token_k3:
        fails.append(f"max per-token k3 {_fmt(stats['max'])} exceeds {_fmt(limits.max_token_k3)}")
    if fails:
        return Verdict.FAIL, tuple(fails)
    return Verdict.PASS, (
        f"mean_k3 {_fmt(mean)} < {limits.kl_div_key} {_fmt(limits.kl_div)}; max k3 {_fmt(stats['max'])}; "
        f"{_fmt(100 * frac)} % of positions over {_fmt(limits.token_k3)}",
    )


def compare(
    name: str,
    samples: Sequence[AlignedSample],
    limits: ThresholdSet,
    *,
    cache: CacheStats | None = None,
    notes: Sequence[str] = (),
    extra: dict[str, Any] | None = None,
) -> CheckOutput:
    """Build the check's result from aligned samples (a check that compared nothing is INCONCLUSIVE)."""
    samples = [s for s in samples if len(s.position)]
    if not samples:
        return CheckOutput(CheckResult.inconclusive(name, "no positions were compared", cache=cache))
    sample_ids = np.concatenate([np.full(len(s.position), s.sample, dtype=np.int32) for s in samples])
    record = PositionRecord(
        sample=sample_ids,
        position=np.concatenate([s.position for s in samples]).astype(np.int32),
        token_id=np.concatenate([s.token_id for s in samples]).astype(np.int32),
        lp_ref=np.concatenate([s.lp_ref for s in samples]).astype(np.float64),
        lp_test=np.concatenate([s.lp_test for s in samples]).astype(np.float64),
    )
    delta = record.delta
    k3 = metrics.k3(delta)
    thresholds = tuple(sorted({*STAT_THRESHOLDS, limits.token_k3}))
    stats = metrics.tail_stats(k3, thresholds=thresholds)
    stats["samples"] = len(samples)
    stats["mean_k3"] = metrics.sglang_mean_k3(k3, sample_ids)
    finite = np.isfinite(delta)
    stats["max_abs_delta"] = float(np.max(np.abs(delta[finite]))) if finite.any() else math.nan
    stats["mean_delta"] = float(np.mean(delta[finite])) if finite.any() else math.nan
    per_sample = np.bincount(np.unique(sample_ids, return_inverse=True)[1], weights=k3) / np.bincount(
        np.unique(sample_ids, return_inverse=True)[1]
    )
    stats["median_sample_mean_k3"] = float(np.median(per_sample))
    flips = _flips(samples)
    if flips is not None:
        stats["flips"] = int(flips.sum())
    verdict, reasons = judge_k3(stats, limits)
    return CheckOutput(
        CheckResult(
            name=name,
            verdict=verdict,
            reasons=(*reasons, *notes),
            stats=stats,
            cache=cache,
            worst=_worst(samples, k3, delta, flips),
            samples=_summaries(samples, k3, sample_ids, limits.onset_k3),
            extra={"thresholds": asdict(limits), **(extra or {})},
        ),
        record,
    )


def _flips(samples: Sequence[AlignedSample]) -> np.ndarray[Any, Any] | None:
    if any(s.top1_ref is None for s in samples):
        return None
    # The decode path emitted token_id greedily, so it was the test path's top-1: a flip is the replay
    # preferring another token there.
    return np.concatenate([np.asarray(s.top1_ref) != s.token_id for s in samples])


def _worst(
    samples: Sequence[AlignedSample], k3: np.ndarray[Any, Any], delta: np.ndarray[Any, Any], flips: Any
) -> tuple[WorstPosition, ...]:
    order = np.argsort(-np.nan_to_num(k3, nan=np.inf), kind="stable")[:WORST_POSITIONS]
    offsets = np.cumsum([0] + [len(s.position) for s in samples])
    out = []
    for idx in order:
        if not k3[idx] > 0 and math.isfinite(k3[idx]):
            break
        si = int(np.searchsorted(offsets, idx, side="right") - 1)
        s, j = samples[si], int(idx - offsets[si])
        text = s.token_text[j] if j < len(s.token_text) else None
        margin = None if s.margin_ref is None else float(s.margin_ref[j])
        before, after = token_context(s.token_text, j)
        out.append(
            WorstPosition(
                sample=s.sample,
                position=int(s.position[j]),
                token_id=int(s.token_id[j]),
                token_text="" if text is None else text,
                lp_ref=float(s.lp_ref[j]),
                lp_test=float(s.lp_test[j]),
                delta=float(delta[idx]),
                k3=float(k3[idx]),
                margin_ref=margin if margin is not None and math.isfinite(margin) else None,
                flip=None if flips is None else bool(flips[idx]),
                context_before=before,
                context_after=after,
            )
        )
    return tuple(out)


def _summaries(
    samples: Sequence[AlignedSample], k3: np.ndarray[Any, Any], sample_ids: np.ndarray[Any, Any], onset_k3: float
) -> tuple[SampleSummary, ...]:
    shapes = {sh.sample: sh for sh in sample_shapes(k3, sample_ids, onset_k3)}
    out = []
    for s in samples:
        sh = shapes[s.sample]
        out.append(
            SampleSummary(
                sample=s.sample,
                prompt_tokens=s.prompt_tokens,
                positions=sh.positions,
                mean_k3=sh.mean,
                max_k3=sh.max,
                onset=sh.onset,
                # "From the first token and staying there": the prefix state was already wrong.
                contiguous_from_first=sh.onset == 0 and sh.leading_run >= min(2, sh.positions),
                cached_tokens=s.cached_tokens,
            )
        )
    return tuple(out)


MATCH_STAT = {"cache_consistency": "mean_k3"}
"""The statistic compared with match's, where not the median per-sample mean: cache_consistency's samples
are restarts, most of which re-score positions that never left the cache, so a median hides a bug."""

NOCACHE_STAT = "nocache_mean_k3"
"""A cache check's own noise control, when it measured one: the same requests run again without a cache
(``cache_consistency``'s restarts after a flush), scored against the same reference, in the same run."""


def restart_noise_limits(limits: ThresholdSet, nocache_mean_k3: float | None) -> ThresholdSet:
    """``limits`` for a check with a no-cache control (``NOCACHE_STAT``): its mean rule reads ``kl_div`` or
    ``cache_vs_match_factor`` times the control's mean k3, whichever is larger.

    The control is the same requests run again without the cache, so its mean k3 is what restarting costs a
    correct engine on this run, and a cache bug must add to it. When that cost alone approaches ``kl_div`` (a
    bf16 hybrid model's restarts re-fold a recurrent chunk: measured 3.3e-3 on a clean vLLM server, with the
    cache path at the same 3.3e-3), SGLang's absolute threshold cannot tell the cache from the restart and
    would fail a correct cache; held to the control, the cache must be ``cache_vs_match_factor`` times noisier
    than restarting without it (the cache-vs-match rule's factor). The tail rules are unchanged."""
    if nocache_mean_k3 is None or not math.isfinite(nocache_mean_k3):
        return limits
    raised = limits.cache_vs_match_factor * nocache_mean_k3
    if not raised > limits.kl_div:
        return limits
    key = f"{_fmt(limits.cache_vs_match_factor)}x the same restarts without the cache ({_fmt(nocache_mean_k3)})"
    return replace(limits, kl_div=raised, kl_div_key=key)


def noise_reference(cache: CheckResult, match: CheckResult | None) -> tuple[float | None, str]:
    """The same run's noise a cache check is held to, and where it comes from (for the reason).

    ``match`` measures decode against a no-cache prefill; a check with a no-cache control measured the noise
    of its own requests without the cache. The larger is the noise a correct engine showed on this run: a
    control can be larger than ``match`` (a restart re-prefills a recurrent chunk that ``match``'s single
    generation never opens) and never hides a cache bug, since it never touches the cache.
    """
    stat = MATCH_STAT.get(cache.name, "median_sample_mean_k3")
    m = None if match is None or match.verdict is Verdict.INCONCLUSIVE else match.stats.get(stat)
    c = cache.stats.get(NOCACHE_STAT)
    found = [
        (float(v), label)
        for v, label in ((m, "match's"), (c, "the no-cache control's"))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ]
    if not found:
        return None, ""
    return max(found)


def judge_against_match(cache: CheckResult, match: CheckResult | None, limits: ThresholdSet) -> CheckResult:
    """A passing cache helper fails when the cache-hit path is clearly less exact than the no-cache path.

    Both helpers compare a decode with a no-cache replay, so on a correct engine they see the same noise;
    the median over samples (not the mean, which one token can carry) is compared. The noise is the larger
    of ``match``'s and the check's own no-cache control (``noise_reference``); below
    ``cache_vs_match_floor_k3`` both are noise.
    """
    stat = MATCH_STAT.get(cache.name, "median_sample_mean_k3")
    c = cache.stats.get(stat)
    noise, source = noise_reference(cache, match)
    if cache.verdict is not Verdict.PASS or c is None or noise is None:
        return cache
    limit = max(limits.cache_vs_match_factor * noise, limits.cache_vs_match_floor_k3)
    if not c > limit:
        return cache
    what = "mean k3" if stat == "mean_k3" else "median per-sample mean k3"
    reason = (
        f"{what} {_fmt(c)} is above {_fmt(limits.cache_vs_match_factor)}x {source} "
        f"{_fmt(noise)} (floor {_fmt(limits.cache_vs_match_floor_k3)}): the cache-hit path is less exact than "
        "the no-cache path"
    )
    return replace(cache, verdict=Verdict.FAIL, reasons=(reason, *cache.reasons[1:]))
