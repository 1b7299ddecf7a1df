"""The sizes rounded up to the engine's cache granularity (pure), checked against a brute-force search over the
cache rules' own reach, and the miss explanations whose numbers must agree with each other (issue 35)."""

from __future__ import annotations

import re

import pytest

from precisionbot.scoring.cache_fit import fit_new_tokens, fit_prompt_tokens, size_line, size_notes
from precisionbot.scoring.cache_rules import (
    CacheRules,
    decode_reach,
    explain_decode_miss,
    explain_prefill_miss,
    prefill_reach,
    rules_for,
)

SGLANG_RADIX = rules_for({"page_size": 16})
SGLANG_MAMBA = rules_for({"page_size": 1, "uses_mamba_radix_cache": True, "mamba_track_interval": 256})
BUILTIN = rules_for({"page_size": 16, "mamba_ssm_dtype": "float32", "mamba_track_interval": 64})
LLAMACPP = rules_for({"total_slots": 1, "n_ctx": 4096})
# vLLM 0.32 serving a tiny Qwen3-Next with align-mode prefix caching (issue 35): the hybrid block is 256 tokens.
VLLM_HYBRID = rules_for(
    {"prefix_cache_rules": "vllm", "block_size": 256, "page_size": 256, "mamba_cache_mode": "align"}
)
VLLM_LLAMA = rules_for({"prefix_cache_rules": "vllm", "block_size": 16, "page_size": 16})
ALL = {"sglang-radix": SGLANG_RADIX, "sglang-mamba": SGLANG_MAMBA, "builtin": BUILTIN, "llamacpp": LLAMACPP}
ALL |= {"vllm-hybrid": VLLM_HYBRID, "vllm-llama": VLLM_LLAMA}


def _fewest_new_tokens(rules: CacheRules, prompt: int) -> int:
    """Independent of decode_tokens_needed: the first count at which decode_cache_hit's filter would keep it."""
    return next(n for n in range(1, 10_000) if decode_reach(rules, prompt, n) > prompt + 1)


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("prompt_tokens", [(8, 40), (60, 60), (200, 300), (256, 256), (1536, 4608)])
def test_the_rounded_prompts_all_hit_and_one_less_would_not(name: str, prompt_tokens: tuple[int, int]) -> None:
    rules = ALL[name]
    fitted, change = fit_prompt_tokens(rules, prompt_tokens)
    assert all(prefill_reach(rules, n) > 0 for n in range(fitted[0], fitted[1] + 1))
    assert fitted[1] >= prompt_tokens[1] and fitted[0] >= prompt_tokens[0]
    if change is None:
        assert fitted == prompt_tokens
    else:  # the least rounding: a prompt one token shorter than the new lower end would miss
        assert prefill_reach(rules, fitted[0] - 1) == 0
        assert change.size == "prompt_tokens" and change.after == (
            str(fitted[0]) if fitted[0] == fitted[1] else f"{fitted[0]}..{fitted[1]}"
        )


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("new", [2, 32, 64, 512])
def test_the_rounded_new_tokens_let_every_prompt_reuse_decoded_tokens(name: str, new: int) -> None:
    rules = ALL[name]
    prompts = [65, 200, 257, 300, 511, 1536, 4607]
    fitted, change = fit_new_tokens(rules, prompts, new)
    assert all(decode_reach(rules, p, fitted) > p + 1 for p in prompts)
    assert fitted == max(new, *(_fewest_new_tokens(rules, p) for p in prompts))
    assert (change is None) == (fitted == new)


