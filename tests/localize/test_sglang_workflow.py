"""SGLang's documented dumper workflow works on ``precisionbot serve``, and writes what SGLang's own dumper
writes for the same steps.

The steps, from the docstring of SGLang 0.5.23's ``_Dumper`` ("disable at startup and configure via HTTP") and
its server (the ``/dumper/{method}`` route exists when ``DUMPER_SERVER_PORT=reuse``): start with
``DUMPER_ENABLE=0 DUMPER_SERVER_PORT=reuse DUMPER_NON_INTRUSIVE_MODE=all DUMPER_DIR=D``, ``POST
/dumper/configure {"enable": true}``, send one request (``/generate``, three new tokens: one prefill and two
decode forwards), ``POST /dumper/configure {"enable": false}``, one more request (written by neither), then
``get_state``, ``reset`` and ``get_state``. Run twice:

* against ``precisionbot serve`` in a subprocess, the environment and routes for real, no CUDA-graph flag
  (the builtin engine has none to replay, so nothing is skipped);
* in process with SGLang's dumper module from the installed wheel, driven as SGLang's model runner and
  scheduler drive it (the env-built singleton, ``register_non_intrusive_dumper`` at start, ``step()`` after
  every forward, the route's ``_http_manager.handle_request``), around a small torch module stack with the
  builtin model's module names, call signatures and shapes, fed the same batches (the prompt, then each
  generated token; SGLang's warm-up forward first).

Compared, file for file in ``dump_index`` order: the experiment folder's default name (``dump_<time>_<ms><rand>``),
each file name's tags, their order and values (``step``, ``rank``, ``dump_index``, ``name``,
``recompute_status``, ``layer_id``), the ``{"value", "meta"}`` keys, the meta keys (``sglang_parallel_info``'s
too) and that the meta repeats the tags, each value's kind and shape; the values of what both sides compute
from the request alone (``input_ids``, ``positions``, ``seq_lens``, ``rids``, the root's and the embedding's
token ids and each mixer's positions); every route's answer and the ``step`` / ``dump_index`` counters.

What legitimately differs: float values (SGLang's side has other weights; the test is about what is written,
not the numbers); dtypes (the builtin engine keeps an fp32 residual); ``req_pool_indices`` (the builtin names a
request by its first KV slot, SGLang by its pool index); the time in the folder name; ``get_state``'s ``dir``,
and its config fields that the builtin dumper does not implement (grafter, gradients, source patcher), which
are checked to be absent rather than equal.

Stand-ins on SGLang's side, none of them on the path that decides what is written: the package ``__init__``
files and the serving stack the module imports (zmq, the scheduler's IPC helpers, ``get_device``) are not
loaded; the ZMQ fan-out to ranks becomes a direct call for one rank; ``ForwardBatch`` and the other classes
SGLang's plugin recognizes are plain holders of the same fields, so the plugin's own code turns the batch into
the core fields; the topology accessors answer a one-GPU server's values.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from precisionbot.builtin.hooks import MIXER_NAMES
from precisionbot.localize.dumps import parse_filename

pytestmark = pytest.mark.slow

SGLANG_VERSION = "0.5.23"
PROMPT = list(range(300, 312))
NEW_TOKENS = 3
RID = "workflow-0"
DUMPER_ENV = {"DUMPER_ENABLE": "0", "DUMPER_SERVER_PORT": "reuse", "DUMPER_NON_INTRUSIVE_MODE": "all"}
EXP_NAME = re.compile(r"dump_\d{8}_\d{6}_\d{6}")
FROM_REQUEST = {"input_ids", "positions", "seq_lens", "rids", "non_intrusive__inputs.0", "non_intrusive__inputs.1"}
"""Tensors both sides compute from the request alone (plus the embedding's token ids and each mixer's and
layer's positions, matched by pattern below)."""

SGLANG_SIDE = r"""
import json, sys, types, importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
import torch

spec = json.loads(Path(sys.argv[1]).read_text())
root = Path(next(iter(importlib.util.find_spec("sglang").submodule_search_locations)))


def stub(name, path=None, **attrs):
    module = types.ModuleType(name)
    if path is not None:
        module.__path__ = [str(root / path)]
    module.__dict__.update(attrs)
    sys.modules[name] = module


class _Holder:
    pass


@dataclass
class ForwardBatch:
    input_ids: torch.Tensor
    seq_lens: torch.Tensor
    positions: torch.Tensor
    req_pool_indices: torch.Tensor
    rids: list


one_gpu = SimpleNamespace(
    tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, moe_ep_rank=0, moe_ep_size=1, moe_tp_rank=0, moe_tp_size=1,
    moe_dp_rank=0, attn_tp_rank=0, attn_tp_size=1, attn_dp_rank=0, attn_dp_size=1, attn_cp_rank=0, attn_cp_size=1,
)
for name, sub in (("sglang", ""), ("sglang.srt", "srt"), ("sglang.srt.debug_utils", "srt/debug_utils")):
    stub(name, sub)
for name in ("sglang.srt.managers", "sglang.srt.layers", "sglang.srt.model_executor",
             "sglang.srt.layers.layer_boundary", "sglang.srt.layers.layer_boundary.residual"):
    stub(name, name.replace("sglang.", "", 1).replace(".", "/"))
stub("zmq")
stub("sglang.srt.managers.io_struct", sock_recv=None, sock_send=None, wrap_as_pickle=None)
stub("sglang.srt.runtime_context", get_parallel=lambda: one_gpu, get_server_args=lambda: None, get_serving=None)
stub("sglang.srt.utils", get_device=lambda: "cpu")
stub("sglang.srt.distributed")
stub("sglang.srt.layers.dp_attention", is_dp_attention_enabled=lambda: False, get_moe_cp_size=lambda: 1)
stub("sglang.srt.layers.logits_processor", LogitsProcessorOutput=type("LogitsProcessorOutput", (_Holder,), {}))
stub("sglang.srt.model_executor.forward_batch_info", ForwardBatch=ForwardBatch,
     PPProxyTensors=type("PPProxyTensors", (_Holder,), {}))
stub("sglang.srt.layers.layer_boundary.output", UnreducedOutput=type("UnreducedOutput", (_Holder,), {}))
stub("sglang.srt.layers.layer_boundary.residual.stream", OwedOutput=type("OwedOutput", (_Holder,), {}))

from sglang.srt.debug_utils import dumper as dumper_module


class _OneRank:
    def __init__(self, handler):
        self._handler = handler

    def __getattr__(self, method):
        return lambda *args, **kwargs: [getattr(self._handler, method)(*args, **kwargs)]


dumper_module._create_zmq_rpc_broadcast = lambda handler, timeout_seconds=60: _OneRank(handler)
dumper = dumper_module.dumper
d, vocab = spec["d_model"], spec["vocab_size"]
torch.manual_seed(0)


class Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Mixer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d, d) / d**0.5)

    def forward(self, positions, hidden):
        return hidden @ self.weight


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Parameter(torch.randn(d, 2 * d) / d**0.5)
        self.down = torch.nn.Parameter(torch.randn(2 * d, d) / d**0.5)

    def forward(self, x):
        return torch.nn.functional.silu(x @ self.up) @ self.down


class Layer(torch.nn.Module):
    def __init__(self, mixer):
        super().__init__()
        self.mixer = mixer
        self.input_layernorm = Norm()
        self.add_module(mixer, Mixer())
        self.post_attention_layernorm = Norm()
        self.mlp = Mlp()

    def forward(self, positions, hidden):
        h = hidden + getattr(self, self.mixer)(positions, self.input_layernorm(hidden))
        return h + self.mlp(self.post_attention_layernorm(h))


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(vocab, d) / d**0.5)

    def forward(self, x):
        return x @ self.weight.T


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(Layer(m) for m in spec["mixers"])
        self.norm = Norm()


class CausalLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()
        self.lm_head = Head()

    def forward(self, input_ids, positions, forward_batch):
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(positions, x)
        return self.lm_head(self.model.norm(x))


model = CausalLM()
if dumper.may_enable:  # ModelRunner.load_model
    dumper.register_non_intrusive_dumper(model)


def forward(ids, start, rid):
    n = len(ids)
    positions = torch.arange(start, start + n)
    batch = ForwardBatch(torch.tensor(ids), torch.tensor([start + n]), positions, torch.tensor([0]), [rid])
    with torch.inference_mode():
        model.forward(batch.input_ids, positions, batch)
    if dumper.may_enable:  # ModelRunner.forward
        dumper.step()


def route(method, body):  # Scheduler.handle_dumper_control, flattened as the HTTP route does
    return list(dumper._http_manager.handle_request(method=method, body=body))


def generate(prompt, outputs, rid):
    forward(prompt, 0, rid)
    for k, token in enumerate(outputs[:-1]):
        forward([token], len(prompt) + k, rid)


replies = {}
forward([11, 12, 13, 14, 15], 0, "warmup")  # the server's warm-up request, before anyone configures
replies["configure_on"] = route("configure", {"enable": True})
generate(spec["prompt"], spec["outputs"], spec["rid"])
replies["configure_off"] = route("configure", {"enable": False})
generate(spec["prompt"][:4], spec["outputs"][:1], "after")
replies["state"] = route("get_state", {})
replies["reset"] = route("reset", {})
replies["state_after_reset"] = route("get_state", {})
Path(sys.argv[2]).write_text(json.dumps(replies))
"""


def _require() -> None:
    if importlib.util.find_spec("sglang") is None:
        message = f"needs sglang (scripts/test installs sglang=={SGLANG_VERSION} --no-deps)"
        if os.environ.get("PRECISIONBOT_REQUIRE_SGLANG"):
            pytest.fail(message)
        pytest.skip(message)


def _body(ids: list[int], new: int, rid: str) -> dict[str, Any]:
    sampling = {"max_new_tokens": new, "temperature": 0.0, "ignore_eos": True}
    return {"input_ids": ids, "sampling_params": sampling, "rid": rid}


def _run_serve(folder: Path) -> tuple[dict[str, Any], dict[str, Any], list[int]]:
    """SGLang's steps against ``precisionbot serve``: (replies, /server_info, the generated tokens)."""
    env = {**os.environ, **DUMPER_ENV, "DUMPER_DIR": str(folder)}
    cmd = [sys.executable, "-m", "precisionbot", "serve", "--port", "0"]
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()  # printed once /health answers
            if not url.startswith("http://"):
                proc.kill()
                pytest.fail(f"precisionbot serve did not start: {proc.communicate(timeout=30)[1][-2000:]}")
            with httpx.Client(base_url=url, timeout=120) as client:

                def route(method: str, body: dict[str, Any]) -> Any:
                    response = client.post(f"/dumper/{method}", json=body)
                    assert response.status_code == 200, response.text
                    return response.json()

                info = client.get("/server_info").json()
                replies = {"configure_on": route("configure", {"enable": True})}
                answer = client.post("/generate", json=_body(PROMPT, NEW_TOKENS, RID))
                assert answer.status_code == 200, answer.text
                replies["configure_off"] = route("configure", {"enable": False})
                assert client.post("/generate", json=_body(PROMPT[:4], 1, "after")).status_code == 200
                replies["state"] = route("get_state", {})
                replies["reset"] = route("reset", {})
                replies["state_after_reset"] = route("get_state", {})
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return replies, info, answer.json()["output_ids"]


def _run_sglang(tmp_path: Path, folder: Path, info: dict[str, Any], outputs: list[int]) -> dict[str, Any]:
    config = info["model_config"]
    spec = {
        "d_model": config["d_model"],
        "vocab_size": config["vocab_size"],
        "mixers": [MIXER_NAMES[kind] for kind in config["layer_types"]],
        "prompt": PROMPT,
        "outputs": outputs,
        "rid": RID,
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "sglang_side.py").write_text(SGLANG_SIDE)
    replies = tmp_path / "replies.json"
    env = {**os.environ, **DUMPER_ENV, "DUMPER_DIR": str(folder)}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "sglang_side.py"), str(tmp_path / "spec.json"), str(replies)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(replies.read_text())
    return result


