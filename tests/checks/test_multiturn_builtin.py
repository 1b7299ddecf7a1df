"""Multi-turn branches and ``cache_consistency`` against the builtin engine through real HTTP.

Test-sized: 4 conversations (2 groups x 2 branches), 2 turns of 16 new tokens, prompts of 64-96 tokens.
The builtin engine's paged cache (page_size 16) meets SGLang's cached_tokens rules; its cache faults must fail.
These runs use the tiny dense preset (SGLang's radix rules; the hybrid preset's 64-token checkpoints need
longer generations, tests/builtin/test_hybrid.py covers its mamba rules); the deterministic profile runs the
engine with ``--enable-deterministic-inference``, as SGLang's does.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from precisionbot.checks import run_suite
from precisionbot.checks.suite import CheckRun
from precisionbot.cli import main
from precisionbot.config import CacheConsistencyOptions, Config, SuiteConfig
from precisionbot.engines.builtin import BuiltinEngine
from precisionbot.results import Verdict

pytestmark = pytest.mark.slow

CONFIG = Config.default()
BRANCHED = dataclasses.replace(
    CONFIG.suite("consistency"),
    samples=4,
    branches=2,
    turns=2,
    max_new_tokens=16,
    prompt_tokens=(64, 96),
    suffix_tokens=(16, 32),
)
CACHE = dataclasses.replace(
    CONFIG.suite("consistency"),
    checks=("match", "cache_consistency"),
    samples=3,
    max_new_tokens=24,
    prompt_tokens=(64, 96),
)
P, F = Verdict.PASS, Verdict.FAIL


def _run(suite: SuiteConfig, faults: Sequence[str] = (), profile: str = "default") -> CheckRun:
    engine = BuiltinEngine(
        faults=faults,
        preset="tiny",
        enable_deterministic_inference=profile == "deterministic",
        batch_size=4,
        concurrency=2,
    )
    try:
        return run_suite(engine, CONFIG, suite, profile=profile)
    finally:
        engine.close()


def test_clean_branches_meet_every_cached_tokens_expectation() -> None:
    few = CacheConsistencyOptions(prefixes=2, cuts=3)
    run = _run(dataclasses.replace(BRANCHED, checks=(*BRANCHED.checks, "cache_consistency"), cache_consistency=few))
    run = run.result
    assert [c.verdict for c in run.checks] == [P, P, P, P], [c.reasons for c in run.checks]
    for c in run.checks[1:3]:
        assert c.cache is not None and (c.cache.kept, c.cache.total) == (4, 4)
        assert "page_size 16" in c.extra["conversation"]["cache_rules"]
    assert run.checks[3].extra["mismatches"] == 0
    assert run.checks[3].extra["restarts"] == 6 and run.checks[3].extra["restarts_with_cache_hit"] == 6


def test_a_prefix_restore_fault_fails_the_branched_cache_helpers() -> None:
    run = _run(BRANCHED, ["restore-stale-page"]).result
    _, prefill, decode = run.checks
    assert prefill.verdict is F and decode.verdict is F
    assert all(c.extra["conversation"]["cache_violations"] == [] for c in run.checks)  # numbers, not accounting


@pytest.mark.parametrize(
    ("fault", "profile", "reason"),
    [
        ("restore-stale-page", "default", "is not below kl_div"),
        ("cache-decode-kv-rounded", "default", "is above 4x match's"),
        ("cache-decode-kv-rounded", "deterministic", "bit-identical required"),
    ],
)
def test_cache_consistency_catches_the_cache_faults(fault: str, profile: str, reason: str) -> None:
    match, consistency = _run(CACHE, [fault], profile).result.checks
    assert match.verdict is P
    assert consistency.verdict is F
    assert any(reason in r for r in consistency.reasons), consistency.reasons
    assert consistency.extra["mismatches"] > 0


def test_sampled_decode_is_reproducible_for_a_seed() -> None:
    # The single-turn shape (kl_test_utils' helpers at temperature 1).
    sampled = dataclasses.replace(BRANCHED, checks=("match",), samples=2, branches=1, turns=1, temperature=1.0)

    def tokens(suite: SuiteConfig) -> np.ndarray:  # type: ignore[type-arg]
        run = _run(suite)
        assert run.result.checks[0].verdict is P
        return run.records["match"].token_id

    first, again = tokens(sampled), tokens(sampled)
    assert np.array_equal(first, again)
    other = tokens(dataclasses.replace(sampled, sampling_seed=1))
    assert not np.array_equal(first, other)


def test_the_sglang_unified_suite_runs_from_the_command_line(tmp_path: Path) -> None:
    out, config = tmp_path / "out", tmp_path / "precision.yml"
    # A config refines the preset (the rest stays the kit's): shorter suffixes for a test-sized run.
    config.write_text("suites:\n  sglang-unified:\n    suffix_tokens: [16, 32]\n")
    argv = ["check", "--engine", "builtin", "--model-preset", "tiny", "--suite", "sglang-unified", "--samples", "3"]
    argv += ["--max-new-tokens", "6"]
    code = main([*argv, "--prompt-tokens", "48", "--config", str(config), "--out", str(out), "--quiet"])
    result = json.loads((out / "result.json").read_text())
    assert code == 0, result
    assert [c["name"] for c in result["checks"]] == ["match", "prefill_cache_hit", "decode_cache_hit"]
    assert all(c["thresholds"]["kl_div"] == 0.003 for c in result["checks"])
    assert all(c["conversation"]["turns"] == 3 and c["conversation"]["branches"] == 3 for c in result["checks"])