def test_the_issue_case_rounds_to_vllms_block_and_says_so() -> None:
    prompts, change = fit_prompt_tokens(VLLM_HYBRID, (256, 256))
    assert prompts == (257, 257) and change is not None
    assert change.note.startswith("prompts 256 → 257 tokens to cross vLLM's 256-token block (block_size 256)")
    new, change = fit_new_tokens(VLLM_HYBRID, [257] * 4, 64)
    # 257 + 256 - 1 = 512: turn 1's last computed token reaches the block boundary past the prompt.
    assert new == 256 and change is not None and "64 → 256" in change.note and "block_size 256" in change.note
    # Sizes that already cross the block (the Llama model at block_size 16) are left alone.
    assert fit_prompt_tokens(VLLM_LLAMA, (256, 256)) == ((256, 256), None)
    assert fit_new_tokens(VLLM_LLAMA, [256] * 4, 64) == (64, None)


def _numbers(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\d+", text)}


def test_the_issue_case_explanations_agree_on_one_granularity() -> None:
    """vLLM 0.32, Qwen3-Next, align mode, 256-token prompts: the reason used to name a 64-token mamba chunk and
    then the 257 tokens that would hit vLLM's 256-token block. Every number now comes from the block."""
    why = explain_prefill_miss(VLLM_HYBRID, [256] * 4)
    assert why is not None and "mamba_cache_chunk_size" not in why
    assert "caches whole blocks of 256 tokens (block_size 256)" in why and "--prompt-tokens 257" in why
    assert _numbers(why) == {0, 4, 256, 257}
    why = explain_decode_miss(VLLM_HYBRID, [256] * 4, 64)
    assert why is not None and "mamba_track_interval" not in why
    # 256 + 257 - 1 = 512 is the first block boundary past 256 + 1.
    assert _numbers(why) == {0, 4, 64, 256, 257}, why
    assert "--max-new-tokens 257 or more" in why
    assert decode_reach(VLLM_HYBRID, 256, 257) > 257 >= decode_reach(VLLM_HYBRID, 256, 256)


def test_a_vllm_mamba_block_is_part_of_the_step() -> None:
    raw = {"prefix_cache_rules": "vllm", "block_size": 16, "mamba_cache_mode": "align", "mamba_block_size": 64}
    rules = rules_for(raw)
    assert rules.step("prefill") == rules.step("decode") == 64
    assert fit_prompt_tokens(rules, (40, 40))[0] == (65, 65)
    why = explain_prefill_miss(rules, [40] * 4)
    assert why is not None and "blocks of 64 tokens (block_size 16, mamba_block_size 64)" in why
    # Without align mode the recurrent state is not cached by blocks: vLLM's block_size alone.
    assert rules_for({**raw, "mamba_cache_mode": "none"}).step("prefill") == 16
    odd = rules_for({**raw, "block_size": 48})
    assert odd.step("prefill") == 192 and "least common multiple" in odd.describe()


def test_the_mamba_prefill_and_decode_steps_are_named_by_their_own_settings() -> None:
    prompts, change = fit_prompt_tokens(BUILTIN, (16, 48))
    assert prompts == (65, 65) and change is not None and "mamba chunk (mamba_cache_chunk_size 64)" in change.note
    new, change = fit_new_tokens(SGLANG_MAMBA, [300], 32)
    assert new == 213 and change is not None  # 300 + 213 - 1 = 512, the first boundary past 301
    assert "256-token mamba checkpoint interval (mamba_track_interval 256)" in change.note


def test_size_notes_read_what_the_run_recorded() -> None:
    assert size_notes({}) == [] and size_line({}) == ""
    env = {"sizes_adjusted": ["prompts 8 → 17 tokens ...", "new tokens 4 → 18 ..."], "sizes_kept": None}
    assert size_notes(env) == ["sizes rounded up: prompts 8 → 17 tokens ...", "sizes rounded up: new tokens 4 → 18 ..."]
    assert size_line(env) == "sizes rounded up to the engine's cache: prompts 8 → 17 tokens ...; new tokens 4 → 18 ..."
    kept = {"sizes_kept": "sizes kept as given: ..."}
    assert size_notes(kept) == ["sizes kept as given: ..."] and size_line(kept) == "sizes kept as given: ..."
