"""The ``vllm`` client over real HTTP against a vLLM-shaped fake: top-k from both logprob shapes, the cache
facts from ``/metrics``, and a server missing the flush or the cached-token counts named with its fix.
(The real server is in test_vllm_real.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from precisionbot.cli import main
from precisionbot.engines.base import GenerateRequest
from precisionbot.engines.vllm import DETAILS_FIX, DEV_MODE_FIX, VLLMEngine, cache_config
from precisionbot.errors import EngineError
from precisionbot.scoring.cache_rules import rules_for
from tests.support.fake_sglang import VOCAB, toy_logprobs
from tests.support.fake_vllm import METRICS, fake_vllm


def _top(row: list[float], k: int) -> list[int]:
    return sorted(range(VOCAB), key=lambda j: -row[j])[:k]


def test_top_k_of_output_and_prompt_are_sorted_and_aligned() -> None:
    with fake_vllm("vllm") as url:
        engine = VLLMEngine(url)
        prompt = (1, 5, 9, 13)
        (gen,) = engine.generate([GenerateRequest(prompt, max_new_tokens=3, top_logprobs_num=3)])
        seq = prompt + gen.output_ids
        (replay,) = engine.generate([GenerateRequest(seq, 0, logprob_start_len=2, top_logprobs_num=3)])
        engine.close()
    assert gen.output_top is not None and replay.input_top is not None
    assert gen.output_top.ids[:, 0].tolist() == list(gen.output_ids)  # greedy: the top-1 is the token
    assert (np.diff(gen.output_top.logprobs, axis=1) <= 0).all()  # sorted although the server's rows are not
    assert gen.output_top.ids[0].tolist() == _top(toy_logprobs(list(prompt)), 3)
    # The replay from position 2: rows for positions 2..6, each the top-3 of the prefix before it.
    assert replay.input_top.ids.shape == (len(seq) - 2, 3)
    assert replay.input_top.ids[0].tolist() == _top(toy_logprobs(list(seq[:2])), 3)
    np.testing.assert_allclose(replay.input_top.logprobs[-3:], gen.output_top.logprobs)
    assert replay.input_logprobs[-3:] == pytest.approx(gen.output_logprobs)


def test_a_replay_reads_its_prompt_logprobs_from_read_from_on() -> None:
    with fake_vllm("vllm") as url:
        engine = VLLMEngine(url)
        seq = (1, 5, 9, 13, 17, 21)
        whole, part = engine.generate(
            [
                GenerateRequest(seq, 0, logprob_start_len=0, top_logprobs_num=2),
                GenerateRequest(seq, 0, logprob_start_len=0, top_logprobs_num=2, read_from=4),
            ]
        )
        engine.close()
    assert whole.input_top is not None and part.input_top is not None
    assert np.isnan(part.input_logprobs[:4]).all() and (part.input_top.ids[:4] == -1).all()
    assert np.array_equal(part.input_logprobs[4:], whole.input_logprobs[4:])
    assert np.array_equal(part.input_top.ids[4:], whole.input_top.ids[4:])
    assert part.input_token_ids.tolist() == list(seq)


def test_server_info_reads_the_block_size_and_chooses_vllm_rules() -> None:
    with fake_vllm("vllm") as url:
        engine = VLLMEngine(url)
        info = engine.server_info()
        assert engine.cache_unsupported_reason() is None
        engine.close()
    assert info.version == "0.32.0" and info.model_path == "toy" and info.disable_radix_cache is False
    assert info.raw["block_size"] == 16
    rules = rules_for(info.raw)
    assert rules.kind == "vllm" and rules.page_size == 16
    assert rules.prefill(96, 100) is None and rules.prefill(100, 100) is not None
    # 100 prompt + 40 generated: 139 computed tokens, 8 whole blocks.
    assert rules.decode(128, 100, 40) is None and rules.decode(144, 100, 40) is not None


def test_cache_config_parses_the_prometheus_labels() -> None:
    labels = cache_config(METRICS)
    assert labels["block_size"] == "16" and labels["enable_prefix_caching"] == "True"
    assert cache_config("vllm:num_requests_running 0.0\n") == {}


@pytest.mark.parametrize(("mode", "fix"), [("vllm_no_dev", DEV_MODE_FIX), ("vllm_no_details", DETAILS_FIX)])
def test_a_server_not_set_up_names_the_fix(mode: str, fix: str) -> None:
    with fake_vllm(mode) as url:
        engine = VLLMEngine(url)
        with pytest.raises(EngineError) as err:
            engine.server_info()
        engine.close()
    assert fix in str(err.value)


def test_a_malformed_probe_answer_is_left_to_the_checks_not_blamed_on_the_set_up() -> None:
    # Not JSON at all is the engine answering badly, as SGLang's /generate can: the set-up probe does not turn it
    # into a setup error (exit 3) with a wrong fix; the first check's request meets it and says so (exit 2).
    with fake_vllm("vllm_bad_json") as url:
        engine = VLLMEngine(url)
        assert engine.server_info().raw["block_size"] == 16
        with pytest.raises(EngineError, match=r"/v1/completions answered invalid JSON"):
            engine.generate([GenerateRequest((1, 2, 3), 2)])
        engine.close()


def test_a_missing_cached_token_count_is_an_error_naming_the_flag() -> None:
    with fake_vllm("vllm_no_details") as url:
        engine = VLLMEngine(url)
        with pytest.raises(EngineError, match="--enable-prompt-tokens-details"):
            engine.generate([GenerateRequest((1, 2, 3), 2)])
        engine.close()


def test_config_engine_kind_vllm_runs_match_through_the_cli(tmp_path: Path) -> None:
    with fake_vllm("vllm") as url:
        config = tmp_path / "precision.yml"
        config.write_text(f"engine:\n  kind: vllm\n  url: {url}\n")
        out = tmp_path / "out"
        argv = ["check", "--config", str(config), "--checks", "match", "--samples", "2", "--max-new-tokens", "3"]
        code = main([*argv, "--prompt-tokens", "12", "--out", str(out), "--quiet"])
    result = json.loads((out / "result.json").read_text())
    assert code == 0, result
    assert result["engine"]["kind"] == "vllm" and result["checks"][0]["verdict"] == "pass"
