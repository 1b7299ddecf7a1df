"""precisionbot against a real llama.cpp ``llama-server`` (marker ``llamacpp``): built from the pinned sdist by
scripts/build-llama-server.sh, serving a tiny llama GGUF. The three helpers must pass on a clean server with
real cache hits and the replay done per position; a server that cannot be flushed must not pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from precisionbot.cli import main
from precisionbot.engines.base import GenerateRequest
from precisionbot.engines.llamacpp import LlamaCppEngine
from precisionbot.engines.openai import OpenAIEngine
from tests.support.check_result import checks_by_name, read_result_json
from tests.support.llamacpp import QUIET_ARGS, LlamaBuild, build, llama_server

pytestmark = pytest.mark.llamacpp

SMALL = ["--samples", "4", "--prompt-tokens", "96", "--max-new-tokens", "12", "--quiet"]


@pytest.fixture(scope="module")
def llama() -> LlamaBuild:
    return build()


@pytest.fixture(scope="module")
def clean_url(llama: LlamaBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The f32 tiny llama, flushable (slots can be erased, no host-memory prompt cache)."""
    logs = tmp_path_factory.mktemp("llama-clean")
    args = f"{QUIET_ARGS} --slot-save-path {logs}/slots --cache-ram 0"
    (logs / "slots").mkdir()
    with llama_server(llama, llama.model(), logs, args) as url:
        yield url


