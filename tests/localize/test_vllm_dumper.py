"""The vLLM dumper plugin's pure parts: SGLang's module names, its file names, the ``/dumper/*`` state, what arms
it, and that localize's reader reads what it writes. The plugin inside a real vLLM server is
tests/engines/test_vllm_localize.py."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from precisionbot.engines import vllm_plugin
from precisionbot.engines.vllm_dumper import (
    PLUGIN_NAME,
    DumperState,
    armed_config,
    file_name,
    layer_id,
    sglang_module_name,
    tensor_name,
)
from precisionbot.errors import ConfigError
from precisionbot.localize.dumps import parse_filename, read_capture

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("vllm_name", "sglang"),
    [
        ("model.embed_tokens", "model.embed_tokens"),
        ("model.norm", "model.norm"),
        ("model.layers.0", "model.layers.0"),
        ("model.layers.11.self_attn", "model.layers.11.self_attn"),
        ("model.layers.1.mlp", "model.layers.1.mlp"),
        ("model.layers.1.input_layernorm", "model.layers.1.input_layernorm"),
        ("model.layers.1.post_attention_layernorm", "model.layers.1.post_attention_layernorm"),
        ("model.layers.2.linear_attn", "model.layers.2.linear_attn"),
        ("language_model.model.layers.3.mlp", "model.layers.3.mlp"),
        ("language_model.model.embed_tokens", "model.embed_tokens"),
        ("", None),  # the root: its forward writes input_ids and positions, not a module tensor
        ("model", None),
        ("model.layers", None),
        ("model.layers.1.mlp.down_proj", None),
        ("model.layers.1.self_attn.attn", None),
        ("model.layers.1.self_attn.rotary_emb", None),
        ("model.layers.x.mlp", None),
        ("lm_head", None),
        ("logits_processor", None),
        ("vision_tower.model.layers.0.mlp", None),
    ],
)
def test_sglang_module_name(vllm_name: str, sglang: str | None) -> None:
    assert sglang_module_name(vllm_name) == sglang


@pytest.mark.parametrize(
    ("module", "part", "layer"),
    [
        ("model.layers.3.mlp", "inputs.0", 3),
        ("model.layers.3.mlp", "output", 3),
        ("model.layers.3", "inputs.1", 3),
        ("model.layers.3", "output.0", None),  # SGLang clears a layer's id before the hook that dumps its output
        ("model.embed_tokens", "output", None),
        ("model.norm", "output.0", None),
    ],
)
def test_layer_id(module: str, part: str, layer: int | None) -> None:
    assert layer_id(module, part) == layer


def test_file_names_are_sglangs() -> None:
    name = file_name(4, 0, 17, tensor_name("model.layers.1.mlp", "output"), 1)
    assert name == (
        "step=4___rank=0___dump_index=17___name=non_intrusive__model.layers.1.mlp.output___"
        "recompute_status=disabled___layer_id=1.pt"
    )
    assert parse_filename(name) == {"step": "4", "rank": "0", "dump_index": "17", "recompute_status": "disabled",
                                    "name": "non_intrusive__model.layers.1.mlp.output", "layer_id": "1"}  # fmt: skip
    assert (
        file_name(0, 2, 1, "positions", None)
        == "step=0___rank=2___dump_index=1___name=positions___recompute_status=disabled.pt"
    )


def _state(**config: Any) -> DumperState:
    base = armed_config({"DUMPER_SERVER_PORT": "reuse", "DUMPER_NON_INTRUSIVE_MODE": "all"})
    assert base is not None
    state = DumperState(base, rank=0, world_size=1, facts={"enforce_eager": True})
    if config:
        assert state.handle("configure", config) == {}
    return state


def _write(state: DumperState, name: str, value: torch.Tensor, layer: int | None = None) -> None:
    """What the plugin's worker does with each tensor."""
    pending = state.next_file(name, layer)
    if pending is None:
        return
    Path(pending.exp_dir).mkdir(parents=True, exist_ok=True)
    torch.save({"value": value, "meta": pending.meta}, Path(pending.exp_dir) / pending.name)


def test_localize_reads_what_the_state_names(tmp_path: Path) -> None:
    state = _state(enable=True, dir=str(tmp_path), exp_name="run")
    hidden = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for _ in range(2):  # two forwards: a prefill of 3 tokens, then one decode step
        assert state.begin_forward()
        rows = hidden.shape[0]
        _write(state, "input_ids", torch.tensor([5, 6, 7][:rows]))
        _write(state, "positions", torch.arange(rows) if rows == 3 else torch.tensor([3]))
        _write(state, tensor_name("model.embed_tokens", "output"), hidden)
        _write(state, tensor_name("model.layers.0.mlp", "inputs.0"), hidden, 0)
        _write(state, tensor_name("model.layers.0.mlp", "output"), hidden * 2, 0)
        state.end_forward()
        hidden = hidden[:1]
    capture = read_capture(tmp_path / "run", "vllm")
    assert [s.step for s in capture.steps] == [0, 1]
    assert capture.steps[0].positions == (0, 1, 2) and capture.steps[1].positions == (3,)
    assert capture.steps[0].input_ids == (5, 6, 7)
    assert set(capture.steps[0].tensors) == {"model.embed_tokens.output", "model.layers.0.mlp.inputs.0",
                                             "model.layers.0.mlp.output"}  # fmt: skip
    order = capture.steps[1].order
    assert order["model.layers.0.mlp.inputs.0"] < order["model.layers.0.mlp.output"]
    first = next((tmp_path / "run").glob("*name=non_intrusive__model.layers.0.mlp.output*"))
    meta = torch.load(first, weights_only=True)["meta"]
    assert meta["layer_id"] == 0 and meta["world_size"] == 1 and meta["rank"] == 0


