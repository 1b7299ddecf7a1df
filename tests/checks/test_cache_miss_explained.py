"""A decode-cache miss on the shipped default engine (hybrid preset) is explained from the server's
configuration, not blamed on the cache: its recurrent state is checkpointed every ``mamba_track_interval``
tokens, so 32 new tokens never cross a checkpoint past a 200-token prompt (200 + 31 < 256)."""

from __future__ import annotations

import dataclasses

import pytest

from precisionbot.checks import run_suite
from precisionbot.config import Config
from precisionbot.engines.builtin import BuiltinEngine
from precisionbot.results import Verdict

pytestmark = pytest.mark.slow


def test_a_short_generation_names_the_checkpoint_interval_and_the_size_that_hits() -> None:
    config = Config.default()
    suite = dataclasses.replace(
        config.suite("consistency"),
        checks=("decode_cache_hit",),
        samples=4,
        max_new_tokens=32,
        prompt_tokens=(200, 200),
    )
    engine = BuiltinEngine()
    try:
        (check,) = run_suite(engine, config, suite).result.checks
    finally:
        engine.close()
    assert check.verdict is Verdict.INCONCLUSIVE
    assert check.cache is not None and check.cache.kept == 0
    reason = check.reasons[0]
    assert "mamba_track_interval 64" in reason and "--max-new-tokens 57 or more" in reason, reason
    assert "is the prefix cache enabled" not in reason
