"""The helpers' multi-turn, branching shape, with SGLang ``kl_multiturn_utils.py`` semantics.

A conversation is ``turns`` generations: each later turn sends the previous input + its output + a corpus
suffix, on the cache the previous turn left. ``branches`` conversations of a group share one prefix (sample
``i`` is group ``i // branches``, branch ``i % branches``); later turns may be submitted interleaved
across groups. After every turn the server's ``cached_tokens`` is checked with SGLang's rules for what
``/server_info`` reports (``scoring.cache_rules``); the last turn is replayed without cache and compared.
Every sample is compared (no cache-hit filter): a turn that missed the cache is a violated expectation,
which FAILS the check with a reason naming the sample, the turn, the expected and the actual count.

* ``match``: turn 1 on a flushed cache, then the later turns (not interleaved, as upstream).
* ``prefill_cache_hit``: warm each group's prefix (cut to a page multiple), turn 1 = prefix + branch suffix
  (``cached_tokens`` == prefix), then the later turns.
* ``decode_cache_hit``: turn 1 = the group's prompt for every branch, then at least one later turn.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from precisionbot.checks.consistency import align, cache_blocked, decode_request, estimator_notes, replay
from precisionbot.checks.context import CheckContext
from precisionbot.engines.base import GenerateRequest, Generation
from precisionbot.results import CacheStats, CheckOutput, Verdict
from precisionbot.scoring.cache_rules import CacheRules, interleave_order, rules_for
from precisionbot.scoring.k3 import compare

MAX_SHOWN = 20
"""Violations kept in the result (the first few are also the reason)."""

FirstCheck = Callable[[int, Generation], str | None]


@dataclass(frozen=True)
class Conversation:
    """The last turn of every sample, and every violated ``cached_tokens`` expectation on the way."""

    inputs: list[tuple[int, ...]]
    gens: list[Generation]
    violations: list[tuple[int, int, str]]
    """(sample, 1-based turn, what was expected and what came)."""


def submit(ctx: CheckContext, requests: Sequence[GenerateRequest], order: Sequence[int] | None) -> list[Generation]:
    """Send in ``order`` (None = as given), in batches of ``request_batch_size``; answers in request order."""
    idx = list(range(len(requests))) if order is None else list(order)
    size = ctx.suite.request_batch_size or max(1, len(idx))
    out: dict[int, Generation] = {}
    for start in range(0, len(idx), size):
        chunk = idx[start : start + size]
        for i, g in zip(chunk, ctx.engine.generate([requests[i] for i in chunk], ctx.progress.advance), strict=True):
            out[i] = g
        if start + size < len(idx) and ctx.suite.request_delay_s > 0:
            time.sleep(ctx.suite.request_delay_s)
    return [out[i] for i in range(len(requests))]


def converse(
    ctx: CheckContext,
    first: Sequence[tuple[int, ...]],
    suffixes: Sequence[Sequence[tuple[int, ...]]],
    rules: CacheRules | None,
    *,
    first_check: FirstCheck | None = None,
    later_order: Sequence[int] | None = None,
) -> Conversation:
    """Turn 1 on ``first``, then one turn per entry of ``suffixes`` (``suffixes[t][i]`` for sample ``i``)."""
    n, new = len(first), ctx.suite.max_new_tokens
    inputs = [tuple(p) for p in first]
    gens = submit(ctx, [decode_request(ctx, p, new, 0, i) for i, p in enumerate(inputs)], None)
    violations: list[tuple[int, int, str]] = []
    if first_check is not None:
        violations += [(i, 1, v) for i, g in enumerate(gens) if (v := first_check(i, g)) is not None]
    for t, sfx in enumerate(suffixes, start=1):
        history = [(len(inputs[i]), len(gens[i].output_ids)) for i in range(n)]
        inputs = [inputs[i] + gens[i].output_ids + tuple(sfx[i]) for i in range(n)]
        gens = submit(ctx, [decode_request(ctx, p, new, t, i) for i, p in enumerate(inputs)], later_order)
        if rules is not None:
            violations += [
                (i, t + 1, v)
                for i, g in enumerate(gens)
                if (v := rules.decode(g.cached_tokens, *history[i])) is not None
            ]
    return Conversation(inputs, gens, violations)


def _finish(ctx: CheckContext, name: str, conv: Conversation, rules: CacheRules | None) -> CheckOutput:
    """Replay the last turn without cache, compare, and fail on any violated expectation."""
    ctx.progress.phase(f"{name}: replay")
    sequences = [p + g.output_ids for p, g in zip(conv.inputs, conv.gens, strict=True)]
    replays = replay(ctx, sequences, [len(p) for p in conv.inputs])
    greedy = ctx.suite.temperature <= 0
    aligned = [
        align(i, p, g, r, greedy) for i, (p, g, r) in enumerate(zip(conv.inputs, conv.gens, replays, strict=True))
    ]
    bad = sorted({s for s, _, _ in conv.violations})
    shown = [f"sample {s} turn {t}: {what}" for s, t, what in conv.violations[:MAX_SHOWN]]
    n = len(conv.inputs)
    out = compare(
        name,
        aligned,
        ctx.thresholds.for_check(name),
        cache=CacheStats(kept=n - len(bad), total=n) if rules is not None else None,
        notes=estimator_notes(ctx),
        extra={
            "profile": ctx.profile,
            "conversation": {
                "turns": _turns(ctx, name),
                "branches": ctx.suite.branches,
                "groups": ctx.suite.groups,
                "cache_rules": None if rules is None else rules.describe(),
                "cache_violations": shown,
            },
        },
    )
    if not conv.violations:
        return out
    reason = (
        f"{len(conv.violations)} cached_tokens expectation(s) violated in {len(bad)} of {n} samples "
        f"({rules.describe() if rules else 'SGLang rules'}): " + "; ".join(shown[:3])
    )
    rest = out.result.reasons
    if out.result.verdict is Verdict.PASS:  # the numbers alone would pass: say so, not as a failure reason
        rest = (f"the logprobs alone are within the thresholds ({rest[0]})", *rest[1:])
    result = dataclasses.replace(out.result, verdict=Verdict.FAIL, reasons=(reason, *rest))
    return dataclasses.replace(out, result=result)


def _turns(ctx: CheckContext, name: str) -> int:
    return max(ctx.suite.turns, 2) if name == "decode_cache_hit" else ctx.suite.turns


def _rules(ctx: CheckContext) -> CacheRules:
    return rules_for(ctx.engine.server_info().raw, ctx.suite.mamba_checkpoint_lag)


def _group_prompts(ctx: CheckContext) -> list[tuple[int, ...]]:
    return ctx.prompts()[: ctx.suite.groups]


def distinct_heads(runs: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Drop leading tokens until every run starts with a token no earlier run starts with.

    Conversations that share a history (branches) must not share the start of their next suffix either:
    the radix cache would rightly serve that shared start and the exact ``cached_tokens`` rule, which
    upstream keeps with random-token suffixes, would fail.
    """
    used: set[int] = set()
    out = []
    for run in runs:
        k = next((k for k in range(len(run) - 1) if run[k] not in used), 0)
        used.add(run[k])
        out.append(run[k:])
    return out


