"""Whether a suite's sizes fit the engine's context window, checked before anything runs (pure).

An engine answers a request longer than its context with an error per request, so a suite that cannot fit
would run every helper to INCONCLUSIVE and golden to an error after minutes of work and store nothing. The
longest sequence each part of a suite builds:

* the helpers: a prompt of up to ``prompt_tokens``' upper end plus ``max_new_tokens``; ``decode_cache_hit``
  (and a multi-turn suite) generates a second turn on top of the first turn's prompt, output and a suffix;
* golden: its deepest ``context_depths`` entry plus ``decode_steps``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from precisionbot.config import SuiteConfig
from precisionbot.results import CONSISTENCY_CHECKS

SEPARATOR_TOKENS = 2
"""What a single-turn ``decode_cache_hit`` puts between turn 1's output and turn 2 (``","``), at most."""


def context_length(raw: Mapping[str, Any]) -> tuple[int, str] | None:
    """The engine's context window in tokens per sequence and where it came from, from its server info:
    SGLang's ``context_length``, llama-server's per-slot ``n_ctx`` (``/props``), vLLM's ``max_model_len``."""
    settings = raw.get("default_generation_settings")
    candidates = (
        ("context_length", raw.get("context_length")),
        ("n_ctx per slot", settings.get("n_ctx") if isinstance(settings, Mapping) else None),
        ("n_ctx per slot", raw.get("n_ctx")),
        ("max_model_len", raw.get("max_model_len")),
    )
    for source, value in candidates:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, source
    return None


def helper_tokens(suite: SuiteConfig, helpers: tuple[str, ...]) -> tuple[int, str]:
    """The longest sequence the helpers build, and how it adds up."""
    hi, new = suite.prompt_tokens[1], suite.max_new_tokens
    multi = suite.turns > 1 or suite.branches > 1
    turns = max(suite.turns, 2 if "decode_cache_hit" in helpers else 1)
    gap = suite.suffix_tokens[1] if multi else SEPARATOR_TOKENS
    total = hi + turns * new + (turns - 1) * gap + (suite.suffix_tokens[1] if suite.branches > 1 else 0)
    how = f"prompts up to {hi:,} + {new:,} new tokens"
    if turns > 1:
        how = f"prompts up to {hi:,} + {turns} turns of {new:,} new tokens and the text between them"
    return total, how


def misfits(suite: SuiteConfig, checks: tuple[str, ...], context: int, source: str) -> list[str]:
    """One sentence per part of ``suite`` (restricted to ``checks``) that does not fit ``context`` tokens,
    naming both sizes and the flags that shrink it; empty when everything fits."""
    out = []
    helpers = tuple(c for c in checks if c in CONSISTENCY_CHECKS)
    where = f"the engine's context of {context:,} tokens ({source})"
    if helpers:
        need, how = helper_tokens(suite, helpers)
        if need > context:
            out.append(
                f"the helpers ({', '.join(helpers)}) need {need:,} tokens per sequence ({how}), more than {where}; "
                "pass smaller --prompt-tokens / --max-new-tokens"
            )
    if "golden" in checks:
        depth, steps = max(suite.golden.context_depths), suite.golden.decode_steps
        if depth + steps > context:
            fitting = [d for d in suite.golden.context_depths if d + steps <= context]
            fix = f"--golden-depths {','.join(map(str, fitting))}" if fitting else "smaller --golden-depths"
            out.append(
                f"golden needs {depth + steps:,} tokens (depth {depth:,} + {steps} decode steps), more than "
                f"{where}; pass {fix}"
            )
    return out