def _experiment(folder: Path) -> Path:
    """The one experiment folder the default ``exp_name`` created (its name holds the time, so not compared)."""
    found = list(folder.iterdir())
    assert len(found) == 1 and EXP_NAME.fullmatch(found[0].name), found
    return found[0]


def _files(folder: Path) -> list[tuple[list[str], dict[str, str], dict[str, Any]]]:
    """Every file as (its tag keys in order, its tags, its loaded content), in ``dump_index`` order."""
    out = []
    for path in folder.iterdir():
        stem = path.name.removesuffix(".pt")
        keys = [part.partition("=")[0] for part in stem.split("___")]
        out.append((keys, parse_filename(path.name), torch.load(path, weights_only=True)))
    return sorted(out, key=lambda f: int(f[1]["dump_index"]))


def _shape(value: Any) -> tuple[str, Any]:
    if isinstance(value, torch.Tensor):
        return "tensor", tuple(value.shape)
    return type(value).__name__, len(value) if isinstance(value, (list, tuple)) else None


def _from_request(name: str) -> bool:
    """Tensors that do not depend on the weights: token ids and positions."""
    return name in FROM_REQUEST or bool(
        re.fullmatch(
            r"non_intrusive__model\.(embed_tokens\.inputs\.0|layers\.\d+(\.(self|linear)_attn)?\.inputs\.0)", name
        )
    )


