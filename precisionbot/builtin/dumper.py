"""SGLang's tensor dumper, spoken by the builtin engine: same environment, routes, file names and file format.

SGLang 0.5.23 (``sglang.srt.debug_utils.dumper``), as this module reproduces it:

* configuration from ``DUMPER_<FIELD>`` variables (``DUMPER_ENABLE``, ``DUMPER_DIR``, ``DUMPER_EXP_NAME``,
  ``DUMPER_SERVER_PORT``, ``DUMPER_NON_INTRUSIVE_MODE``, ...); a blank value is the default, a boolean is
  true for ``1``/``true``;
* the dumper is *armed* when ``enable`` is on or a server port is set: it then steps after every forward
  and, unless ``non_intrusive_mode`` is ``off``, hooks every module;
* ``POST /dumper/{configure,get_state,reset}`` exist only when ``DUMPER_SERVER_PORT`` is the literal
  ``reuse`` (SGLang registers the routes on its own port for that exact value); each answers a JSON list
  with one object per rank; an error is HTTP 400 ``{"error": [message]}``;
* a file per tensor, ``{dir}/{exp_name}/step=S___rank=R___dump_index=I___name=N___recompute_status=disabled``
  plus ``___layer_id=L`` inside a decoder layer, holding ``torch.save({"value": tensor, "meta": {...}})``; the
  meta holds the file name's tags, ``world_rank``, ``world_size`` and ``sglang_parallel_info`` (what SGLang's
  plugin reads off a one-GPU server), and no ``tokenizer_path`` (SGLang omits it when the server has none, as
  the builtin engine's ``/server_info`` says);
* ``step`` counts forwards run while enabled (a file carries the count before its forward), ``dump_index``
  counts files; ``configure`` changes neither, ``reset`` zeroes both;
* files are numbered in the order SGLang's hooks fire: a module's inputs when it is entered, its output when
  it returns, so a decoder layer's inputs come before its children's tensors and its output after them;
* in ``all`` mode a module's tensors are named ``non_intrusive__<module>.inputs.<i>`` and
  ``non_intrusive__<module>.output``; the forward batch's *core* fields (``input_ids``, ``positions``,
  ``seq_lens``, ``req_pool_indices``, ``rids``) are written under their own names in both ``core`` and
  ``all``.

Its silent failures, kept on purpose so that precisionbot's guards are tested against the real behaviour:

* ``core`` (the default) writes only the core fields: no module tensor and no error;
* ``enable`` at start dumps every forward, the start-up warm-up included (``BuiltinServer`` sends SGLang's
  warm-up request when the dumper is armed);
* without ``DUMPER_SERVER_PORT=reuse`` the routes answer 404;
* ``reset`` removes the module hooks: later dumps hold no tensor at all (the core fields come from the root's
  hook too);
* ``configure`` of ``non_intrusive_mode`` after start changes what ``get_state`` reports but not the
  hooks, which keep the mode they were registered with.

One of SGLang's is not kept: an SGLang server on CUDA replays decode batches (and, at 0.5.23's defaults,
prefill batches within its captured sizes, as a breakable graph) from CUDA graphs, where no Python and so no
hook runs, unless started with ``--disable-cuda-graph`` / ``--disable-prefill-cuda-graph``. The builtin
engine has no CUDA graphs, so every forward runs the hooks whatever those flags say: SGLang's documented
workflow (``DUMPER_ENABLE=0 DUMPER_SERVER_PORT=reuse DUMPER_NON_INTRUSIVE_MODE=all``, ``configure`` enable,
a request) writes what SGLang's dumper writes where no graph is replayed (tests/localize/
test_sglang_workflow.py compares the two). The flags are still reported in ``/server_info`` as given, for
localize's guard against a real server.

Not supported (an error naming the field, never a silent no-op): ``filter`` (SGLang evaluates it as Python,
which an HTTP route of ours will not do) and the grafter, gradient and source-patcher fields.
"""

from __future__ import annotations

