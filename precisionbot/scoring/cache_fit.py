"""Sizes that let every single-turn cache helper hit the engine's prefix cache, and what was changed (pure).

``prefill_cache_hit`` and ``decode_cache_hit`` keep only the prompts that really hit the cache and are
INCONCLUSIVE when half or fewer do. Whether a prompt *can* hit is a matter of the engine's cache granularity
(``scoring.cache_rules``: a page, a vLLM block, a mamba chunk or checkpoint interval), not of the kernel: a
suite whose sizes sit below it measures nothing. So, before the helpers run, the sizes are rounded up by the
least that lets every prompt hit:

* ``prefill_cache_hit``: a warmed prompt serves whole steps strictly before its last token, so every prompt
  needs one step + 1 tokens (``prompt_tokens``' lower end is raised to that, the upper end to at least it);
* ``decode_cache_hit``: turn 2 reuses decoded tokens only when a boundary lies past ``prompt + 1`` and at or
  before turn 1's last computed token (``prompt + max_new_tokens - 1``), so ``max_new_tokens`` is raised to the
  largest count any of the suite's prompts needs (``cache_rules.decode_tokens_needed``).

Each change comes with one sentence naming both sizes and the granularity it crosses, for the PR comment and
``check``'s notes. The multi-turn shape is not rounded: it asserts SGLang's exact ``cached_tokens`` rules, which
already expect what the granularity allows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from precisionbot.scoring.cache_rules import CacheRules, decode_tokens_needed, granularity, prefill_tokens_needed

ADJUSTED_KEY = "sizes_adjusted"
"""result.json ``environment`` key: one sentence per size rounded up."""
KEPT_KEY = "sizes_kept"
"""result.json ``environment`` key: why sizes below the granularity were kept as given."""


@dataclass(frozen=True)
class SizeChange:
    """One rounded size: which, from what to what, and why in one sentence."""

    size: str
    """``prompt_tokens`` or ``max_new_tokens`` (the suite's key)."""
    before: str
    after: str
    note: str


def _range_text(r: tuple[int, int]) -> str:
    return str(r[0]) if r[0] == r[1] else f"{r[0]}..{r[1]}"


def fit_prompt_tokens(rules: CacheRules, prompt_tokens: tuple[int, int]) -> tuple[tuple[int, int], SizeChange | None]:
    """``prompt_tokens`` raised so every warmed prompt crosses one prefill step, and the change (None: none)."""
    lo, hi = prompt_tokens
    need = prefill_tokens_needed(rules)
    if lo >= need:
        return prompt_tokens, None
    fitted = (need, max(hi, need))
    before, after = _range_text(prompt_tokens), _range_text(fitted)
    note = (
        f"prompts {before} → {after} tokens to cross {granularity(rules, 'prefill')}, so that every warmed "
        "prompt can hit the cache in prefill_cache_hit"
    )
    return fitted, SizeChange("prompt_tokens", before, after, note)


def fit_new_tokens(rules: CacheRules, prompt_lens: Sequence[int], max_new_tokens: int) -> tuple[int, SizeChange | None]:
    """``max_new_tokens`` raised so every prompt's turn 1 reaches a boundary past it, and the change."""
    if not prompt_lens or rules.decode_reuse_blocked:
        return max_new_tokens, None  # no count of new tokens helps: decode_cache_hit says why
    need = max(decode_tokens_needed(rules, n) for n in prompt_lens)
    if max_new_tokens >= need:
        return max_new_tokens, None
    note = (
        f"new tokens {max_new_tokens} → {need} to reach {granularity(rules, 'decode')} past every prompt, so that "
        "decode_cache_hit's second turn can reuse decoded tokens"
    )
    return need, SizeChange("max_new_tokens", str(max_new_tokens), str(need), note)


def size_notes(environment: Mapping[str, object]) -> list[str]:
    """What a run's ``environment`` says was done to its sizes, one line each, for ``check``'s stderr."""
    adjusted = environment.get(ADJUSTED_KEY)
    out = [f"sizes rounded up: {n}" for n in adjusted if isinstance(n, str)] if isinstance(adjusted, list) else []
    kept = environment.get(KEPT_KEY)
    if isinstance(kept, str) and kept:
        out.append(kept)
    return out


def size_line(environment: Mapping[str, object]) -> str:
    """The same as one line for the report (empty when the sizes ran as given)."""
    adjusted = environment.get(ADJUSTED_KEY)
    notes = [n for n in adjusted if isinstance(n, str)] if isinstance(adjusted, list) else []
    kept = environment.get(KEPT_KEY)
    parts = [f"sizes rounded up to the engine's cache: {'; '.join(notes)}"] if notes else []
    return " · ".join([*parts, kept] if isinstance(kept, str) and kept else parts)
