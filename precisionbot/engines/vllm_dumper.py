"""SGLang 0.5.23's tensor dumper for vLLM: the part that knows no vLLM and no torch (names, file names, the
state behind ``/dumper/*``). ``vllm_plugin`` puts it into a vLLM server; docs/localize.md ("vLLM") says how.

What a vLLM server armed with the plugin writes is what ``localize`` reads from SGLang (``localize/dumps.py``):

* ``{dir}/{exp_name}/step=S___rank=R___dump_index=I___name=N___recompute_status=disabled`` plus
  ``___layer_id=L`` for a tensor inside a decoder layer (not a layer's own output: SGLang clears the layer id
  before that hook), each file ``{"value": tensor, "meta": {...}}``;
* per forward the batch's ``input_ids`` and ``positions`` (in ``core`` and ``all`` mode); in ``all`` mode every
  hooked module's ``non_intrusive__<module>.inputs.<i>`` and ``.output`` (``.output.<i>`` for each tensor of a
  tuple output, as vLLM's decoder layers and fused-residual norms return ``(hidden, residual)``);
* module names in SGLang's ``model.layers.N.*`` form. vLLM's Llama-family models already use SGLang's module
  names; a multimodal wrapper's ``language_model.`` prefix is dropped. Only the modules SGLang's localization
  names are hooked (``SGLANG_LAYER_PARTS``, the embedding, the final norm): a finer hook set would multiply the
  files per forward without changing which of these is named first.

The input index ``i`` counts a module's positional arguments, then its keyword arguments, in call order
(vLLM calls ``self_attn(positions=..., hidden_states=...)`` by keyword); arguments that are not tensors (the
first layer's ``residual`` is None) write nothing but keep their index, so the same tensor has the same name
on both builds. vLLM's LM head never runs as a module (its logits processor applies the head's weights
directly, to the sampled rows only), so there is no ``lm_head`` tensor, as in an SGLang dump.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from precisionbot.builtin.dumper_config import (
    EXP_NAME_PREFIX,
    NAME_PREFIX,
    DumperConfig,
    DumperRequestError,
    config_from_env,
    configured,
)

PLUGIN_NAME = "precisionbot_dumper"
"""The entry-point name under ``vllm.general_plugins`` and ``vllm.endpoint_plugins``: what ``VLLM_PLUGINS``
must name (vLLM loads an endpoint plugin only when that variable names it)."""
RPC_METHOD = "precisionbot_dumper"
"""The worker method ``/dumper/*`` reaches through vLLM's ``collective_rpc``."""
METHODS = ("configure", "get_state", "reset")
EMBED = "model.embed_tokens"
FINAL_NORM = "model.norm"
SGLANG_LAYER_PARTS = frozenset({"self_attn", "linear_attn", "mlp", "input_layernorm", "post_attention_layernorm"})
"""A decoder layer's modules that are hooked (SGLang's names, which vLLM's Llama-family models share)."""
WRAPPER_PREFIXES = ("language_model.",)
"""Prefixes a multimodal vLLM model puts before its text model's ``model.layers``."""

_LAYER = re.compile(r"model\.layers\.(\d+)(?:\.(\w+))?")


def sglang_module_name(vllm_name: str) -> str | None:
    """SGLang's name for the vLLM module at ``vllm_name`` (``model_runner.model.named_modules()``), or None for
    a module that is not hooked.

    >>> sglang_module_name("language_model.model.layers.1.mlp")
    'model.layers.1.mlp'
    >>> sglang_module_name("model.layers.1.mlp.down_proj") is None
    True
    """
    name = vllm_name
    for prefix in WRAPPER_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if name in (EMBED, FINAL_NORM):
        return name
    match = _LAYER.fullmatch(name)
    if match is not None and (match.group(2) is None or match.group(2) in SGLANG_LAYER_PARTS):
        return name
    return None


def layer_id(module: str, part: str) -> int | None:
    """The ``layer_id`` tag of ``module``'s tensor ``part`` (``inputs.0``, ``output``, ``output.1``): the layer
    index inside a decoder layer, none outside one and none for a layer's own output."""
    match = _LAYER.fullmatch(module)
    if match is None or (match.group(2) is None and part.startswith("output")):
        return None
    return int(match.group(1))


def file_name(step: int, rank: int, dump_index: int, name: str, layer: int | None) -> str:
    """``step=S___rank=R___dump_index=I___name=N___recompute_status=disabled[___layer_id=L].pt``."""
    tags = f"step={step}___rank={rank}___dump_index={dump_index}___name={name}___recompute_status=disabled"
    return tags + ("" if layer is None else f"___layer_id={layer}") + ".pt"


def tensor_name(module: str, part: str) -> str:
    """``non_intrusive__<module>.<part>``."""
    return f"{NAME_PREFIX}{module}.{part}"


@dataclass(frozen=True)
class PendingFile:
    """One tensor to write: where, and the ``meta`` the file carries."""

    exp_dir: str
    """``{dir}/{exp_name}``."""
    name: str
    """The file's name (``file_name``)."""
    meta: dict[str, Any]
    cleanup: tuple[str, ...] = ()
    """Folders to delete before writing (``cleanup_previous`` on the first file after it was set)."""


def armed_config(env: Mapping[str, str]) -> DumperConfig | None:
    """The dumper's configuration from ``DUMPER_*`` (SGLang's reading; a bad value raises ``ConfigError`` naming
    it, which stops vLLM's start), or None when nothing arms it: without ``DUMPER_ENABLE`` or
    ``DUMPER_SERVER_PORT=reuse`` the plugin hooks nothing and adds no route, as an SGLang server would."""
    config = config_from_env(env)
    return config if config.armed else None


class DumperState:
    """One worker's dumper: the configuration, its counters and the ``/dumper/*`` methods, SGLang's semantics
    (the builtin engine's ``builtin/dumper.py`` implements the same): a ``configure`` takes effect at the next
    forward, never between two modules of one; ``reset`` zeroes the counters and asks for the hooks to go."""

    def __init__(self, config: DumperConfig, rank: int, world_size: int, facts: Mapping[str, Any]) -> None:
        self.config = config
        self.rank = rank
        self.world_size = world_size
        self.facts = dict(facts)
        """What the engine reports beside SGLang's state (``get_state``'s ``vllm`` object): the settings whose
        absence would make the dump silently empty (``enforce_eager``, ``compilation_mode``), the hooks."""
        self.hook_mode = config.non_intrusive_mode
        """The mode the hooks were registered with: a later ``configure`` changes the reported mode only."""
        self.dump_index = 0
        self.step = 0
        self.reset_requested = False
        self._forward = config
        self._cleaned = False
        self._lock = threading.Lock()

    def handle(self, method: str, body: Any) -> dict[str, Any]:
        """One ``/dumper/{method}`` call on this rank: its answer, or ``{"error": message}`` for a bad call."""
        try:
            if not isinstance(body, dict):
                raise DumperRequestError("Request body must be a JSON object.")
            with self._lock:
                if method == "get_state":
                    return self.get_state()
                if method == "configure":
                    self.configure(body)
                    return {}
                if method == "reset":
                    self.dump_index = self.step = 0
                    self._cleaned = False
                    self.reset_requested = True
                    return {}
            raise DumperRequestError(f"Unknown dumper control method: {method!r}")
        except DumperRequestError as exc:
            return {"error": str(exc)}

    def get_state(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "dump_index": self.dump_index, "step": self.step, "vllm": self.facts}

    def configure(self, changes: Mapping[str, Any]) -> None:
        config = configured(self.config, changes)
        if "cleanup_previous" in changes:
            self._cleaned = False
        self.config = config

    # ---- the per-forward calls -----------------------------------------------------------------------------
    def begin_forward(self) -> bool:
        """At a forward's start: the configuration it writes with; True when it writes anything."""
        with self._lock:
            if self.config.enable and self.config.exp_name is None:
                self.config = replace(self.config, exp_name=_new_exp_name())
            self._forward = self.config
        return self._forward.enable and self._forward.enable_value and self._forward.enable_output_file

    def end_forward(self) -> None:
        if self._forward.enable:
            self.step += 1

    def next_file(self, name: str, layer: int | None) -> PendingFile | None:
        """The file for tensor ``name`` of the current forward (None when this forward writes nothing)."""
        config = self._forward
        if not (config.enable and config.enable_value and config.enable_output_file):
            return None
        self.dump_index += 1
        exp = config.exp_name or ""
        tags: dict[str, Any] = {"step": self.step, "rank": self.rank, "dump_index": self.dump_index, "name": name,
                                "recompute_status": "disabled"}  # fmt: skip
        if layer is not None:
            tags["layer_id"] = layer
        cleanup: tuple[str, ...] = ()
        if config.cleanup_previous and not self._cleaned:
            self._cleaned = True
            cleanup = (f"{config.dir}/{EXP_NAME_PREFIX}*", f"{config.dir}/{exp}")
        meta = {**tags, "world_rank": self.rank, "world_size": self.world_size}
        return PendingFile(f"{config.dir}/{exp}", file_name(self.step, self.rank, self.dump_index, name, layer),
                           meta, cleanup)  # fmt: skip


def _new_exp_name() -> str:
    """SGLang's default experiment name, ``dump_<UTC time>_<ms><random>``."""
    now = time.time()
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(now))
    return f"{EXP_NAME_PREFIX}{stamp}_{int(now % 1 * 1000):03d}{random.randint(0, 999):03d}"