def _later_suffixes(ctx: CheckContext, name: str) -> list[list[tuple[int, ...]]]:
    n = ctx.suite.samples
    return [
        distinct_heads(ctx.token_runs(n, ctx.suite.suffix_tokens, stream=1 + t)) for t in range(1, _turns(ctx, name))
    ]


def _branched(ctx: CheckContext, page: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Each sample's shared prefix (its group's prompt cut to a page multiple) and prefix + branch suffix."""
    branch_suffix = distinct_heads(ctx.token_runs(ctx.suite.samples, ctx.suite.suffix_tokens, stream=1))
    prefixes, fulls = [], []
    for i in range(ctx.suite.samples):
        p = _group_prompts(ctx)[i // ctx.suite.branches]
        cut = max(page, len(p) // page * page) if len(p) >= page else len(p)
        prefixes.append(p[:cut])
        fulls.append(p[:cut] + branch_suffix[i])
    return prefixes, fulls


def _order(ctx: CheckContext) -> list[int] | None:
    return interleave_order(ctx.suite.samples, ctx.suite.branches) if ctx.suite.interleave else None


def check_match_multiturn(ctx: CheckContext) -> CheckOutput:
    """Helper 1: turns on a flushed cache; later turns' cached_tokens checked when a cache is there."""
    name = "match"
    usable = cache_blocked(ctx, name) is None
    rules = _rules(ctx) if usable and ctx.suite.cache_asserts else None
    first = _branched(ctx, rules.page_size if rules else 1)[1] if ctx.suite.branches > 1 else _group_prompts(ctx)
    ctx.progress.phase(f"{name}: {_turns(ctx, name)} turns")
    ctx.engine.flush_cache()
    return _finish(ctx, name, converse(ctx, first, _later_suffixes(ctx, name), rules), rules)


def check_prefill_cache_hit_multiturn(ctx: CheckContext) -> CheckOutput:
    """Helper 2: warm the prefixes, turn 1 hits them exactly, later turns hit the decoded history."""
    name = "prefill_cache_hit"
    blocked = cache_blocked(ctx, name)
    if blocked is not None:
        return blocked
    rules = _rules(ctx)
    prefixes, fulls = _branched(ctx, rules.page_size)
    ctx.progress.phase(f"{name}: warm + {_turns(ctx, name)} turns")
    ctx.engine.flush_cache()
    warm = [decode_request(ctx, p, 0, 0, i) for i, p in enumerate(prefixes)]
    ctx.engine.generate(warm, progress=ctx.progress.advance)
    asserting = ctx.suite.cache_asserts
    conv = converse(
        ctx,
        fulls,
        _later_suffixes(ctx, name),
        rules if asserting else None,
        first_check=(lambda i, g: rules.prefill(g.cached_tokens, len(prefixes[i]))) if asserting else None,
        later_order=_order(ctx),
    )
    return _finish(ctx, name, conv, rules if asserting else None)


def check_decode_cache_hit_multiturn(ctx: CheckContext) -> CheckOutput:
    """Helper 3: the group's prompt for every branch, then later turns on the cache decode filled."""
    name = "decode_cache_hit"
    blocked = cache_blocked(ctx, name)
    if blocked is not None:
        return blocked
    rules = _rules(ctx) if ctx.suite.cache_asserts else None
    groups = _group_prompts(ctx)
    first = [groups[i // ctx.suite.branches] for i in range(ctx.suite.samples)]
    ctx.progress.phase(f"{name}: {_turns(ctx, name)} turns")
    ctx.engine.flush_cache()
    conv = converse(ctx, first, _later_suffixes(ctx, name), rules, later_order=_order(ctx))
    return _finish(ctx, name, conv, rules)


def planned_units(name: str) -> Callable[[CheckContext], int]:
    """Progress units: one per sample per generated turn and replay (and warm-up)."""

    def units(ctx: CheckContext) -> int:
        warm = 1 if name == "prefill_cache_hit" else 0
        return ctx.suite.samples * (_turns(ctx, name) + 1 + warm)

    return units
