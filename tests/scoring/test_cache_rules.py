"""SGLang's cached_tokens rules as pure functions, their choice from /server_info, and the submission order."""

from __future__ import annotations

import pytest

from precisionbot.checks.cache_consistency import topk_equal
from precisionbot.scoring.cache_rules import CacheRules, interleave_order, rules_for, uses_mamba_cache


def test_radix_prefill_rule_is_exact() -> None:
    rules = CacheRules(kind="radix", page_size=16)
    assert rules.prefill(512, 512) is None
    assert rules.prefill(496, 512) == "expected cached_tokens=512, got 496"
    assert rules.prefill(513, 512) is not None


@pytest.mark.parametrize(
    ("page", "history", "output", "ok", "bad"),
    [
        (1, 100, 20, [120, 119], [118, 121, 0]),
        # 119 cut to 16 = 112: a paged cache may drop the unfinished page.
        (16, 100, 20, [120, 119, 112], [111, 113, 96]),
        (64, 128, 0, [128, 127, 64], [65, 0]),
    ],
)
def test_radix_decode_rule(page: int, history: int, output: int, ok: list[int], bad: list[int]) -> None:
    rules = CacheRules(kind="radix", page_size=page)
    for actual in ok:
        assert rules.decode(actual, history, output) is None, actual
    for actual in bad:
        reason = rules.decode(actual, history, output)
        assert reason is not None and reason.endswith(f"got {actual}"), actual


def test_mamba_prefill_rule_allows_one_chunk_below_the_rounded_prefix() -> None:
    rules = CacheRules(kind="mamba", chunk_size=64)
    assert rules.prefill(192, 200) is None
    assert rules.prefill(128, 200) is None
    assert rules.prefill(200, 200) == "expected cached_tokens in [128, 192], got 200"
    assert rules.prefill(127, 200) is not None
    assert CacheRules(kind="mamba", chunk_size=64).prefill(0, 50) is None  # lower and upper are 0


def test_mamba_decode_rule_tracks_the_interval_and_the_lag() -> None:
    strict = CacheRules(kind="mamba", track_interval=16)
    # 100 + 20 - 1 = 119 -> boundary 112
    assert strict.decode(112, 100, 20) is None
    assert strict.decode(200, 100, 20) is None  # only a lower bound
    assert strict.decode(111, 100, 20) == "expected cached_tokens>=112, got 111"
    assert strict.decode(100, 100, 0) is None and strict.decode(99, 100, 0) is not None
    lagging = CacheRules(kind="mamba", track_interval=16, checkpoint_lag=32)
    assert lagging.decode(80, 100, 20) is None and lagging.decode(79, 100, 20) is not None


def test_rules_are_chosen_by_sglang_field_names() -> None:
    assert rules_for({}) == CacheRules(kind="radix", page_size=1)
    assert rules_for({"page_size": 64, "mamba_track_interval": 256}) == CacheRules(kind="radix", page_size=64)
    hybrid = rules_for({"page_size": 16, "uses_mamba_radix_cache": True, "mamba_track_interval": 32}, checkpoint_lag=8)
    assert hybrid == CacheRules(kind="mamba", page_size=16, chunk_size=64, track_interval=32, checkpoint_lag=8)
    assert rules_for({"mamba_ssm_dtype": "float32", "mamba_cache_chunk_size": 128}).chunk_size == 128
    assert rules_for({"mamba_ssm_dtype": "float32"}).track_interval == 256  # SGLang's default
    assert not uses_mamba_cache({"mamba_ssm_dtype": None, "sliding_window_size": 4096})
    # The derived flag wins over the dtype when the server reports both.
    assert not uses_mamba_cache({"uses_mamba_radix_cache": False, "mamba_ssm_dtype": "float32"})
    assert rules_for({"page_size": True}).page_size == 1  # not a number: SGLang's default
    assert "page_size 64" in rules_for({"page_size": 64}).describe()
    assert "track interval 32" in hybrid.describe()


def test_interleave_order_matches_upstream() -> None:
    # kl_multiturn_utils._interleave_order(7, 3): [g0b0, g1b0, g0b1, g1b1, g0b2, g1b2] + remainder [6]
    assert interleave_order(7, 3) == [0, 3, 1, 4, 2, 5, 6]
    assert interleave_order(9, 3) == [0, 3, 6, 1, 4, 7, 2, 5, 8]
    assert interleave_order(9, 1) is None
    assert interleave_order(3, 3) is None


def test_topk_equality_is_bitwise_with_rank_k_ties() -> None:
    a = {1: -0.5, 2: -1.0, 3: -2.0}
    assert topk_equal(a, dict(a))
    assert not topk_equal(a, {1: -0.5, 2: -1.0 + 1e-12, 3: -2.0})
    # id 3 and id 4 tie at rank k: either may be listed.
    assert topk_equal(a, {1: -0.5, 2: -1.0, 4: -2.0})
    assert not topk_equal(a, {1: -0.5, 2: -1.0, 4: -1.5})
    assert not topk_equal(a, {1: -0.5, 2: -1.0})


def test_a_decode_miss_is_explained_by_the_checkpoint_interval_with_the_size_that_hits() -> None:
    from precisionbot.scoring.cache_rules import decode_reach, explain_decode_miss

    hybrid = rules_for({"uses_mamba_radix_cache": True, "mamba_track_interval": 64, "page_size": 16})
    prompts = [200, 260, 330, 390]  # 200 + 32 - 1 = 231 < 256: no checkpoint past any of these prompts ...
    assert [decode_reach(hybrid, p, 32) > p + 1 for p in prompts] == [False, False, False, False]
    why = explain_decode_miss(hybrid, prompts, 32)
    assert why is not None
    assert "every 64 tokens (mamba_track_interval 64)" in why and "in only 0 of 4 prompts" in why
    # ... the size it names lets more than half hit (and one less does not); interval + 2 lets every one.
    enough = int(why.split("--max-new-tokens ")[1].split()[0])
    assert sum(decode_reach(hybrid, p, enough) > p + 1 for p in prompts) == 3
    assert sum(decode_reach(hybrid, p, enough - 1) > p + 1 for p in prompts) == 2
    assert all(decode_reach(hybrid, p, 66) > p + 1 for p in range(1, 2000))
    assert explain_decode_miss(hybrid, prompts, 66) is None  # then a miss is the cache's own
    # A radix cache with pages of 16: 4 new tokens cannot fill a page past most prompts.
    radix = rules_for({"page_size": 16})
    assert "page_size 16" in (explain_decode_miss(radix, [100, 200, 300], 4) or "")
    assert explain_decode_miss(radix, [100, 200, 300], 18) is None


def test_a_prefill_miss_is_explained_by_prompts_shorter_than_a_checkpoint() -> None:
    from precisionbot.scoring.cache_rules import explain_prefill_miss

    hybrid = rules_for({"mamba_ssm_dtype": "float32", "mamba_cache_chunk_size": 64})
    why = explain_prefill_miss(hybrid, [40, 50, 64, 200])
    assert why is not None and "1 of 4 prompts" in why and "--prompt-tokens 65" in why
    assert explain_prefill_miss(hybrid, [65, 100, 200]) is None
