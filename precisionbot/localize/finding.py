"""The localization in words: the ``first diverging op:`` line, the inheriting modules, and the JSON summary.
Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from precisionbot.builtin.hooks import MODULE_KINDS
from precisionbot.localize.core import POSITIONS_FIELD, Localization

LAYER_KIND_WORDS = {"full": "attention", "swa": "sliding-window attention", "gdn": "recurrent mixer"}


def module_kind(module: str, layer_types: Sequence[str] | None) -> str:
    """Plain words for a module path: ``model.layers.2.self_attn`` -> ``sliding-window attention`` when layer 2
    is a sliding-window layer (``layer_types`` from ``/server_info``'s model_config), else ``attention``."""
    if not module:
        return "model"
    if module == POSITIONS_FIELD:
        return "the forward batch's positions, which RoPE and the KV slots are computed from"
    parts = module.split(".")
    last = parts[-1]
    if last.isdigit() and len(parts) >= 2 and parts[-2] == "layers":
        return "decoder layer (its residual stream)"
    if last == "self_attn":
        index = int(parts[-2]) if len(parts) >= 2 and parts[-2].isdigit() else None
        if layer_types is not None and index is not None and index < len(layer_types):
            return LAYER_KIND_WORDS.get(layer_types[index], "attention")
        return "attention"
    return MODULE_KINDS.get(last, last)


def where(position: int, path: str, prompt_tokens: int) -> str:
    """``decode step 3`` on the decode path (step k consumes position prompt + k - 1), else ``position N``; on
    the spec-decode path the position's token came from a verify on the spec arm and a decode step on the
    plain one."""
    if path == "decode" and position >= prompt_tokens:
        return f"decode step {position - prompt_tokens + 1} (position {position})"
    if path == "spec-decode" and position >= prompt_tokens:
        return f"decode step {position - prompt_tokens + 1} (position {position}, verified by the spec arm)"
    return f"position {position}"


def first_line(loc: Localization, path: str, prompt_tokens: int, layer_types: Sequence[str] | None) -> str:
    if loc.first is None or loc.position is None:
        line = (
            f"first diverging op: none: all {len(loc.aligned_positions)} aligned positions are bit-identical in every "
            f"one of {len(loc.modules)} modules ({loc.hook_hits[1]} module outputs read per side)"
        )
        if path == "spec-decode":
            line += (
                "; the target's forward agrees on every token both arms emitted, so what moved is outside it (the "
                "logprobs or tokens the spec arm reports, or its acceptance)"
            )
        return line
    kind = module_kind(loc.first.module, layer_types)
    return (
        f"first diverging op: {loc.first.module} ({kind}) at {where(loc.position, path, prompt_tokens)}: "
        f"{what_differs(loc)}, max |diff| {loc.first.diff.max_abs_diff:.2g}"
    )


def what_differs(loc: Localization) -> str:
    """``inputs identical, output rel_diff 4.1e-02``; for the positions field, which position each side gave."""
    assert loc.first is not None
    d = loc.first.diff
    if loc.first.module == POSITIONS_FIELD:
        return f"the baseline gives the token position {d.baseline_at_max:.0f}, the target {d.target_at_max:.0f}"
    return f"inputs identical, output rel_diff {d.rel_diff:.2g}"


def inherit_line(loc: Localization) -> str | None:
    if not loc.inheriting:
        return None
    names = [r.module or "(root)" for r in loc.inheriting]
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"inherited (inputs already differ): {shown}"


def summary(loc: Localization, path: str, prompt_tokens: int, layer_types: Sequence[str] | None) -> dict[str, Any]:
    """``localization.json``: what the comment and other tools read."""
    first = None
    if loc.first is not None and loc.position is not None:
        d = loc.first.diff
        first = {
            "module": loc.first.module,
            "kind": module_kind(loc.first.module, layer_types),
            "position": loc.position,
            "where": where(loc.position, path, prompt_tokens),
            "rel_diff": d.rel_diff,
            "max_abs_diff": d.max_abs_diff,
            "differs": what_differs(loc),
            "passed": d.passed,
        }
    return {
        "path": path,
        "first_diverging_op": first,
        "inheriting": [r.module for r in loc.inheriting],
        "aligned_positions": len(loc.aligned_positions),
        "modules": list(loc.modules),
        "hook_hits": list(loc.hook_hits),
        "line": first_line(loc, path, prompt_tokens, layer_types),
    }
