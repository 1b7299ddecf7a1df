"""``cache_consistency``: the same contexts, scored again after other cuts, batches and cache histories, must
give the same tokens and top-k logprobs (after SGLang's ``cache_consistency_jitter.py``, without its GPU
timing-jitter kernel, which belongs in the engine's own test process).

1. Each of ``prefixes`` corpus prompts is continued greedily for ``new_tokens`` (its baseline), with top-k.
2. Without a flush (so they reuse what the baselines left in the prefix cache, prefill- and decode-written),
   ``cuts`` requests per prefix restart from ``prefix + baseline[:cut]`` for random cuts and decode out to
   the baseline's length, shuffled, in mixed batches of one restart per prefix (the control's batches, below).
3. Every position scored by two or more requests is compared with the baseline's observation. Past a
   request's first token that differs from the baseline its context differs, so it is no longer recorded
   (the divergence itself is: its top-k is the signal).

Deterministic profile: everything bit-identical (upstream's rule; ties at rank k tolerated). Default
profile: the baseline's logprob of its token vs the re-scored one, judged as the other helpers (mean k3 <
``kl_div`` and the tail rules), and against the noise of the same run (``scoring.k3.judge_against_match``).
That noise is measured on the same restarts: under production numerics a restart from a cut is not the
baseline's computation even without a cache (a hybrid model folds the recurrent chunk the restart's prefill
left open in bf16; the baseline decoded those tokens one by one), and ``match`` cannot see that when its
generations never leave one chunk. So the default profile also runs every restart once more, after a flush
and one restart per prefix per call (no cache hit possible), and stores that control's mean k3 as
``nocache_mean_k3``: what restarting costs a correct engine. The cache path is sent in the same calls (without
the flushes): sent all at once against a control sent per prefix, it measured the batch on an engine whose
numerics depend on it (vLLM's CPU build in bf16, a sliding-window model: 6.6e-6 against a control of 3.0e-8).
An engine that batches requests as they arrive can still batch the two differently from run to run (the same
model then read 9.4e-7 against 9.4e-7, and 4.6e-6 against 1.9e-10), which one control run does not measure.
A constrained pool (SGLang ``--max-total-tokens``) adds evictions between.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from precisionbot import metrics
from precisionbot.checks.context import CheckContext
from precisionbot.engines.base import GenerateRequest, Generation
from precisionbot.fmt import plain as _fmt
from precisionbot.results import CheckOutput, CheckResult, Verdict
from precisionbot.scoring.k3 import AlignedSample, compare, restart_noise_limits

NAME = "cache_consistency"
SHOWN = 5


@dataclass(frozen=True)
class Obs:
    """One request's view of one position: the token it emitted and its top-k (id -> logprob)."""

    request: int
    token: int
    logprob: float
    top: dict[int, float]


def topk_equal(a: dict[int, float], b: dict[int, float]) -> bool:
    """Bitwise-equal top-k maps; an id in only one map must sit at the other's rank-k logprob (a tie)."""
    if len(a) != len(b) or any(a[t] != b[t] for t in a.keys() & b.keys()):
        return False
    return all(
        src[t] == min(other.values())
        for only, src, other in ((a.keys() - b.keys(), a, b), (b.keys() - a.keys(), b, a))
        for t in only
    )


def record(
    obs: dict[tuple[int, int], list[Obs]],
    request: int,
    prefix: int,
    start: int,
    gen: Generation,
    expected: Sequence[int] | None,
) -> None:
    """Add ``gen``'s positions (``start`` = its prompt length); stop after its first divergence from ``expected``."""
    top = gen.output_top
    for m, tok in enumerate(gen.output_ids):
        tmap = {} if top is None else {int(i): float(lp) for i, lp in zip(top.ids[m], top.logprobs[m], strict=True)}
        obs[(prefix, start + m)].append(Obs(request, int(tok), float(gen.output_logprobs[m]), tmap))
        if expected is not None and (m >= len(expected) or tok != expected[m]):
            break


def _request(prompt: Sequence[int], new: int, top_k: int) -> GenerateRequest:
    return GenerateRequest(tuple(prompt), max_new_tokens=new, temperature=0.0, ignore_eos=True, top_logprobs_num=top_k)


def cache_consistency_units(ctx: CheckContext) -> int:
    o = ctx.suite.cache_consistency
    return min(o.prefixes, ctx.suite.samples) * (1 + o.cuts)


