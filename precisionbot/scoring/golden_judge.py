"""Golden verdict and statistics, pure: a ``Comparison`` plus the producers' noise band → PASS / FAIL.

Rules (kern's, and docs/baselines.md): a *confident flip* (top-1 changed at a baseline margin above the band's
largest flip margin, or above ``confident_flip_margin`` with no band) fails; with a band, KL p50/p99 or a
margin bucket's flip rate above ``band_factor ×`` the band's fails; with no band (one producer) or a zero band
(a deterministic build) the fixed thresholds rule: the per-position KL's 99.9th percentile above ``logit_kl``
fails (more than 0.1 % of positions over it; ``logit_kl_stat: max`` is kern's ``--logit-kl``, any position), and
so does a sample whose
max |Δ| over shared top-k ids exceeds ``max_abs_delta`` when that is set (``test_logprobs.py``'s 1e-5 rule).
Always: a systematic drift of the corpus tokens' mean logprob beyond ``max_nll_increase`` (and 4 block
standard errors) fails, the perplexity-style signal that catches a small bias spread over every position.
Non-finite numbers are never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from precisionbot import metrics
from precisionbot.config import GoldenThresholds
from precisionbot.fmt import percent
from precisionbot.metrics.flips import NoiseBand, confident_flip_limit, confident_flips, expected_flips, flips_by_margin
from precisionbot.results import Verdict, WorstPosition, token_context
from precisionbot.scoring.golden_compare import Comparison, depth_label

NLL_Z = 4.0
"""Standard errors (block-estimated) a mean logprob drift must exceed before it can fail a run."""

BUCKET_SLACK_FLIPS = 2
"""Flips a margin bucket may have beyond ``band_factor × band rate × positions``: with a few hundred positions a
band rate of 0 is an estimate, not a promise, and one or two extra flips at small margins are what noise does."""


def kl_p999(kl: np.ndarray[Any, Any]) -> float:
    """The 99.9th percentile of per-position KL, rounded down to an observed value: it is at most ``limit``
    exactly when no more than 0.1 % of the positions (``floor(0.001 (n - 1))`` of them) exceed ``limit``, so one
    outlier in a thousand positions is noise and a bug that moves many positions is not."""
    return float(np.percentile(kl, 99.9, method="lower")) if kl.size else math.nan


def _kl_summary(c: Comparison, mask: np.ndarray[Any, Any]) -> dict[str, Any]:
    kl = c.kl[mask]
    if kl.size == 0:
        return {"positions": 0}
    finite = kl[np.isfinite(kl)]
    q = np.percentile(finite, [50, 99]) if finite.size else [math.nan, math.nan]
    return {
        "positions": int(kl.size),
        "kl_mean": float(np.mean(finite)) if finite.size else math.nan,
        "kl_p50": float(q[0]),
        "kl_p99": float(q[1]),
        "kl_p999": kl_p999(finite),
        "kl_max": float(np.max(finite)) if finite.size else math.nan,
        "flips": int(np.count_nonzero(c.flip[mask])),
    }


def golden_stats(
    c: Comparison, *, depth_edges: Sequence[int], kinds: Sequence[str], band: NoiseBand | None
) -> dict[str, Any]:
    """The stable stats (k3 tails of the scored token's Δ) plus golden's KL / flip keys and the splits."""
    k3 = metrics.k3(c.delta)
    stats: dict[str, Any] = metrics.tail_stats(k3)
    stats["samples"] = int(np.unique(c.sample).size)
    stats["mean_k3"] = metrics.sglang_mean_k3(k3, c.sample)
    whole = _kl_summary(c, np.ones(len(c), dtype=bool))
    stats.update({k: v for k, v in whole.items() if k.startswith("kl_")})
    stats["flips"] = whole["flips"]
    stats["flips_by_margin"] = flips_by_margin(c.margin, c.flip)
    stats["max_rank"] = int(np.max(c.rank))
    finite_max = c.shared_max[np.isfinite(c.shared_max)]
    stats["max_abs_delta"] = float(np.max(finite_max)) if finite_max.size else math.nan
    finite_mean = c.shared_mean[np.isfinite(c.shared_mean)]
    stats["mean_abs_delta"] = float(np.mean(finite_mean)) if finite_mean.size else math.nan
    stats["lp_errors"] = metrics.logprob_errors(c.lp_ref, c.lp_test)
    # Mean of lp_ref − lp_test over the scored corpus tokens: > 0 means the candidate is less sure of the text
    # (log of the perplexity ratio); its block standard error says whether that is more than noise.
    stats["nll_increase"], stats["nll_increase_se"] = metrics.mean_block_se(c.delta)
    stats["by_phase"] = {
        "prefill": _kl_summary(c, ~c.decode),
        "decode": _kl_summary(c, c.decode),
    }
    prefill_pos = np.where(c.decode, -1, c.position)
    edges = list(depth_edges)
    stats["by_depth"] = []
    for i, lo in enumerate(edges):
        hi = edges[i + 1] if i + 1 < len(edges) else None
        mask = (prefill_pos >= lo) & (prefill_pos < (hi if hi is not None else np.iinfo(np.int32).max))
        if np.any(mask):
            stats["by_depth"].append({"depth": depth_label(lo, hi), **_kl_summary(c, mask)})
    kind_of = np.asarray(kinds)[c.sample] if len(kinds) else np.asarray([""] * len(c))
    stats["by_kind"] = {k: _kl_summary(c, kind_of == k) for k in sorted(set(kinds))}
    stats["decode_divergence"] = [d.__dict__ for d in c.divergences]
    if band is not None and band.sigma_nats > 0:
        exp = expected_flips(c.margin, stats["flips"], band.sigma_nats)
        stats["expected_flips"] = exp.expected
        stats["flips_p_value"] = exp.p_at_least_observed
    stats["band"] = None if band is None else band.to_dict()
    return stats


def judge_golden(
    c: Comparison,
    stats: dict[str, Any],
    band: NoiseBand | None,
    t: GoldenThresholds,
    band_abs_delta_nats: float = 0.0,
) -> tuple[Verdict, list[str]]:
    """The verdict and one sentence per reason; sets ``stats["confident_flips"]``.

    ``band_abs_delta_nats`` is the largest |Δ logprob| the producers showed on any shared top-k id; a flip is
    confident above ``noise.confident_flip_limit`` (the band's largest flip margin or twice that |Δ|).
    """
    fails: list[str] = []
    use_band = band is not None and band.pairs > 0 and not band.is_zero
    limit = confident_flip_limit(band, t.confident_flip_margin, band_abs_delta_nats)
    confident = confident_flips(c.margin, c.flip, band, t.confident_flip_margin, band_abs_delta_nats)
    stats["confident_flips"] = int(np.count_nonzero(confident))
    stats["confident_flip_limit_nats"] = limit

    bad = ~np.isfinite(c.kl) | ~np.isfinite(c.lp_test)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        fails.append(f"{int(np.count_nonzero(bad))} positions have non-finite numbers (first: {row_name(c, i)})")
    if np.any(confident):
        i = int(np.flatnonzero(confident)[np.argmax(c.margin[confident])])
        origin = "the noise band's flip limit" if use_band else "the confident-flip margin"
        fails.append(
            f"{stats['confident_flips']} confident flip(s), baseline margin up to {c.margin[i]:.3g} nats > {origin} "
            f"{limit:.3g} nat{'s' if limit != 1 else ''}: the top-1 token changed where the baseline was sure "
            f"(the widest at {row_name(c, i)})"
        )
    i = int(np.argmax(np.nan_to_num(c.kl, nan=np.inf))) if len(c) else 0
    stats["kl_limit_nats"] = t.logit_kl
    over: list[int] = []
    if t.max_abs_delta is not None:
        over = np.unique(c.sample[np.nan_to_num(c.shared_max, nan=np.inf) > t.max_abs_delta]).tolist()
    fails.extend(
        stat_fails(
            stats,
            band,
            t,
            kl_over=int(np.count_nonzero(c.kl > t.logit_kl)),
            kl_where=f"at {row_name(c, i)}" if len(c) else "",
            samples_over=over,
        )
    )
    if fails:
        return Verdict.FAIL, fails
    what = "within the noise band" if use_band else "within the fixed thresholds (no noise band)"
    return Verdict.PASS, [
        f"{len(c)} positions {what}: KL p99 {stats['kl_p99']:.3g} nats, {stats['flips']} flips, none confident"
    ]


def stat_fails(
    stats: dict[str, Any],
    band: NoiseBand | None,
    t: GoldenThresholds,
    *,
    kl_over: int | None = None,
    kl_where: str = "",
    samples_over: Sequence[int] = (),
) -> list[str]:
    """The rules that read only ``stats`` and the band: one sentence per failed rule.

    ``judge_golden`` calls it with details from the arrays (``kl_over`` positions above ``logit_kl``, where the
    largest is, the samples over ``max_abs_delta``); the comment job calls it with the stats of a result.json
    alone (``precisionbot.report.verify``), so both judge by one copy of the rules.
    """
    fails: list[str] = []
    use_band = band is not None and band.pairs > 0 and not band.is_zero
    if use_band and band is not None:
        f = t.band_factor
        for key in ("kl_p50", "kl_p99"):
            if not stats[key] <= f * getattr(band, key):
                fails.append(f"KL {key[3:]} {stats[key]:.3g} is above {f:g}× the noise band's {getattr(band, key):.3g}")
        for bucket in stats["flips_by_margin"]:
            rate = band.flip_rate_by_bucket.get(bucket["bucket"], 0.0)
            allowed = f * rate * bucket["positions"] + BUCKET_SLACK_FLIPS
            if bucket["flips"] > allowed:
                fails.append(
                    f"{bucket['flips']} flips at margins {bucket['bucket']} nats ({percent(bucket['rate'])}) exceed "
                    f"{f:g}× the noise band's rate {percent(rate)} (+{BUCKET_SLACK_FLIPS} flips of slack)"
                )
    elif t.logit_kl_stat == "max" and not stats["kl_max"] <= t.logit_kl:
        fails.append(
            f"{'some' if kl_over is None else kl_over} position(s) have a KL above the per-position limit "
            f"{t.logit_kl:g} nats (no noise band; largest KL {stats['kl_max']:.3g}{' ' + kl_where if kl_where else ''})"
        )
    elif t.logit_kl_stat == "p999" and not stats["kl_p999"] <= t.logit_kl:
        over = "more than 0.1 % of the positions" if kl_over is None else f"{kl_over} positions"
        fails.append(
            f"KL p99.9 {stats['kl_p999']:.3g} is above the per-position limit {t.logit_kl:g} nats: {over} exceed it, "
            f"more than the 0.1 % that production noise may (no noise band; largest KL {stats['kl_max']:.3g}"
            f"{' ' + kl_where if kl_where else ''})"
        )
    nll, se = stats["nll_increase"], stats["nll_increase_se"]
    if t.max_nll_increase is not None and nll > t.max_nll_increase and nll > NLL_Z * se:
        fails.append(
            f"systematic drift {nll:.3g} ± {se:.2g} nats/token > {t.max_nll_increase:g} "
            f"({nll / se if se > 0 else math.inf:.1f} standard errors from 0): the candidate's logprob of the corpus "
            f"tokens is lower than the baseline's (perplexity +{percent(math.expm1(nll))})"
        )
    if t.max_abs_delta is not None and (samples_over or not stats["max_abs_delta"] <= t.max_abs_delta):
        listed = f"; golden rows {', '.join(map(str, samples_over[:5]))}" if samples_over else ""
        fails.append(
            f"{len(samples_over) or 'some'} golden row(s) have a max |Δ logprob| over shared top-k ids above "
            f"{t.max_abs_delta:g} (largest {stats['max_abs_delta']:.3g}{listed})"
        )
    return fails


def row_name(c: Comparison, i: int) -> str:
    """Where row ``i`` of the comparison is, in the words every output uses: ``golden row 7 (decode), position 256``.

    Golden's rows are its own (each corpus document teacher-forced, then its decode continuation), not the
    helpers' samples: "sample 7" in a 4-sample run reads as a sample that does not exist."""
    phase = "decode" if bool(c.decode[i]) else "prefill"
    return f"golden row {c.sample[i]} ({phase}), position {c.position[i]}"


def worst_positions(c: Comparison, count: int = 10, texts: Sequence[str] | None = None) -> tuple[WorstPosition, ...]:
    """The ``count`` rows with the largest KL (non-finite first)."""
    key = np.where(np.isfinite(c.kl), c.kl, np.inf)
    order = np.argsort(-key, kind="stable")[:count]
    k3 = metrics.k3(c.delta)
    # Context from the same sample only (rows are grouped by sample, in position order).
    starts = np.searchsorted(c.sample, c.sample, side="left") if len(c) else c.sample
    ends = np.searchsorted(c.sample, c.sample, side="right") if len(c) else c.sample
    context = [
        token_context(texts, int(i), int(starts[i]), int(ends[i])) if texts is not None else ("", "") for i in order
    ]
    return tuple(
        WorstPosition(
            sample=int(c.sample[i]),
            position=int(c.position[i]),
            token_id=int(c.token_id[i]),
            token_text="" if texts is None else texts[i],
            lp_ref=float(c.lp_ref[i]),
            lp_test=float(c.lp_test[i]),
            delta=float(c.delta[i]),
            k3=float(k3[i]),
            margin_ref=float(c.margin[i]),
            flip=bool(c.flip[i]),
            context_before=before,
            context_after=after,
        )
        for i, (before, after) in zip(order, context, strict=True)
    )
