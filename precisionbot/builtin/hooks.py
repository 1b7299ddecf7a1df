"""Forward hooks of the builtin model, named as SGLang names a hybrid model's modules.

SGLang's dumper walks ``model.named_modules()`` and puts a forward pre-hook and a forward hook on every module:
the pre-hook sees the module's positional inputs, the hook its output. The builtin model is not a
``torch.nn.Module`` tree, so ``Model.forward`` calls the registered hooks itself at the same boundaries, with
the tensors it really computed (no recomputation: a hook that recomputed a value could hide the bug it is
meant to find). Names follow SGLang's Qwen3-Next style hybrid (a ``model.`` prefix on everything below the
root, ``self_attn`` for full and sliding-window attention, ``linear_attn`` for the recurrent mixer), so a
module path read off a builtin dump reads the same as one from an SGLang dump.

Only the batch's real rows are passed (the model pads to ``TILE`` rows internally; SGLang without CUDA graphs
runs the real rows only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

EMBED = "model.embed_tokens"
FINAL_NORM = "model.norm"
LM_HEAD = "lm_head"
ROOT = ""
"""The root module: its inputs are the batch's token ids and positions, its output the logits."""

MIXER_NAMES = {"full": "self_attn", "swa": "self_attn", "gdn": "linear_attn"}
"""Each layer kind's mixer module (SGLang's names: full and sliding-window attention are both ``self_attn``)."""

MODULE_KINDS = {
    "embed_tokens": "embedding",
    "input_layernorm": "norm",
    "post_attention_layernorm": "norm",
    "mlp": "MLP",
    "norm": "final norm",
    "lm_head": "LM head",
    "linear_attn": "recurrent mixer",
}
"""A plain-words kind for a module path's last part (``self_attn`` depends on the layer kind: ``layer_kind``)."""


def layer(index: int) -> str:
    return f"model.layers.{index}"


def sub(index: int, part: str) -> str:
    """``model.layers.{index}.{part}``, e.g. ``sub(1, "mlp")``."""
    return f"{layer(index)}.{part}"


@dataclass(frozen=True)
class BatchTensors:
    """What SGLang's dumper reads off a ``ForwardBatch`` at the root (its *core* fields)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    seq_lens: torch.Tensor
    req_pool_indices: torch.Tensor
    rids: list[str]
    decode: bool
    """A decode-only batch (one where an SGLang server on CUDA replays its decode graph and runs no hook; the
    builtin engine has no graphs and runs them)."""


class ModuleHook(Protocol):
    """What ``Model.forward`` calls; the dumper (dumper.py) implements it."""

    def batch(self, info: BatchTensors) -> None:
        """Once per forward, before any module: the root's forward batch."""

    def module(self, name: str, layer_id: int | None, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        """A module ran: its positional inputs and its output (real rows only), called when it returns, so a
        decoder layer comes after its children. ``layer_id`` is set inside a decoder layer (SGLang's dumper
        takes it from the ``layers.N`` module name)."""
