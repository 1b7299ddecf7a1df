"""The OpenAI-compatible (vLLM) client over real HTTP: match runs, cache helpers are INCONCLUSIVE with why."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from precisionbot.checks import run_suite
from precisionbot.cli import main
from precisionbot.config import Config
from precisionbot.engines.base import GenerateRequest
from precisionbot.engines.openai import CACHE_REASON, VLLM_REASON, OpenAIEngine
from precisionbot.errors import EngineError
from precisionbot.results import Verdict
from tests.support.fake_sglang import BOS, VOCAB, toy_logprobs
from tests.support.fake_vllm import fake_vllm


def test_generation_and_prompt_logprobs_are_aligned() -> None:
    with fake_vllm() as url:
        engine = OpenAIEngine(url)
        prompt = (1, 5, 9, 13)
        (gen,) = engine.generate([GenerateRequest(prompt, max_new_tokens=3)])
        (replay,) = engine.generate([GenerateRequest(prompt + gen.output_ids, 0, logprob_start_len=0)])
        engine.close()
    assert len(gen.output_ids) == 3 and len(replay.output_ids) == 0
    assert replay.input_logprobs[0] != replay.input_logprobs[0]  # NaN: position 0 has no prediction
    assert replay.input_logprobs[-3:] == pytest.approx(gen.output_logprobs)
    assert replay.input_logprobs[2] == pytest.approx(toy_logprobs([1, 5])[9])


def test_match_runs_and_cache_helpers_are_inconclusive() -> None:
    config = Config.default()
    suite = dataclasses.replace(config.suite("consistency"), samples=3, max_new_tokens=4, prompt_tokens=(10, 16))
    with fake_vllm() as url:
        engine = OpenAIEngine(url)
        run = run_suite(engine, config, suite).result
        engine.close()
    by = {c.name: c for c in run.checks}
    assert by["match"].verdict is Verdict.PASS
    for name in ("prefill_cache_hit", "decode_cache_hit"):
        assert by[name].verdict is Verdict.INCONCLUSIVE and by[name].reasons == (CACHE_REASON,)


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("text_tokens", "is not 'token_id:N'"),
        ("short_prompt_logprobs", "prompt_logprobs must have 5 entries"),
        ("nan_logprob", r"token_logprobs\[0\] is not a valid logprob"),
    ],
)
def test_unsupported_answers_are_engine_errors(mode: str, message: str) -> None:
    with fake_vllm(mode) as url:
        engine = OpenAIEngine(url)
        with pytest.raises(EngineError, match=message):
            engine.generate([GenerateRequest((1, 2, 3, 4, 5), 2, logprob_start_len=0)])
        engine.close()


def test_tokenize_falls_back_to_llama_server_request_shape() -> None:
    with fake_vllm("llama_tokenize") as url:
        engine = OpenAIEngine(url)
        assert engine.tokenize(["ab"]) == [(BOS, 2 + ord("a") % (VOCAB - 2), 2 + ord("b") % (VOCAB - 2))]
        engine.close()


@pytest.mark.parametrize(
    ("mode", "message"), [("empty_tokenize", "gave no tokens for a non-empty text"), ("no_token_list", "no token list")]
)
def test_no_usable_tokenizer_is_inconclusive_exit_2_either_way(
    mode: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same situation (the engine's tokenizer is not usable) gives the same exit code on every path."""
    with fake_vllm(mode) as url:
        argv = ["check", "--engine-url", url, "--engine-kind", "openai", "--checks", "match", "--samples", "2"]
        code = main([*argv, "--prompt-tokens", "12", "--max-new-tokens", "2", "--quiet", "--out", str(tmp_path)])
    assert code == 2
    assert message in capsys.readouterr().err


def test_openai_kind_against_vllm_names_the_vllm_kind() -> None:
    with fake_vllm("vllm") as url:
        engine = OpenAIEngine(url)
        assert engine.cache_unsupported_reason() == VLLM_REASON
        engine.close()
    assert "--engine-kind vllm" in VLLM_REASON