def test_sglang_documented_workflow_writes_on_serve_what_sglangs_dumper_writes(tmp_path: Path) -> None:
    _require()
    replies_b, info, outputs = _run_serve(tmp_path / "builtin")
    assert info["disable_cuda_graph"] is False and info["disable_prefill_cuda_graph"] is False  # as started
    replies_s = _run_sglang(tmp_path, tmp_path / "sglang", info, outputs)

    builtin, sglang = _files(_experiment(tmp_path / "builtin")), _files(_experiment(tmp_path / "sglang"))
    assert len(builtin) > 0, "the documented workflow wrote nothing on serve"
    assert [f[1] for f in builtin] == [f[1] for f in sglang]  # names, steps, dump_index order, layer_id
    assert {f[1]["step"] for f in builtin} == {str(s) for s in range(NEW_TOKENS)}  # each forward, graphed or not
    for (keys_b, tags, data_b), (keys_s, _, data_s) in zip(builtin, sglang, strict=True):
        where = tags["name"], tags["step"]
        assert keys_b == keys_s, where
        assert list(data_b) == list(data_s) == ["value", "meta"], where
        meta_b, meta_s = data_b["meta"], data_s["meta"]
        assert list(meta_b) == list(meta_s), where
        assert meta_b["sglang_parallel_info"] == meta_s["sglang_parallel_info"], where
        assert {k: str(meta_b[k]) for k in tags} == tags == {k: str(meta_s[k]) for k in tags}, where
        assert _shape(data_b["value"]) == _shape(data_s["value"]), where
        if _from_request(tags["name"]):
            value_b, value_s = data_b["value"], data_s["value"]
            if isinstance(value_b, torch.Tensor):
                value_b, value_s = value_b.tolist(), value_s.tolist()
            assert value_b == value_s, where

    for key in ("configure_on", "configure_off", "reset"):
        assert replies_b[key] == replies_s[key] == [{}], key
    (state_b,), (state_s,) = replies_b["state"], replies_s["state"]
    assert state_b["step"] == state_s["step"] == NEW_TOKENS  # forwards run while enabled
    assert state_b["dump_index"] == state_s["dump_index"] == len(builtin)  # files written
    config_b, config_s = state_b["config"], state_s["config"]
    assert set(config_b) < set(config_s)
    unshared = {"dir", "exp_name"}  # each side's own DUMPER_DIR, and the default name's time
    for side, config in (("builtin", config_b), ("sglang", config_s)):
        assert config["exp_name"] == _experiment(tmp_path / side).name
    assert {k: v for k, v in config_b.items() if k not in unshared} == {
        k: config_s[k] for k in config_b if k not in unshared
    }
    after_b, after_s = replies_b["state_after_reset"][0], replies_s["state_after_reset"][0]
    assert (after_b["step"], after_b["dump_index"]) == (after_s["step"], after_s["dump_index"]) == (0, 0)
