"""batch_invariance against the builtin engine over real HTTP: its clean engine is batch-invariant (bit-exact),
``batch-variant`` splits reductions by batch size and must be caught with the configuration named."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from precisionbot import corpus
from precisionbot.checks.batch_invariance import batch_invariance
from precisionbot.engines.builtin import BuiltinEngine
from precisionbot.results import Verdict


@pytest.fixture(scope="module")
def prompts() -> list[tuple[int, ...]]:
    engine = BuiltinEngine()
    try:
        return corpus.build_prompts(engine.tokenize, corpus.builtin_documents(max_code_files=8), 8, (200, 600), 0)
    finally:
        engine.close()


@contextmanager
def _engine(*faults: str) -> Iterator[BuiltinEngine]:
    engine = BuiltinEngine(faults=faults)
    try:
        yield engine
    finally:
        engine.close()


def test_clean_engine_is_batch_invariant(prompts: list[tuple[int, ...]]) -> None:
    with _engine() as engine:
        result = batch_invariance(engine, prompts, (1, 4, 8), 1e-5).result
    assert result.verdict is Verdict.PASS, result.reasons
    assert result.stats["max_abs_delta"] == 0 and result.stats["flips"] == 0
    assert [c["label"] for c in result.stats["configurations"]] == ["batch size 4", "batch size 8"]
    assert result.stats["positions"] == 8 * (32 + 8)


def test_batch_variant_fails_and_names_the_configuration(prompts: list[tuple[int, ...]]) -> None:
    with _engine("batch-variant") as engine:
        out = batch_invariance(engine, prompts, (1, 8), 1e-5)
    result = out.result
    assert result.verdict is Verdict.FAIL
    assert result.reasons[0].startswith("batch size 8 differs from solo: max |Δ logprob|")
    assert result.stats["max_abs_delta"] > 1e-3
    assert result.worst and result.worst[0].delta != 0
    assert out.record is not None and len(out.record) == result.stats["positions"]


def test_engine_variants_are_compared_with_the_solo_run(prompts: list[tuple[int, ...]]) -> None:
    with _engine() as engine:
        out = batch_invariance(
            engine, prompts, (8,), 1e-5, variants=[("batch-variant", lambda: _engine("batch-variant"))]
        )
    labels = [c["label"] for c in out.result.stats["configurations"]]
    assert labels == ["batch size 8", "batch-variant, batch size 8"]
    assert out.result.verdict is Verdict.FAIL
    assert out.result.reasons[0].startswith("batch-variant, batch size 8 differs")


def test_nothing_to_compare_is_inconclusive(prompts: list[tuple[int, ...]]) -> None:
    with _engine() as engine:
        result = batch_invariance(engine, prompts[:1], (1,), 1e-5).result
    assert result.verdict is Verdict.INCONCLUSIVE