def check_cache_consistency(ctx: CheckContext) -> CheckOutput:
    o = ctx.suite.cache_consistency
    new = o.new_tokens or ctx.suite.max_new_tokens
    if new < 2:
        return CheckOutput(CheckResult.inconclusive(NAME, "needs new_tokens >= 2 to restart from a cut"))
    prefixes = ctx.prompts()[: o.prefixes]
    rng = np.random.default_rng([ctx.suite.seed, 0xCAC4E])
    min_decode = max(1, new // 4)
    cuts = [[int(rng.integers(0, new - min_decode + 1)) for _ in range(o.cuts)] for _ in prefixes]
    ctx.progress.phase(f"{NAME}: baselines")
    ctx.engine.flush_cache()
    base = ctx.engine.generate([_request(p, new, o.top_k) for p in prefixes], progress=ctx.progress.advance)
    obs: dict[tuple[int, int], list[Obs]] = defaultdict(list)
    for j, (p, g) in enumerate(zip(prefixes, base, strict=True)):
        record(obs, -1 - j, j, len(p), g, None)
    plan = [(j, c) for j in range(len(prefixes)) for c in cuts[j]]
    plan = [plan[i] for i in rng.permutation(len(plan))]
    ctx.progress.phase(f"{NAME}: {len(plan)} restarts from cuts")
    reqs = [_request(tuple(prefixes[j]) + base[j].output_ids[:c], new - c, o.top_k) for j, c in plan]
    # In the control's rounds (one restart per prefix per call), without its flushes: the two then differ only by
    # the cache. Sent all at once, the restarts ran in batches the control never had, and an engine whose
    # numerics depend on the batch (vLLM's CPU build in bf16) read that as the cache's error.
    by_index: dict[int, Generation] = {}
    for members in _rounds(plan):
        gens = ctx.engine.generate([reqs[r] for r in members], progress=ctx.progress.advance)
        by_index.update(zip(members, gens, strict=True))
    restarts = [by_index[r] for r in range(len(reqs))]
    for r, ((j, c), g) in enumerate(zip(plan, restarts, strict=True)):
        record(obs, r, j, len(prefixes[j]) + c, g, base[j].output_ids[c:])
    hits = sum(g.cached_tokens > 0 for g in restarts)
    counts: dict[str, int] = {"restarts": len(restarts), "restarts_with_cache_hit": hits}
    control = None
    if ctx.profile != "deterministic":
        control = _nocache_control(ctx, prefixes, base, plan, reqs)
        counts["nocache_restarts_with_cache_hit"] = control[1]
    return _judge(ctx, obs, len(prefixes), new, counts, None if control is None else control[0])


def _nocache_control(
    ctx: CheckContext,
    prefixes: Sequence[tuple[int, ...]],
    base: Sequence[Generation],
    plan: Sequence[tuple[int, int]],
    reqs: Sequence[GenerateRequest],
) -> tuple[float | None, int]:
    """The same restarts without a cache: (their mean k3 against the baselines, how many still hit a cache).

    One restart per prefix per call, each call after a flush, so no restart can reuse another's prefix; one
    that reports a hit anyway is left out, so the control never carries a cache bug into the noise it sets.
    """
    ctx.progress.phase(f"{NAME}: {len(plan)} restarts without the cache (noise control)")
    obs: dict[tuple[int, int], list[Obs]] = defaultdict(list)
    for j, (p, g) in enumerate(zip(prefixes, base, strict=True)):
        record(obs, -1 - j, j, len(p), g, None)
    hits = 0
    for members in _rounds(plan):
        ctx.engine.flush_cache()
        gens = ctx.engine.generate([reqs[r] for r in members], progress=ctx.progress.advance)
        for r, g in zip(members, gens, strict=True):
            j, c = plan[r]
            if g.cached_tokens > 0:  # it touched a cache after all (prefixes sharing pages): not a control
                hits += 1
                continue
            record(obs, r, j, len(prefixes[j]) + c, g, base[j].output_ids[c:])
    rows = _pairs(obs)
    aligned = [a for a in (_aligned(r, x) for r, x in sorted(rows.items())) if len(a.position)]
    if not aligned:
        return None, hits
    k3 = [metrics.k3(a.lp_ref - a.lp_test) for a in aligned]
    sample_ids = np.concatenate([np.full(len(k), i) for i, k in enumerate(k3)])
    return float(metrics.sglang_mean_k3(np.concatenate(k3), sample_ids)), hits


def _rounds(plan: Sequence[tuple[int, int]]) -> list[list[int]]:
    """The plan's restarts (indices, in plan order) grouped so that each group holds at most one per prefix."""
    rounds: dict[int, list[int]] = defaultdict(list)
    seen: dict[int, int] = defaultdict(int)
    for r, (j, _) in enumerate(plan):
        rounds[seen[j]].append(r)
        seen[j] += 1
    return list(rounds.values())


def _pairs(obs: dict[tuple[int, int], list[Obs]]) -> dict[int, list[tuple[int, Obs, Obs]]]:
    """Per re-scoring request: (position, the baseline's observation, its own) where both scored it."""
    per_request: dict[int, list[tuple[int, Obs, Obs]]] = defaultdict(list)
    for (_, pos), group in sorted(obs.items()):
        for other in group[1:]:
            per_request[other.request].append((pos, group[0], other))
    return per_request


def _judge(
    ctx: CheckContext,
    obs: dict[tuple[int, int], list[Obs]],
    n_prefixes: int,
    new: int,
    counts: dict[str, int],
    nocache_mean_k3: float | None = None,
) -> CheckOutput:
    crossed = {k: g for k, g in obs.items() if len(g) >= 2}
    per_request: dict[int, list[tuple[int, Obs, Obs]]] = defaultdict(list)
    mismatches: list[str] = []
    for (prefix, pos), group in sorted(crossed.items()):
        ref = group[0]
        for other in group[1:]:
            per_request[other.request].append((pos, ref, other))
            if other.token != ref.token or not topk_equal(ref.top, other.top):
                shared = ref.top.keys() & other.top.keys()
                worst = max((abs(ref.top[t] - other.top[t]) for t in shared), default=0.0)
                mismatches.append(
                    f"prefix {prefix} position {pos}: token {ref.token} vs {other.token}, max |Δ logprob| {_fmt(worst)}"
                )
    aligned = [_aligned(r, rows) for r, rows in sorted(per_request.items())]
    out = compare(
        NAME,
        aligned,
        restart_noise_limits(ctx.thresholds, nocache_mean_k3),
        extra={
            "profile": ctx.profile,
            **counts,
            "positions_cross_checked": len(crossed),
            "observations": sum(len(g) for g in obs.values()),
            "mismatches": len(mismatches),
            "mismatch_examples": mismatches[:SHOWN],
        },
    )
    result = out.result
    if nocache_mean_k3 is not None and result.stats:
        result = replace(result, stats={**result.stats, "nocache_mean_k3": nocache_mean_k3})
    rescored = sum(len(g) - 1 for g in crossed.values())
    summary = f"{len(mismatches)} of {rescored} re-scored observations differ from the baseline's bits"
    if nocache_mean_k3 is not None:
        summary += f"; the same restarts without the cache: mean k3 {_fmt(nocache_mean_k3)}"
    if ctx.profile == "deterministic" and mismatches:
        reason = f"{summary} (bit-identical required): " + "; ".join(mismatches[:3])
        result = replace(result, verdict=Verdict.FAIL, reasons=(reason, *result.reasons))
    elif result.verdict is not Verdict.FAIL and len(crossed) < n_prefixes * new // 2:
        # Few overlaps and nothing wrong in them: the run says too little to pass (diverging requests stop
        # being recorded, so an early, blatant divergence fails above instead).
        return CheckOutput(
            CheckResult.inconclusive(
                NAME,
                f"only {len(crossed)} positions were scored twice (need {n_prefixes * new // 2}); "
                "raise cache_consistency.cuts or new_tokens",
            )
        )
    else:
        result = replace(result, reasons=(*result.reasons, summary))
    return replace(out, result=result)


def _aligned(request: int, rows: list[tuple[int, Obs, Obs]]) -> AlignedSample:
    """The baseline's logprob of its token vs the re-scoring's logprob of that same token."""

    def test_lp(ref: Obs, other: Obs) -> float:
        if other.token == ref.token:
            return other.logprob
        # A divergence: the baseline's token is in the other top-k, or at most its rank-k logprob.
        return other.top.get(ref.token, min(other.top.values(), default=float("-inf")))

    top1 = [max(ref.top, key=lambda t: ref.top[t]) if ref.top else ref.token for _, ref, _ in rows]

    def margin(ref: Obs) -> float:
        best = sorted(ref.top.values(), reverse=True)[:2]
        return best[0] - best[1] if len(best) == 2 else float("nan")

    return AlignedSample(
        sample=request,
        prompt_tokens=rows[0][0],
        position=np.array([pos for pos, _, _ in rows]),
        token_id=np.array([ref.token for _, ref, _ in rows], dtype=np.int32),
        lp_ref=np.array([ref.logprob for _, ref, _ in rows]),
        lp_test=np.array([test_lp(ref, other) for _, ref, other in rows]),
        top1_ref=np.array(top1),
        margin_ref=np.array([margin(ref) for _, ref, _ in rows]),
    )
