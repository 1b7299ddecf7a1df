"""The suite's sizes rounded up to the engine's cache granularity before the cache helpers run.

The rounding itself is pure (``scoring.cache_fit``); this module reads what it needs from the engine: the
cache rules from ``/server_info`` (``scoring.cache_rules.rules_for``), the lengths of the prompts the suite
draws (tokenised once; the checks reuse them) and the engine's context, which a rounded suite must still fit
(else the user's sizes are kept, and the reason says what rounding would have needed).

Nothing is rounded when the suite keeps its sizes (``exact_sizes``), runs the multi-turn shape (exact
``cached_tokens`` assertions, no hit filter), runs no cache helper, or when the engine cannot serve a hit at all
(a client without a cache, a disabled radix cache: those helpers are INCONCLUSIVE saying so).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from precisionbot.checks.consistency import cache_blocked
from precisionbot.checks.context import CheckContext
from precisionbot.checks.fit import context_length, misfits
from precisionbot.errors import EngineError
from precisionbot.scoring.cache_fit import ADJUSTED_KEY, KEPT_KEY, SizeChange, fit_new_tokens, fit_prompt_tokens
from precisionbot.scoring.cache_rules import rules_for


@dataclass(frozen=True)
class SizesFit:
    """What the rounding did: the changes made, or why none was made although one was needed."""

    changes: tuple[SizeChange, ...] = ()
    kept: str | None = None

    def environment(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.changes:
            out[ADJUSTED_KEY] = [c.note for c in self.changes]
        if self.kept:
            out[KEPT_KEY] = self.kept
        return out


def fit_cache_sizes(ctx: CheckContext, names: Sequence[str]) -> SizesFit:
    """Round ``ctx.suite``'s sizes up so every cache helper among ``names`` can hit (``ctx.suite`` and its
    prompts are replaced in place), and say what was done."""
    suite = ctx.suite
    fit_prefill, fit_decode = "prefill_cache_hit" in names, "decode_cache_hit" in names
    if suite.exact_sizes or suite.multi_turn or not (fit_prefill or fit_decode):
        return SizesFit()
    try:
        if cache_blocked(ctx, "prefill_cache_hit") is not None:
            return SizesFit()
        raw = ctx.engine.server_info().raw
    except EngineError:
        return SizesFit()  # the helpers meet the same error and say so
    rules = rules_for(raw, suite.mamba_checkpoint_lag)
    changes: list[SizeChange] = []
    fitted = suite
    if fit_prefill:
        prompt_tokens, change = fit_prompt_tokens(rules, suite.prompt_tokens)
        if change is not None:
            changes.append(change)
            fitted = dataclasses.replace(fitted, prompt_tokens=prompt_tokens)
            ctx.use_suite(fitted)
    if fit_decode:
        try:
            lens = [len(p) for p in ctx.prompts()]
        except EngineError:
            lens = []
        new, change = fit_new_tokens(rules, lens, suite.max_new_tokens)
        if change is not None:
            changes.append(change)
            fitted = dataclasses.replace(fitted, max_new_tokens=new)
    if not changes:
        return SizesFit()
    found = context_length(raw)
    problems = misfits(fitted, tuple(names), *found) if found is not None else []
    if problems:
        ctx.use_suite(suite)
        wanted = "; ".join(f"{c.size} {c.before} → {c.after}" for c in changes)
        return SizesFit(
            kept=f"sizes kept as given: rounding them up to the cache's granularity ({wanted}) would not fit: "
            + "; ".join(problems)
        )
    ctx.use_suite(fitted)
    return SizesFit(changes=tuple(changes))
