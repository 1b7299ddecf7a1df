"""The builtin engine speaks SGLang 0.5.23's dumper: DUMPER_* variables, POST /dumper/*, SGLang's file names and
``{"value", "meta"}`` files, hooks on every module in SGLang's firing order, and SGLang's silent failures (core
mode, enable at start, no routes without ``reuse``, reset drops the hooks). Not the CUDA-graph one: the builtin
engine has no graphs, so the flags change what ``/server_info`` reports and nothing else. SGLang's own dumper
class writes the same files for the same steps: tests/localize/test_sglang_workflow.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import torch

from precisionbot.builtin.dumper_config import DumperConfig, RuntimeFlags, config_from_env
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.server import BuiltinServer
from precisionbot.errors import ConfigError
from precisionbot.localize.dumps import parse_filename

PROMPT = list(range(40, 90))
TINY = EngineOptions(preset="tiny")


@contextmanager
def _server(
    tmp_path: Path, options: EngineOptions = TINY, graphs_off: bool = True, **dumper: object
) -> Iterator[httpx.Client]:
    config = DumperConfig(**{"server_port": "reuse", "non_intrusive_mode": "all", "dir": str(tmp_path), **dumper})  # type: ignore[arg-type]
    runtime = RuntimeFlags(graphs_off, graphs_off, config)
    with BuiltinServer(options, flags=runtime) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def _generate(client: httpx.Client, ids: list[int], new: int = 3) -> None:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new, "temperature": 0.0, "ignore_eos": True}}
    assert client.post("/generate", json=body).status_code == 200


def _names(folder: Path) -> list[str]:
    return [parse_filename(p.name)["name"] for p in folder.iterdir()] if folder.exists() else []


def test_env_is_read_as_sglang_reads_it() -> None:
    config = config_from_env(
        {"DUMPER_ENABLE": "true", "DUMPER_SERVER_PORT": "reuse", "DUMPER_DIR": "/x", "DUMPER_EXP_NAME": " "}
    )
    assert config.enable and config.routes and config.dir == "/x" and config.exp_name is None  # blank = default
    assert DumperConfig().non_intrusive_mode == "core" and not DumperConfig().armed  # SGLang's defaults
    assert not config_from_env({"DUMPER_ENABLE": "yes"}).enable  # only 1/true are true, as in SGLang
    with pytest.raises(ConfigError, match="DUMPER_COLLECTIVE_TIMEOUT must be an integer"):
        config_from_env({"DUMPER_COLLECTIVE_TIMEOUT": "soon"})
    with pytest.raises(ConfigError, match="DUMPER_FILTER is not supported"):
        config_from_env({"DUMPER_FILTER": "layer_id == 1"})
    with pytest.raises(ConfigError, match="no standalone dumper server; use 'reuse'"):
        config_from_env({"DUMPER_SERVER_PORT": "40000"})


def test_routes_files_and_every_module_of_the_hybrid_model(tmp_path: Path) -> None:
    with _server(tmp_path, EngineOptions()) as client:
        state = client.post("/dumper/get_state", json={}).json()
        assert state[0]["dump_index"] == 0 and state[0]["config"]["non_intrusive_mode"] == "all"
        assert client.post("/dumper/configure", json={"enable": True, "exp_name": "e"}).json() == [{}]
        _generate(client, PROMPT, new=2)  # one prefill and one decode forward
        assert client.post("/dumper/configure", json={"enable": False}).json() == [{}]
        state = client.post("/dumper/get_state", json={}).json()[0]
        assert state["step"] == 2 and state["dump_index"] == len(list((tmp_path / "e").iterdir()))
        bad = client.post("/dumper/configure", json={"enable": "yes"})
        assert bad.status_code == 400 and "expected bool" in bad.json()["error"][0]
        assert client.post("/dumper/nope", json={}).status_code == 400
        assert client.post("/dumper/configure", content=b"[1]").json() == {
            "error": ["Request body must be a JSON object."]
        }
    files = sorted((tmp_path / "e").iterdir(), key=lambda p: int(parse_filename(p.name)["dump_index"]))
    first = files[0].name
    assert first == "step=0___rank=0___dump_index=1___name=non_intrusive__inputs.0___recompute_status=disabled.pt"
    tags = parse_filename(next(p.name for p in files if "layers.1.linear_attn.output" in p.name))
    assert tags["layer_id"] == "1" and tags["recompute_status"] == "disabled"
    saved = torch.load(files[0], weights_only=True)
    assert saved["meta"]["name"] == "non_intrusive__inputs.0" and saved["meta"]["world_size"] == 1
    assert saved["value"].tolist() == PROMPT
    names = set(_names(tmp_path / "e"))
    for module in (
        "model.embed_tokens", "model.layers.0.input_layernorm", "model.layers.0.self_attn",
        "model.layers.1.linear_attn", "model.layers.2.self_attn", "model.layers.2.post_attention_layernorm",
        "model.layers.2.mlp", "model.layers.2", "model.norm", "lm_head",
    ):  # fmt: skip
        assert f"non_intrusive__{module}.output" in names, module
    assert {"input_ids", "positions", "seq_lens", "req_pool_indices", "rids"} <= names
    decode_out = next(p for p in files if "step=1___" in p.name and "lm_head.output" in p.name)
    assert torch.load(decode_out, weights_only=True)["value"].shape[0] == 1  # real rows only, no tile padding


def test_core_mode_writes_no_module_tensor_and_no_error(tmp_path: Path) -> None:
    with _server(tmp_path, non_intrusive_mode="core") as client:
        client.post("/dumper/configure", json={"enable": True, "exp_name": "e", "non_intrusive_mode": "all"})
        _generate(client, PROMPT)
    # Configuring "all" later changes get_state, not the hooks (registered at start with "core").
    assert set(_names(tmp_path / "e")) == {"input_ids", "positions", "seq_lens", "req_pool_indices", "rids"}


def test_enable_at_start_dumps_the_warmup(tmp_path: Path) -> None:
    with _server(tmp_path, enable=True, exp_name="e") as client:
        assert client.post("/dumper/get_state", json={}).json()[0]["step"] >= 1
    assert "non_intrusive__lm_head.output" in _names(tmp_path / "e")


def test_no_reuse_no_routes(tmp_path: Path) -> None:
    with _server(tmp_path, server_port="-1") as client:
        assert client.post("/dumper/get_state", json={}).status_code == 404


def test_without_the_cuda_graph_flags_every_forward_still_dumps(tmp_path: Path) -> None:
    # The sequence: routes, "all" mode, no --disable-*cuda-graph. The builtin engine has no graphs to
    # replay, so every forward runs its hooks; /server_info still reports the flags as given (localize's guard).
    with _server(tmp_path, graphs_off=False) as client:
        info = client.get("/server_info").json()
        assert info["disable_cuda_graph"] is False and info["disable_prefill_cuda_graph"] is False
        client.post("/dumper/configure", json={"enable": True, "exp_name": "e"})
        _generate(client, PROMPT)  # one prefill, two decodes
        state = client.post("/dumper/get_state", json={}).json()[0]
    files = list((tmp_path / "e").iterdir())
    assert state["step"] == 3 and state["dump_index"] == len(files) > 0
    steps = {parse_filename(p.name)["step"] for p in files if "lm_head.output" in p.name}
    assert steps == {"0", "1", "2"}


def test_files_are_numbered_in_sglang_hook_order(tmp_path: Path) -> None:
    # SGLang's pre-hook writes a decoder layer's inputs on entry, before its children; its output comes last.
    with _server(tmp_path) as client:
        client.post("/dumper/configure", json={"enable": True, "exp_name": "e"})
        _generate(client, PROMPT, new=1)
    tags = sorted((parse_filename(p.name) for p in (tmp_path / "e").iterdir()), key=lambda t: int(t["dump_index"]))
    names = [t["name"].removeprefix("non_intrusive__") for t in tags]
    assert [int(t["dump_index"]) for t in tags] == list(range(1, len(tags) + 1))
    layer = [n for n in names if n.startswith("model.layers.0")]
    assert layer[:2] == ["model.layers.0.inputs.0", "model.layers.0.inputs.1"]
    assert layer[2] == "model.layers.0.input_layernorm.inputs.0" and layer[-1] == "model.layers.0.output"
    assert names[:2] == ["inputs.0", "inputs.1"] and names[-1] == "output"
    meta = torch.load(next((tmp_path / "e").iterdir()), weights_only=True)["meta"]
    assert meta["sglang_parallel_info"]["tp_size"] == 1 and "tokenizer_path" not in meta


def test_reset_removes_the_hooks(tmp_path: Path) -> None:
    with _server(tmp_path) as client:
        client.post("/dumper/reset", json={})
        client.post("/dumper/configure", json={"enable": True, "exp_name": "e"})
        _generate(client, PROMPT)
        assert client.post("/dumper/get_state", json={}).json()[0]["step"] == 3
    assert not (tmp_path / "e").exists()  # the core fields came from the hooks too
