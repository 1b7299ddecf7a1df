"""localize's guards for a vLLM server with precisionbot's dumper plugin: refusals that name vLLM's settings,
read from the plugin's ``get_state`` (vLLM's ``/server_info`` says nothing of them), and SGLang's unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from precisionbot.localize.guards import (
    REQUIRED_ENV,
    deterministic_refusal,
    engine_kind,
    launch_env,
    launch_refusals,
    required_flags,
    server_refusals,
)

VLLM_INFO = {"model": "tiny", "version": "0.32.0", "prefix_cache_rules": "vllm", "block_size": 128}
"""What ``VLLMEngine.server_info().raw`` holds."""
GOOD_FACTS = {"enforce_eager": True, "compilation_mode": 0, "cudagraph_mode": "NONE", "hooked_modules": 12}


def _state(mode: str = "all", enable: bool = False, **facts: Any) -> dict[str, Any]:
    return {"config": {"enable": enable, "non_intrusive_mode": mode}, "dump_index": 0,
            "vllm": {**GOOD_FACTS, **facts}}  # fmt: skip


def test_a_ready_vllm_server_is_not_refused() -> None:
    assert server_refusals(VLLM_INFO, _state(), kind="vllm") == []
    assert server_refusals(VLLM_INFO, _state()) == []  # the kind read off VLLMEngine's server_info


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (None, ["DUMPER_SERVER_PORT=reuse", "404", "VLLM_PLUGINS=precisionbot_dumper", "pip install --no-deps"]),
        (_state(enable=True), ["DUMPER_ENABLE=0", "already enabled"]),
        (_state(mode="core"), ["DUMPER_NON_INTRUSIVE_MODE=all", "'core'"]),
        (_state(enforce_eager=False), ["--enforce-eager", "enforce_eager=False", "CUDA graphs"]),
        (_state(compilation_mode=3), ["--enforce-eager", "compilation_mode=3", "torch.compile"]),
        (_state(hooked_modules=0), ["hooked no module", "sglang_module_name"]),
        ({"config": {"enable": False, "non_intrusive_mode": "all"}}, ["no 'vllm' object", "VLLM_PLUGINS"]),
    ],
)
def test_each_wrong_setting_is_refused_by_name(state: dict[str, Any] | None, words: list[str]) -> None:
    (refusal,) = server_refusals(VLLM_INFO, state, kind="vllm")
    for word in words:
        assert word in refusal, (word, refusal)
    assert "--disable-cuda-graph" not in refusal  # SGLang's flags mean nothing to vLLM


def test_sglang_servers_keep_sglangs_refusals() -> None:
    sglang = {"disable_cuda_graph": True, "disable_prefill_cuda_graph": False}
    (refusal,) = server_refusals(sglang, {"config": {"enable": False, "non_intrusive_mode": "all"}})
    assert refusal.startswith("--disable-prefill-cuda-graph")
    assert engine_kind(sglang, None) == "sglang" and engine_kind(VLLM_INFO, "sglang") == "sglang"


def test_helper_paths_are_refused_on_vllm_by_name() -> None:
    refusal = deterministic_refusal(VLLM_INFO)
    assert refusal is not None and "--enable-deterministic-inference" in refusal and "--path golden" in refusal
    # SGLang with the mode on is not refused, whatever kind inference says.
    assert deterministic_refusal({"enable_deterministic_inference": True}) is None


def test_a_vllm_launch_needs_enforce_eager_and_names_the_plugin() -> None:
    env = launch_env("vllm", {"VLLM_PLUGINS": "my_kernels"})
    assert env == {**REQUIRED_ENV, "VLLM_PLUGINS": "my_kernels,precisionbot_dumper"}
    assert launch_env("vllm", {})["VLLM_PLUGINS"] == "precisionbot_dumper"
    assert launch_env("sglang", {"VLLM_PLUGINS": "x"}) == REQUIRED_ENV
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    (refusal,) = launch_refusals(argv, env, "vllm")
    assert refusal.startswith("--enforce-eager")
    assert launch_refusals([*argv, "--enforce-eager"], env, "vllm") == []
    assert required_flags("sglang") == ("--disable-cuda-graph", "--disable-prefill-cuda-graph")
