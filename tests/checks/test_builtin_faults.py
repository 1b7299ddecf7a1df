"""The helpers against the builtin engine through real HTTP: each fault is caught by the right helper only.

Test-sized runs (8 samples x 32 new tokens, prompts of 64-160 tokens) so the file takes seconds, on the tiny
dense preset (the hybrid faults have their own tests); production numerics unless bit-exactness is the point.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from precisionbot.checks import run_suite
from precisionbot.config import Config, SuiteConfig
from precisionbot.engines.builtin import BuiltinEngine
from precisionbot.results import RunResult, Verdict

pytestmark = pytest.mark.slow

CONFIG = Config.default()
SUITE = dataclasses.replace(CONFIG.suite("consistency"), samples=8, max_new_tokens=32, prompt_tokens=(64, 160))
P, F, INC = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE


def _run(
    faults: Sequence[str] = (),
    profile: str = "default",
    disable_radix_cache: bool = False,
    exact: bool = False,
    preset: str = "tiny",
    suite: SuiteConfig = SUITE,
) -> RunResult:
    engine = BuiltinEngine(
        faults=faults,
        disable_radix_cache=disable_radix_cache,
        enable_deterministic_inference=exact,
        preset=preset,
        batch_size=4,
        concurrency=2,
    )
    try:
        return run_suite(engine, CONFIG, suite, profile=profile).result
    finally:
        engine.close()


def _verdicts(run: RunResult) -> tuple[Verdict, ...]:
    return tuple(c.verdict for c in run.checks)


def test_clean_engine_passes_all_three_twice_with_the_same_numbers() -> None:
    first, second = _run(), _run()
    assert _verdicts(first) == (P, P, P)
    assert [c.stats["mean_k3"] for c in first.checks] == [c.stats["mean_k3"] for c in second.checks]
    assert _verdicts(second) == (P, P, P)
    for c in first.checks[1:]:
        assert c.cache is not None and c.cache.kept > c.cache.total / 2


@pytest.mark.parametrize("fault", ["restore-layer0-only", "restore-stale-page"])
def test_prefix_restore_faults_fail_prefill_cache_hit_not_match(fault: str) -> None:
    run = _run([fault])
    match, prefill, _ = run.checks
    assert match.verdict is P
    assert prefill.verdict is F
    assert run.verdict is F


def test_decode_kv_rounding_fails_decode_cache_hit_only() -> None:
    run = _run(["cache-decode-kv-rounded"])
    assert _verdicts(run) == (P, P, F)


def test_batch_variant_passes_default_fails_deterministic() -> None:
    assert _verdicts(_run(["batch-variant"])) == (P, P, P)
    deterministic = _run(["batch-variant"], profile="deterministic", exact=True)
    assert deterministic.checks[0].verdict is F
    assert deterministic.checks[0].stats["mean_k3"] > 1e-9


@pytest.mark.parametrize("preset", ["tiny", "hybrid"])
def test_the_deterministic_flag_passes_the_deterministic_profile(preset: str) -> None:
    # The hybrid cache hits resume at 64-token checkpoints: prompts long enough that most samples keep one.
    suite = dataclasses.replace(SUITE, checks=("match", "prefill_cache_hit"), prompt_tokens=(130, 250))
    run = _run(profile="deterministic", exact=True, preset=preset, suite=suite)
    assert _verdicts(run) == (P, P)
    assert [c.stats["max"] for c in run.checks] == [0.0, 0.0]
    if preset == "hybrid":  # production numerics: not bit-exact (the tiny model's fp32-ulp gaps may stay < 1e-9)
        noisy = _run(profile="deterministic", preset=preset, suite=suite)
        assert noisy.checks[0].verdict is F and noisy.checks[0].stats["mean_k3"] > 1e-9


def test_disabled_radix_cache_makes_cache_helpers_inconclusive() -> None:
    run = _run(disable_radix_cache=True)
    assert _verdicts(run) == (P, INC, INC)
    assert all("radix cache disabled" in c.reasons[0] for c in run.checks[1:])
    assert run.verdict is INC