def test_three_helpers_pass_with_real_cache_hits(
    clean_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    checks = "match,prefill_cache_hit,decode_cache_hit"
    argv = ["check", "--engine-url", clean_url, "--engine-kind", "llamacpp", "--checks", checks, "--out", str(out)]
    code = main([*argv, *SMALL])
    printed = capsys.readouterr()
    result = read_result_json(out)
    by_name = checks_by_name(result)
    assert code == 0, printed.out + printed.err
    assert result["engine"] == {"url": clean_url, "kind": "llamacpp", "commit": None}
    for name in ("prefill_cache_hit", "decode_cache_hit"):
        cache = by_name[name]["cache"]
        assert isinstance(cache, dict) and cache["kept"] == cache["total"] == 4, (name, cache)
    for name, check in by_name.items():
        assert check["verdict"] == "pass", (name, check)
        assert "per-position" in str(check["replay"])
        stats = check["stats"]
        assert isinstance(stats, dict) and 0.0 <= float(stats["mean_k3"]) < 1e-6, (name, stats)
    assert "prefill_cache_hit" in printed.out


def test_engine_matches_its_own_replay_and_the_openai_kind(clean_url: str) -> None:
    engine = LlamaCppEngine(clean_url)
    openai = OpenAIEngine(clean_url)
    try:
        (prompt,) = engine.tokenize(["The quick brown fox jumps over the lazy dog, again and again."])
        assert prompt[0] == 1  # the server adds BOS to text; the ids we send carry it
        assert openai.tokenize(["The quick brown fox jumps over the lazy dog, again and again."]) == [prompt]
        engine.flush_cache()
        (gen,) = engine.generate([GenerateRequest(prompt, max_new_tokens=6, top_logprobs_num=3)])
        assert len(gen.output_ids) == 6 and gen.output_top is not None
        assert gen.output_top.ids[:, 0].tolist() == list(gen.output_ids)  # greedy: the top-1 is the token
        # The openai kind reads the same numbers from /v1/completions' logprobs.content[] shape.
        (via_openai,) = openai.generate([GenerateRequest(prompt, max_new_tokens=6)])
        assert via_openai.output_ids == gen.output_ids
        np.testing.assert_allclose(via_openai.output_logprobs, gen.output_logprobs, atol=1e-4)
        # The per-position replay scores exactly the asked positions, position `start` being null.
        seq = prompt + gen.output_ids
        start = len(prompt) - 1
        (replay,) = engine.generate([GenerateRequest(seq, max_new_tokens=0, logprob_start_len=start)])
        assert len(replay.input_logprobs) == len(seq) - start and np.isnan(replay.input_logprobs[0])
        np.testing.assert_allclose(replay.input_logprobs[1:], gen.output_logprobs, atol=1e-3)
        info = engine.server_info()
        assert info.model_path is not None and info.model_path.endswith("tiny-llama-f32.gguf")
        assert info.raw.get("cache_flush") == "ok"
    finally:
        engine.close()
        openai.close()


def test_launched_server_that_cannot_flush_is_inconclusive_with_the_fix(llama: LlamaBuild, tmp_path: Path) -> None:
    """``check --engine launch`` with a llama-server template, started without --slot-save-path."""
    config = tmp_path / "precision.yml"
    config.write_text(
        "engine:\n"
        "  kind: llamacpp\n"
        f"  launch: {llama.launch_template()}\n"
        f"  args: {QUIET_ARGS}\n"
        "  health_timeout_s: 120\n"
        "models:\n"
        "  - name: tiny-llama\n"
        f"    path: {llama.model()}\n"
    )
    out = tmp_path / "out"
    checks = "match,prefill_cache_hit"
    code = main(["check", "--engine", "launch", "--config", str(config), "--checks", checks, "--out", str(out), *SMALL])
    result = read_result_json(out)
    by_name = checks_by_name(result)
    assert code == 2, result
    assert by_name["match"]["verdict"] == "pass"  # every request went with cache_prompt: false
    assert by_name["prefill_cache_hit"]["verdict"] == "inconclusive"
    assert "--slot-save-path" in str(by_name["prefill_cache_hit"]["reasons"])


GOLDEN_CONFIG = """
models:
  - name: tiny-llama
    path: tiny-llama
suites:
  tiny-golden:
    checks: [golden]
    golden:
      top_k: 5
      context_depths: [10]
      decode_steps: 2
"""


def test_quantised_model_fails_golden_against_the_f32_baseline(
    llama: LlamaBuild, clean_url: str, tmp_path: Path
) -> None:
    """The "PR" serves the same weights in Q4_0: the consistency helpers cannot see it, golden must."""
    config = tmp_path / "precision.yml"
    config.write_text(GOLDEN_CONFIG)
    store = tmp_path / "store"
    common = ["--config", str(config), "--suite", "tiny-golden"]
    kind = ["--engine-kind", "llamacpp"]
    record = ["baseline", "record", "--engine-url", clean_url, *kind, "--store", str(store), "--reruns", "0"]
    assert main([*record, *common]) == 0
    out = tmp_path / "out"
    with llama_server(llama, llama.model("q4_0"), tmp_path / "logs") as url:
        argv = ["check", "--engine-url", url, *kind, *common, "--baseline-store", str(store), "--out", str(out)]
        code = main([*argv, "--quiet"])
    golden = checks_by_name(read_result_json(out))["golden"]
    assert code == 1, golden
    assert golden["verdict"] == "fail"
    assert "above the per-position limit" in str(golden["reasons"])


def test_host_memory_prompt_cache_is_found_by_the_flush_probe(llama: LlamaBuild, tmp_path: Path) -> None:
    """Erasing works with --slot-save-path, but the default --cache-ram brings a flushed prompt back."""
    (tmp_path / "slots").mkdir()
    with llama_server(llama, llama.model(), tmp_path, f"{QUIET_ARGS} --slot-save-path {tmp_path}/slots") as url:
        engine = LlamaCppEngine(url)
        try:
            reason = engine.cache_unsupported_reason()
        finally:
            engine.close()
    assert reason is not None and "came back from llama-server's host-memory prompt cache" in reason
    assert "--cache-ram 0" in reason


def test_default_kind_against_llama_server_names_the_right_kind(
    clean_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["check", "--engine-url", clean_url, "--checks", "match", "--out", str(tmp_path), *SMALL])
    assert code == 3
    assert "not an SGLang server; for llama.cpp's llama-server use --engine-kind llamacpp" in capsys.readouterr().err
