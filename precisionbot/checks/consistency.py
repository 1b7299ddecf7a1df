"""The three consistency helpers, with SGLang ``kl_test_utils.py`` semantics, plus tails.

This module is their single-turn shape (``turns: 1``, ``branches: 1``); ``checks.multiturn`` runs the
multi-turn, branching shape of ``kl_multiturn_utils.py`` on the same generation and replay code.

Each compares a decode (the path under test) with a no-cache replay of the same tokens as a pure prefill
(the reference). The suite's temperature (0 by default) is sent explicitly with ``ignore_eos``;
``/flush_cache`` is called before generating and before each replay, as upstream does; the replay's last
``N`` input logprobs align with the ``N`` decoded tokens. Cache helpers keep only prompts that really hit
the cache and need more than half of them to, else they are INCONCLUSIVE ("too few cache hits": upstream
fails with an assert there; an empty comparison must never read as a pass, and a missing cache is not
evidence against the kernel), and they are INCONCLUSIVE when the server reports its radix cache disabled
(upstream prints a line and returns, i.e. passes).

Beyond upstream, the replay asks for the top-2 logprobs (which does not change the logprobs) so each
position knows the replay's top-1 (flips) and its top-2 gap (noise or bug), and for token text so the worst
positions can be shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from precisionbot.checks.context import CheckContext
from precisionbot.engines.base import GenerateRequest, Generation
from precisionbot.errors import EngineError
from precisionbot.results import CacheStats, CheckOutput, CheckResult, SampleTokens
from precisionbot.scoring.cache_rules import CacheRules, explain_decode_miss, explain_prefill_miss, rules_for
from precisionbot.scoring.k3 import AlignedSample, compare, enough_cache_hits

REPLAY_TOP_K = 2


def sampling_seed(ctx: CheckContext, turn: int, sample: int) -> int | None:
    """Each (turn, sample) its own seed when sampling (identical prompts of branches must still diverge)."""
    base = ctx.suite.sampling_seed
    if ctx.suite.temperature <= 0 or base is None:
        return None
    return (base * 1_000_003 + turn * 10_007 + sample) % 2**31


def decode_request(
    ctx: CheckContext, prompt: Sequence[int], max_new_tokens: int, turn: int, sample: int
) -> GenerateRequest:
    return GenerateRequest(
        tuple(prompt),
        max_new_tokens=max_new_tokens,
        temperature=ctx.suite.temperature,
        ignore_eos=True,
        logprob_start_len=-1,
        sampling_seed=sampling_seed(ctx, turn, sample) if max_new_tokens else None,
    )


def _generate(
    ctx: CheckContext, prompts: Sequence[tuple[int, ...]], max_new_tokens: int, turn: int = 0
) -> list[Generation]:
    requests = [decode_request(ctx, p, max_new_tokens, turn, i) for i, p in enumerate(prompts)]
    return ctx.engine.generate(requests, progress=ctx.progress.advance)


def _per_position(ctx: CheckContext) -> bool:
    """Engines without prompt logprobs (llama.cpp) score each replayed position with its own request."""
    return ctx.engine.replay_per_position


def replay(
    ctx: CheckContext, sequences: Sequence[tuple[int, ...]], prompt_lens: Sequence[int] | None = None
) -> list[Generation]:
    """Pure prefills (``max_new_tokens=0``) with logprobs from position 0, after a flush (no cache).

    At the suite's temperature, as upstream; ``replay_batch_size`` replays in batches, each after a flush.
    Given ``prompt_lens``, an engine that scores every position with its own request (llama.cpp) starts at
    the last prompt token: only the decoded positions are compared.
    """
    per_position = _per_position(ctx) and prompt_lens is not None
    lens = prompt_lens or [0] * len(sequences)
    starts = [n - 1 if per_position else 0 for n in lens]
    requests = [
        GenerateRequest(
            seq,
            max_new_tokens=0,
            temperature=ctx.suite.temperature,
            ignore_eos=True,
            logprob_start_len=start,
            top_logprobs_num=REPLAY_TOP_K,
            return_text=True,
            read_from=n,  # only the decoded positions are compared: the prompt's are scored, not read
        )
        for seq, start, n in zip(sequences, starts, lens, strict=True)
    ]
    size = ctx.suite.replay_batch_size or max(1, len(requests))
    out: list[Generation] = []
    for first in range(0, len(requests), size):
        ctx.engine.flush_cache()
        out.extend(ctx.engine.generate(requests[first : first + size], progress=ctx.progress.advance))
    return out


def estimator_notes(ctx: CheckContext) -> tuple[str, ...]:
    """What the numbers estimate, when not greedy (the report shows it)."""
    t = ctx.suite.temperature
    if t <= 0:
        return ()
    return (
        f"sampled decode at temperature {t:g}: tokens are drawn from the decode distribution, so mean k3 is an "
        "unbiased estimate of KL(decode || replay) (greedy runs measure k3 at the argmax token)",
    )


def align(
    sample: int, prompt: Sequence[int], test: Generation, replay: Generation, greedy: bool = True
) -> AlignedSample:
    """Decode logprob ``k`` ↔ the replay's input logprob at ``len(prompt) + k`` (its last ``N`` entries).

    Flips (the replay's top-1 differing from the token) only mean something for a greedy decode.
    """
    n = len(test.output_ids)
    # From position 0 (len(prompt) + n entries) or, replayed per position, from the last prompt token (n + 1).
    if len(replay.input_logprobs) not in (len(prompt) + n, n + 1):
        raise EngineError(
            f"replay of sample {sample}: {len(replay.input_logprobs)} input logprobs for {len(prompt)} + {n} tokens"
        )
    skip = len(replay.input_logprobs) - n
    lp_ref = replay.input_logprobs[skip:]
    top1 = margin = None
    if replay.input_top is not None and greedy:
        ids, lps = replay.input_top.ids[skip:], replay.input_top.logprobs[skip:]
        top1 = ids[:, 0]
        margin = lps[:, 0] - lps[:, 1] if lps.shape[1] > 1 else None
    return AlignedSample(
        sample=sample,
        prompt_tokens=len(prompt),
        position=np.arange(len(prompt), len(prompt) + n),
        token_id=np.asarray(test.output_ids, dtype=np.int32),
        lp_ref=lp_ref,
        lp_test=test.output_logprobs,
        token_text=tuple(replay.input_token_text[skip:]),
        top1_ref=top1,
        margin_ref=margin,
        cached_tokens=test.cached_tokens,
    )


def _compare_replayed(
    ctx: CheckContext,
    name: str,
    indices: Sequence[int],
    prompts: Sequence[tuple[int, ...]],
    tests: Sequence[Generation],
    cache: CacheStats | None,
    turn1: Sequence[tuple[int, int]] = (),
) -> CheckOutput:
    """The replay and the comparison. ``turn1``: per prompt, the turn-1 prompt length and tokens decoded
    (``decode_cache_hit``), which the samples' tokens record for localization."""
    ctx.progress.phase(f"{name}: replay")
    sequences = [tuple(p) + t.output_ids for p, t in zip(prompts, tests, strict=True)]
    replays = replay(ctx, sequences, [len(p) for p in prompts])
    greedy = ctx.suite.temperature <= 0
    aligned = [align(i, p, t, r, greedy) for i, p, t, r in zip(indices, prompts, tests, replays, strict=True)]
    extra: dict[str, object] = {"profile": ctx.profile}
    if _per_position(ctx):
        extra["replay"] = "per-position: one no-cache request per compared position (no prompt logprobs)"
    out = compare(name, aligned, ctx.thresholds.for_check(name), cache=cache, notes=estimator_notes(ctx), extra=extra)
    setups = list(turn1) or [(0, 0)] * len(prompts)
    samples = {
        i: SampleTokens(seq, len(p), *setup)
        for i, seq, p, setup in zip(indices, sequences, prompts, setups, strict=True)
    }
    return dataclasses.replace(out, samples=samples)


def check_match(ctx: CheckContext) -> CheckOutput:
    """No cache: greedy decode vs the replay of prompt + output."""
    prompts = ctx.prompts()
    ctx.progress.phase("match: generate")
    ctx.engine.flush_cache()
    gens = _generate(ctx, prompts, ctx.suite.max_new_tokens)
    return _compare_replayed(ctx, "match", range(len(prompts)), prompts, gens, None)


def cache_blocked(ctx: CheckContext, name: str) -> CheckOutput | None:
    reason = ctx.engine.cache_unsupported_reason()
    if reason is None and ctx.engine.server_info().disable_radix_cache:
        reason = "the server reports its radix cache disabled (disable_radix_cache=true), so no prefix can hit it"
    return None if reason is None else CheckOutput(CheckResult.inconclusive(name, reason))


def _too_few(
    name: str, kept: int, total: int, rule: str, why: Callable[[], str | None] = lambda: None
) -> CheckOutput | None:
    """INCONCLUSIVE when half or fewer prompts hit; ``why`` gives the cause the server's configuration shows."""
    if enough_cache_hits(kept, total):
        return None
    cause = why() or "is the prefix cache enabled and large enough?"
    return CheckOutput(
        CheckResult.inconclusive(
            name,
            f"too few cache hits: {kept} of {total} prompts {rule} (more than half needed); {cause}",
            cache=CacheStats(kept=kept, total=total),
        )
    )


def _rules(ctx: CheckContext) -> CacheRules | None:
    """The server's cache rules from ``/server_info`` (``scoring.cache_rules``), to explain a miss."""
    try:
        return rules_for(ctx.engine.server_info().raw, ctx.suite.mamba_checkpoint_lag)
    except EngineError:
        return None


def check_prefill_cache_hit(ctx: CheckContext) -> CheckOutput:
    """Warm the cache with the prompts, generate (the prefill hits it), replay the hits without cache."""
    name = "prefill_cache_hit"
    blocked = cache_blocked(ctx, name)
    if blocked is not None:
        return blocked
    prompts = ctx.prompts()
    ctx.progress.phase(f"{name}: warm + generate")
    ctx.engine.flush_cache()
    _generate(ctx, prompts, 0)  # warm-up; no flush between it and the generation
    gens = _generate(ctx, prompts, ctx.suite.max_new_tokens)
    keep = [i for i, g in enumerate(gens) if g.cached_tokens > 0]
    lens = [len(p) for p in prompts]

    def why() -> str | None:
        rules = _rules(ctx)
        return None if rules is None else explain_prefill_miss(rules, lens)

    too_few = _too_few(name, len(keep), len(prompts), "reported cached_tokens > 0", why)
    if too_few is not None:
        return too_few
    cache = CacheStats(kept=len(keep), total=len(prompts))
    return _compare_replayed(ctx, name, keep, [prompts[i] for i in keep], [gens[i] for i in keep], cache)


def check_decode_cache_hit(ctx: CheckContext) -> CheckOutput:
    """Turn 2 = turn-1 prompt + its output + ``","``, generated on the warm cache that turn 1's decode filled."""
    name = "decode_cache_hit"
    blocked = cache_blocked(ctx, name)
    if blocked is not None:
        return blocked
    rules = _rules(ctx)
    if rules is not None and rules.decode_reuse_blocked:
        # Known before any request: this server cannot serve the helper as started (the reason names the flag).
        return CheckOutput(
            CheckResult.inconclusive(name, f"not applicable on this server: {rules.decode_reuse_blocked}")
        )
    prompts = ctx.prompts()
    sep = ctx.separator_ids()
    ctx.progress.phase(f"{name}: turns 1 + 2")
    ctx.engine.flush_cache()
    turn1 = _generate(ctx, prompts, ctx.suite.max_new_tokens)
    turn2_prompts = [tuple(p) + g.output_ids + sep for p, g in zip(prompts, turn1, strict=True)]
    turn2 = _generate(ctx, turn2_prompts, ctx.suite.max_new_tokens, turn=1)
    # Only a hit that reaches past the turn-1 prompt reuses state written during decode.
    keep = [i for i, g in enumerate(turn2) if g.cached_tokens > len(prompts[i]) + 1]
    lens = [len(p) for p in prompts]

    def why() -> str | None:
        rules = _rules(ctx)
        return None if rules is None else explain_decode_miss(rules, lens, ctx.suite.max_new_tokens)

    rule = "reused decoded tokens (cached_tokens > turn-1 prompt + 1)"
    too_few = _too_few(name, len(keep), len(prompts), rule, why)
    if too_few is not None:
        return too_few
    cache = CacheStats(kept=len(keep), total=len(prompts))
    turn1_sizes = [(len(prompts[i]), len(turn1[i].output_ids)) for i in keep]
    return _compare_replayed(
        ctx, name, keep, [turn2_prompts[i] for i in keep], [turn2[i] for i in keep], cache, turn1_sizes
    )
