"""The comment side's re-derivation (``precisionbot.report.verify``) agrees with the checks on real runs.

Real runs of the builtin engine: an honest PASS stays PASS when re-derived from its stats alone, and a
FAIL relabelled PASS (what a forged result.json would say) is caught, for the consistency helpers and golden.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from precisionbot import corpus
from precisionbot.baselines.golden_recording import GoldenTarget, record_golden
from precisionbot.baselines.store import open_store
from precisionbot.checks import run_suite
from precisionbot.checks.golden import compare_golden
from precisionbot.checks.suite import CheckRun
from precisionbot.config import Config, GoldenOptions, GoldenThresholds, ThresholdsConfig
from precisionbot.engines.builtin import BuiltinEngine
from precisionbot.report.load import load_sections
from precisionbot.report.verify import verify_run
from precisionbot.results import EngineInfo, RunResult, Verdict
from precisionbot.results.directory import write_result

pytestmark = pytest.mark.slow

CONFIG = Config.default()
SUITE = dataclasses.replace(
    CONFIG.suite("consistency"),
    checks=("match", "prefill_cache_hit", "decode_cache_hit", "batch_invariance"),
    samples=3,
    max_new_tokens=8,
    prompt_tokens=(48, 96),
)
DOCS = tuple(corpus.builtin_documents(max_code_files=2))


def _target(engine: BuiltinEngine) -> GoldenTarget:
    options = GoldenOptions(top_k=20, context_depths=(256,), decode_steps=4)
    return GoldenTarget(engine, "builtin", DOCS, options, docs_per_kind=1)


def _run(*faults: str) -> CheckRun:
    engine = BuiltinEngine(faults=faults, batch_size=4, concurrency=2)
    try:
        return run_suite(engine, CONFIG, SUITE)
    finally:
        engine.close()


def _forged(run: RunResult) -> RunResult:
    return dataclasses.replace(
        run, verdict=Verdict.PASS, checks=tuple(dataclasses.replace(c, verdict=Verdict.PASS) for c in run.checks)
    )


def test_consistency_helpers_honest_and_forged(tmp_path: Path) -> None:
    clean = _run()
    write_result(tmp_path / "clean", clean.result, clean.records)
    (section,) = load_sections([tmp_path / "clean"])  # with the arrays: the stats must agree with them too
    assert [c.verdict for c in section.run.checks] == [c.verdict for c in clean.result.checks]
    assert set(section.records) >= {"match", "prefill_cache_hit"}
    broken = _run("restore-layer0-only").result
    assert broken.check("prefill_cache_hit").verdict is Verdict.FAIL  # type: ignore[union-attr]
    verified = verify_run(_forged(broken), ThresholdsConfig())
    assert verified.verdict is Verdict.INCONCLUSIVE
    assert verified.check("prefill_cache_hit").verdict is Verdict.INCONCLUSIVE  # type: ignore[union-attr]
    assert verified.check("match").verdict is Verdict.PASS  # type: ignore[union-attr]


def test_golden_honest_and_forged(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    engine = BuiltinEngine()
    try:
        record_golden(_target(engine), store)
    finally:
        engine.close()
    for faults, expected in (((), Verdict.PASS), (("mantissa=5",), Verdict.FAIL)):
        engine = BuiltinEngine(faults=faults)
        try:
            result = compare_golden(_target(engine), store, GoldenThresholds()).result
        finally:
            engine.close()
        assert result.verdict is expected, result.reasons
        run = RunResult.from_checks([result], signature="s", engine=EngineInfo(url="builtin://", kind="builtin"))
        honest = verify_run(run, ThresholdsConfig())
        forged = verify_run(_forged(run), ThresholdsConfig())
        assert honest.verdict is expected
        assert forged.verdict is (Verdict.PASS if expected is Verdict.PASS else Verdict.INCONCLUSIVE)