import random
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from precisionbot.builtin import hooks
from precisionbot.builtin.dumper_config import (
    EXP_NAME_PREFIX,
    NAME_PREFIX,
    DumperConfig,
    DumperRequestError,
    configured,
)
from precisionbot.builtin.hooks import BatchTensors

PARALLEL_INFO = {
    "tp_rank": 0, "tp_size": 1, "pp_rank": 0, "pp_size": 1, "moe_ep_rank": 0, "moe_ep_size": 1,
    "moe_tp_rank": 0, "moe_tp_size": 1, "moe_dp_rank": 0, "moe_dp_size": 1, "attn_dp_enabled": False,
    "attn_tp_rank": 0, "attn_tp_size": 1, "attn_dp_rank": 0, "attn_dp_size": 1, "attn_cp_rank": 0, "attn_cp_size": 1,
}  # fmt: skip
"""``meta["sglang_parallel_info"]`` of every file: what SGLang 0.5.23's plugin writes on a one-GPU server, as
``/server_info`` says ``tp_size`` 1 (the MLP split of a multi-node engine is meant to be numerically neutral)."""

_Pending = tuple[str, int, tuple[torch.Tensor, ...], torch.Tensor]


class Dumper:
    """One engine's dumper: state, hooks (``hooks.ModuleHook``) and the ``/dumper/*`` methods."""

    def __init__(self, config: DumperConfig) -> None:
        self.config = config
        self.dump_index = 0
        self.step_count = 0
        self._hooked: list[Any] = []
        self._hook_mode = config.non_intrusive_mode
        self.routes = config.routes
        """Whether ``/dumper/*`` exists: decided at start from ``DUMPER_SERVER_PORT``, as SGLang registers the
        routes once (a later ``configure`` of ``server_port`` changes neither)."""
        self._cleaned = False
        self._lock = threading.Lock()
        self._forward_config = config
        """The configuration one forward writes with, taken at its start: a ``configure`` from an HTTP thread
        takes effect at the next forward, never between two modules of one."""
        self._in_layer: list[_Pending] = []
        """The current decoder layer's children, held until the layer returns (``module``)."""

    # ---- attaching to a model ----------------------------------------------------------------------------
    def attach(self, model: Any) -> None:
        """Steps after every forward of ``model`` and hooks its modules (unless ``off``), as SGLang's model
        runner does when the dumper may enable. ``model`` is a ``builtin.model.Model``."""
        if not self.config.armed:
            return
        model.after_forward.append(self.step)
        if self._hook_mode != "off":
            model.hooks.append(self)
            self._hooked.append(model)

    @property
    def hooks_registered(self) -> bool:
        return bool(self._hooked)

    # ---- the per-forward calls (hooks.ModuleHook) ------------------------------------------------------------
    def step(self) -> None:
        with self._lock:
            if not self.config.enable:
                return
            self._ensure_exp_name()
            self.step_count += 1

    def batch(self, info: BatchTensors) -> None:
        with self._lock:
            self._forward_config = self.config
        self._in_layer.clear()  # a forward that raised inside a layer left its children here
        if self._hook_mode == "all":
            self._dump(NAME_PREFIX + "inputs.0", info.input_ids, None)
            self._dump(NAME_PREFIX + "inputs.1", info.positions, None)
        core: dict[str, Any] = {
            "input_ids": info.input_ids,
            "seq_lens": info.seq_lens,
            "positions": info.positions,
            "req_pool_indices": info.req_pool_indices,
            "rids": info.rids,
        }
        for name, value in core.items():
            self._dump(name, value, None)

    def module(self, name: str, layer_id: int | None, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        config = self._forward_config
        if self._hook_mode != "all" or not config.enable or not config.enable_value:
            return
        if name == hooks.ROOT:  # its inputs went out with the forward batch, first (SGLang's pre-hook order)
            self._dump(NAME_PREFIX + "output", output, None)
            return
        if layer_id is None:
            self._dump_module(name, None, inputs, output)
            return
        if name != hooks.layer(layer_id):
            # The model reports a decoder layer once it returns, after its children; SGLang's pre-hook writes
            # the layer's inputs on entry, before them. Copies: the model may reuse a buffer before then.
            kept = tuple(t.detach().clone() for t in inputs)
            self._in_layer.append((name, layer_id, kept, output.detach().clone()))
            return
        for i, tensor in enumerate(inputs):
            self._dump(f"{NAME_PREFIX}{name}.inputs.{i}", tensor, layer_id)
        for child in self._in_layer:
            self._dump_module(*child)
        self._in_layer.clear()
        # SGLang clears a decoder layer's layer_id in a hook that runs before the one that dumps its output.
        self._dump(f"{NAME_PREFIX}{name}.output", output, None)

    def _dump_module(
        self, name: str, layer_id: int | None, inputs: tuple[torch.Tensor, ...], output: torch.Tensor
    ) -> None:
        for i, tensor in enumerate(inputs):
            self._dump(f"{NAME_PREFIX}{name}.inputs.{i}", tensor, layer_id)
        self._dump(f"{NAME_PREFIX}{name}.output", output, layer_id)

    # ---- /dumper/* ---------------------------------------------------------------------------------------------
    def handle(self, method: str, body: Any) -> list[dict[str, Any]]:
        """One ``/dumper/{method}`` call; raises ``DumperRequestError`` for a bad one."""
        if not isinstance(body, dict):
            raise DumperRequestError("Request body must be a JSON object.")
        with self._lock:
            if method == "get_state":
                return [self.get_state()]
            if method == "configure":
                self.configure(body)
                return [{}]
            if method == "reset":
                self.reset()
                return [{}]
        raise DumperRequestError(f"Unknown dumper control method: {method!r}")

    def get_state(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "dump_index": self.dump_index, "step": self.step_count}

    def configure(self, changes: Mapping[str, Any]) -> None:
        self.config = configured(self.config, changes)

    def reset(self) -> None:
        """SGLang's reset: the module hooks are removed and the counters start over."""
        for model in self._hooked:
            model.hooks.remove(self)
        self._hooked.clear()
        self._in_layer.clear()
        self.dump_index = 0
        self.step_count = 0
        self._cleaned = False

    # ---- files -------------------------------------------------------------------------------------------------
    def _ensure_exp_name(self) -> str:
        if self.config.exp_name is None:
            now = time.time()
            stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(now))
            name = f"{EXP_NAME_PREFIX}{stamp}_{int(now % 1 * 1000):03d}{random.randint(0, 999):03d}"
            self.config = replace(self.config, exp_name=name)
        return self.config.exp_name or ""

    def _dump(self, name: str, value: Any, layer_id: int | None) -> None:
        config = self._forward_config
        if not config.enable or not config.enable_value:
            return
        with self._lock:
            if self.config.exp_name is None:
                self._ensure_exp_name()
            exp = config.exp_name or self.config.exp_name or ""
        self.dump_index += 1
        tags: dict[str, Any] = {
            "step": self.step_count,
            "rank": 0,
            "dump_index": self.dump_index,
            "name": name,
            "recompute_status": "disabled",
        }
        if layer_id is not None:
            tags["layer_id"] = layer_id
        if not config.enable_output_file:
            return
        root = Path(config.dir)
        if config.cleanup_previous and not self._cleaned:
            self._cleaned = True
            for old in {*root.glob(f"{EXP_NAME_PREFIX}*"), root / exp}:
                if old.is_dir():
                    shutil.rmtree(old)
        path = root / exp / ("___".join(f"{k}={v}" for k, v in tags.items()) + ".pt")
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, torch.Tensor):
            value = value.detach().to("cpu").clone()  # a view would save its whole storage
        meta = {**tags, "world_rank": 0, "world_size": 1, "sglang_parallel_info": dict(PARALLEL_INFO)}
        torch.save({"value": value, "meta": meta}, path)


def route_method(path: str) -> str | None:
    """``configure`` for ``/dumper/configure``; None for any other path."""
    prefix = "/dumper/"
    return path[len(prefix) :] if path.startswith(prefix) else None
