"""When ``run_suite`` rounds sizes to the cache and when it does not, against a small SGLang-shaped server over
real HTTP whose ``/server_info`` reports the granularity (the builtin engine's own run is
test_sizes_fit_builtin.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from precisionbot.checks import run_suite
from precisionbot.config import Config, SuiteConfig, from_mapping
from precisionbot.engines.sglang import SGLangEngine
from precisionbot.results import RunResult
from tests.support.fake_sglang import Behaviour, fake_sglang

CONFIG = Config.default()
SUITE = dataclasses.replace(CONFIG.suite("consistency"), samples=4, max_new_tokens=4, prompt_tokens=(12, 20))
PAGED = {"page_size": 32}


def _run(suite: SuiteConfig, info: dict[str, Any], checks: tuple[str, ...] | None = None) -> RunResult:
    with fake_sglang(Behaviour(server_info_extra=info)) as (url, _):
        engine = SGLangEngine(url, batch_size=4, concurrency=2, backoff_s=0.01)
        try:
            return run_suite(engine, CONFIG, suite, checks=checks, fit_sizes=True).result
        finally:
            engine.close()


def test_a_paged_server_gets_prompts_past_one_page_and_new_tokens_past_the_next() -> None:
    result = _run(SUITE, PAGED)
    notes = result.environment["sizes_adjusted"]
    assert isinstance(notes, list) and notes[0].startswith("prompts 12..20 → 33 tokens to cross the 32-token page")
    # 33-token prompts: the first page boundary past 33 + 1 is 64, reached by 33 + 32 - 1.
    assert notes[1].startswith("new tokens 4 → 32 to reach the 32-token page (page_size 32)")
    assert result.environment["max_new_tokens"] == 32
    check = result.check("prefill_cache_hit")
    assert check is not None and check.stats["positions"] == 4 * 32


def test_only_the_helpers_that_run_are_fitted() -> None:
    result = _run(SUITE, PAGED, checks=("match",))
    assert "sizes_adjusted" not in result.environment and result.environment["max_new_tokens"] == 4
    decode_only = _run(SUITE, PAGED, checks=("decode_cache_hit",)).environment["sizes_adjusted"]
    assert isinstance(decode_only, list) and len(decode_only) == 1 and decode_only[0].startswith("new tokens 4 → ")


def test_sizes_that_would_not_fit_the_context_are_kept_with_the_reason() -> None:
    result = _run(SUITE, {**PAGED, "context_length": 64})
    kept = result.environment["sizes_kept"]
    assert isinstance(kept, str) and "sizes kept as given" in kept and "prompt_tokens 12..20 → 33" in kept
    assert "64 tokens (context_length)" in kept and "sizes_adjusted" not in result.environment
    assert result.environment["max_new_tokens"] == 4  # the user's sizes ran


@pytest.mark.parametrize(
    "suite",
    [
        dataclasses.replace(SUITE, exact_sizes=True),
        dataclasses.replace(SUITE, turns=2),  # the multi-turn shape asserts the exact rules instead
    ],
)
def test_exact_sizes_and_the_multi_turn_shape_keep_the_sizes(suite: SuiteConfig) -> None:
    result = _run(suite, PAGED)
    assert "sizes_adjusted" not in result.environment and result.environment["max_new_tokens"] == 4


def test_a_server_that_needs_no_rounding_gets_none() -> None:
    result = _run(SUITE, {})  # no page_size: SGLang's default of 1
    assert "sizes_adjusted" not in result.environment and "sizes_kept" not in result.environment


def test_exact_sizes_is_a_suite_key() -> None:
    config = from_mapping({"suites": {"consistency": {"exact_sizes": True}}})
    assert config.suite("consistency").exact_sizes is True
    assert Config.default().suite("consistency").exact_sizes is False
