"""The builtin engine's op-level faults and the module each one lives in: what ``calibrate --localize`` and
``benchmarks/bench_localize.py`` hold ``localize`` to.

Pure data. Each fault is localized on the path that exercises it (golden for a kernel changed everywhere, a
helper's path for a decode- or cache-only bug) at the smallest sizes that show it: the cache-hit paths need a
prompt past the 64-token recurrent checkpoint, ``swa-decode-window`` a generation past the 256-key window,
``chunk-boundary`` a prompt past a prefill chunk (the engine's chunk is set to 64 for it, so a 96-token prompt
shows the bug without a 512-token text).

The spec faults that change the target's forward are localized on ``spec-decode`` (the spec arm's verify
against the plain arm's decode): a verify's RoPE positions (``positions``), rejected drafts' KV put back
(the first attention layer reading it) and an unrestored recurrent state. The others change no module's
numbers and have no op to name: ``spec-bonus-logprob`` rewrites a reported logprob after the forward,
``spec-accept-loose`` / ``spec-greedy-at-temperature`` change which token is accepted, and
``spec-draft-degraded`` only the drafts; ``localize --path spec-decode`` names none for them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpFault:
    fault: str
    path: str
    """``localize --path``: golden, decode, prefill-cache-hit, decode-cache-hit or spec-decode."""
    expected: str
    """The module that must be named (docs/builtin-engine.md's fault table says where each fault lives)."""
    prompt_tokens: int = 96
    max_new_tokens: int = 8
    hybrid_only: bool = False
    """Lives in the recurrent or sliding-window layer: the ``tiny`` preset has neither."""
    engine: tuple[tuple[str, int], ...] = ()
    """Builtin engine options the fault needs to show at these sizes (both builds get them)."""


OP_FAULTS: tuple[OpFault, ...] = (
    OpFault("attn-p-fp8", "golden", "model.layers.0.self_attn"),
    OpFault("attn-p-fp8-scaled", "golden", "model.layers.0.self_attn"),
    OpFault("attn-p-bf16", "golden", "model.layers.0.self_attn"),
    OpFault("state-mantissa=4", "golden", "model.layers.1.linear_attn", hybrid_only=True),
    OpFault("mlp-bf16=0", "golden", "model.layers.0.mlp"),
    OpFault("mlp-bf16=1", "golden", "model.layers.1.mlp"),
    OpFault("mlp-bf16=2", "golden", "model.layers.2.mlp", hybrid_only=True),
    OpFault("mantissa=10", "golden", "model.layers.0"),
    OpFault("state-bf16-decode", "decode", "model.layers.1.linear_attn", hybrid_only=True),
    OpFault("swa-decode-window", "decode", "model.layers.2.self_attn", max_new_tokens=260, hybrid_only=True),
    OpFault("restore-stale-page", "prefill-cache-hit", "model.layers.0.self_attn", prompt_tokens=160),
    OpFault("restore-layer0-only", "prefill-cache-hit", "model.layers.1.linear_attn", prompt_tokens=160,
            hybrid_only=True),
    OpFault("mamba-stale-checkpoint", "prefill-cache-hit", "model.layers.1.linear_attn", prompt_tokens=160,
            hybrid_only=True),
    OpFault("conv-state-shift", "prefill-cache-hit", "model.layers.1.linear_attn", prompt_tokens=160,
            hybrid_only=True),
    OpFault("swa-early-evict", "prefill-cache-hit", "model.layers.2.self_attn", prompt_tokens=160, hybrid_only=True),
    OpFault("cache-decode-kv-rounded", "decode-cache-hit", "model.layers.0.self_attn", prompt_tokens=120,
            max_new_tokens=24),
    OpFault("chunk-boundary", "golden", "positions", engine=(("chunked_prefill_size", 64),)),
    OpFault("spec-verify-offbyone", "spec-decode", "positions"),
    OpFault("spec-kv-rollback", "spec-decode", "model.layers.0.self_attn"),
    OpFault("spec-state-rollback", "spec-decode", "model.layers.1.linear_attn", hybrid_only=True),
)  # fmt: skip