def test_configure_takes_effect_at_the_next_forward(tmp_path: Path) -> None:
    state = _state(dir=str(tmp_path), exp_name="x")
    assert not state.begin_forward()
    state.handle("configure", {"enable": True})
    assert state.next_file("positions", None) is None  # the running forward keeps the configuration it began with
    state.end_forward()
    assert state.step == 0  # a forward that wrote nothing is not a step
    assert state.begin_forward()
    pending = state.next_file("positions", None)
    assert pending is not None and pending.exp_dir == f"{tmp_path}/x" and pending.meta["dump_index"] == 1


def test_an_unnamed_experiment_gets_sglangs_default_name() -> None:
    state = _state(enable=True)
    state.begin_forward()
    exp = state.get_state()["config"]["exp_name"]
    assert isinstance(exp, str) and exp.startswith("dump_") and len(exp) == len("dump_20250101_000000_000000")


def test_cleanup_previous_is_asked_once(tmp_path: Path) -> None:
    state = _state(enable=True, dir=str(tmp_path), exp_name="x", cleanup_previous=True)
    state.begin_forward()
    first, second = state.next_file("a", None), state.next_file("b", None)
    assert first is not None and first.cleanup == (f"{tmp_path}/dump_*", f"{tmp_path}/x")
    assert second is not None and second.cleanup == ()


@pytest.mark.parametrize(
    ("method", "body", "error"),
    [
        ("configure", {"no_such_field": 1}, "unknown field 'no_such_field'"),
        ("configure", {"enable": "yes"}, "DumperConfig.enable: expected bool, got str"),
        ("configure", {"filter": "name == 'x'"}, "filter"),
        ("configure", [], "must be a JSON object"),
        ("dump", {}, "Unknown dumper control method: 'dump'"),
    ],
)
def test_a_bad_call_answers_an_error(method: str, body: Any, error: str) -> None:
    answer = _state().handle(method, body)
    assert set(answer) == {"error"} and error in answer["error"]


def test_get_state_and_reset() -> None:
    state = _state(enable=True, dir="/tmp/d", exp_name="x")
    state.begin_forward()
    state.next_file("positions", None)
    state.end_forward()
    got = state.get_state()
    assert got["config"]["enable"] is True and got["config"]["non_intrusive_mode"] == "all"
    assert (got["dump_index"], got["step"], got["vllm"]) == (1, 1, {"enforce_eager": True})
    assert state.handle("reset", {}) == {} and state.reset_requested
    assert (state.dump_index, state.step) == (0, 0)


def test_what_arms_the_dumper() -> None:
    assert armed_config({}) is None
    assert armed_config({"DUMPER_NON_INTRUSIVE_MODE": "all", "DUMPER_ENABLE": "0"}) is None
    reuse = armed_config({"DUMPER_SERVER_PORT": "reuse"})
    assert reuse is not None and reuse.routes and not reuse.enable
    enabled = armed_config({"DUMPER_ENABLE": "1"})
    assert enabled is not None and enabled.enable and not enabled.routes
    with pytest.raises(ConfigError, match="DUMPER_SERVER_PORT"):
        armed_config({"DUMPER_SERVER_PORT": "sometimes"})


def test_register_does_nothing_unless_armed(monkeypatch: pytest.MonkeyPatch) -> None:
    """precisionbot's venv has no vLLM: an armed register() reaches for it, an unarmed one must not."""
    for name in ("DUMPER_ENABLE", "DUMPER_SERVER_PORT"):
        monkeypatch.delenv(name, raising=False)
    vllm_plugin.register()
    assert "vllm" not in sys.modules
    monkeypatch.setenv("DUMPER_SERVER_PORT", "reuse")
    with pytest.raises(ModuleNotFoundError, match="vllm"):
        vllm_plugin.register()


class _App:
    def __init__(self) -> None:
        self.router = self
        self.routes: list[tuple[str, list[str]]] = []

    def add_route(self, path: str, endpoint: Any, methods: list[str]) -> None:
        self.routes.append((path, methods))


@pytest.mark.parametrize(
    ("env", "routes"),
    [
        ({}, []),
        ({"DUMPER_ENABLE": "1"}, []),  # armed, but SGLang registers the routes only for the literal "reuse"
        ({"DUMPER_SERVER_PORT": "reuse"}, [("/dumper/{method}", ["POST"])]),
    ],
)
def test_the_routes_exist_only_with_reuse(
    env: dict[str, str], routes: list[tuple[str, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DUMPER_ENABLE", "DUMPER_SERVER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    app = _App()
    vllm_plugin.DumperEndpoints().attach_router(app)
    assert app.routes == routes


def test_pyproject_declares_both_entry_points() -> None:
    """vLLM finds the plugin by these entry points; each must name a callable that exists."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    for group in ("vllm.general_plugins", "vllm.endpoint_plugins"):
        target = groups[group][PLUGIN_NAME]
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), (group, target)
    assert vllm_plugin.DumperEndpoints.name == PLUGIN_NAME
