"""The mixture-of-experts MLP of the ``hybrid-moe`` preset: a router linear, top-k routing, SwiGLU experts.

Why it is here: a router picks experts by comparing logits, so a tiny numeric change upstream (a kernel's
rounding, fp8 weights) can send a token to another expert, and then the token's MLP is a different function.
TRT-LLM#14464 flipped about 3 % of FP8 elements and sent 12-15 % of tokens elsewhere. Golden's logprobs see
that only diluted through the rest of the model; the routed expert ids per token per layer see it directly,
and say which layer's router moved (``checks/routing.py``).

How the clean engine stays invariant (model.py's rule): the router is a per-token GEMM on the model's
``TILE``-row tiles, computed with the row's kernel (numerics.py: decode rows take the split-K tiling under
production numerics) and kept in float32 like the router logits of real engines; every expert runs on every
row of the tile, so no shape depends on which rows chose it, and the top-k weights are the softmax of the
chosen logits (Qwen3-MoE's ``norm_topk_prob``). Prefill and decode of the same token then route alike except
where two logits are closer than the path's own rounding: a clean decode-vs-prefill agreement just under 1 under
production numerics, exactly 1 with ``--enable-deterministic-inference``.

The fault ``router-fp8=L`` rounds layer L's router logits to fp8 e4m3 (no scale: the logits are O(1), well
inside e4m3's range), as a router GEMM with fp8 output would: ties within e4m3's 2^-3 relative step flip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

N_EXPERTS = 8
TOP_K = 2
"""Experts per MoE layer, experts per token (Mixtral's 8 / 2)."""
ROUTER_SCALE = 1.5
"""Standard deviation of the router logits (the router input has rms 1): spread enough that most tokens have
a clear top 2, close enough that some sit within a rounding of the third, as in trained routers."""
EXPERT_OUT_SCALE = 0.05
"""The experts' output scale in the residual stream (weights.py's ``MLP_OUT_SCALE`` for the dense MLP)."""
NO_EXPERT = -1
"""The id reported for a dense layer (no router) in the routed-experts array."""


@dataclass(frozen=True)
class MoeWeights:
    router: torch.Tensor  # [d, E]
    w_gate_up: torch.Tensor  # [E, d, 2 F]
    w_down: torch.Tensor  # [E, F, d]


def build_moe_weights(layers: tuple[int, ...], d: int, hidden: int, seed: int) -> dict[int, MoeWeights]:
    """Seeded MoE weights for each layer in ``layers`` (float32, CPU). Their own generator, so the dense
    layers and every other preset keep their weights."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + 53)
    f = max(8, hidden // TOP_K)  # the active parameters per token match the dense MLP's

    def rand(*shape: int, scale: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).float()

    return {
        layer: MoeWeights(
            router=rand(d, N_EXPERTS, scale=ROUTER_SCALE / d**0.5),
            w_gate_up=rand(N_EXPERTS, d, 2 * f, scale=1.0 / d**0.5),
            w_down=rand(N_EXPERTS, f, d, scale=EXPERT_OUT_SCALE / f**0.5),
        )
        for layer in layers
    }


class Kernels(Protocol):
    """What the MoE layer borrows from the model (model.py): its GEMM with the row's kernel, and its rounding."""

    def gemm(self, x: torch.Tensor, w: torch.Tensor, batch_rows: int, decode_rows: torch.Tensor) -> torch.Tensor: ...

    def linear(self, x: torch.Tensor, w: torch.Tensor, batch_rows: int, decode_rows: torch.Tensor) -> torch.Tensor: ...

    def round(self, t: torch.Tensor) -> torch.Tensor: ...


def route(logits: torch.Tensor, *, fp8: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, weights)``: the ``TOP_K`` experts of each row of ``logits`` ([rows, E] float32) by descending
    logit, and the softmax of their logits. ``fp8``: the logits are rounded to e4m3 first (the fault)."""
    if fp8:
        logits = logits.to(torch.float8_e4m3fn).float()
    top, ids = torch.topk(logits, TOP_K, dim=-1)
    return ids, torch.softmax(top, dim=-1)


def moe_mlp(
    k: Kernels, w: MoeWeights, h: torch.Tensor, rows: int, decode: torch.Tensor, *, fp8: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The MoE MLP of one tile ``h`` ([TILE, d], the post-attention norm's output): ``(out, ids)`` with the
    rounded output and the int64 ``[TILE, TOP_K]`` expert ids each row was routed to."""
    ids, gates = route(k.gemm(h, w.router, rows, decode), fp8=fp8)
    acc = torch.zeros_like(h)
    for e in range(N_EXPERTS):
        gate, up = k.linear(h, w.w_gate_up[e], rows, decode).chunk(2, dim=1)
        out = k.linear(k.round(torch.nn.functional.silu(gate) * up), w.w_down[e], rows, decode)
        weight = (gates * (ids == e)).sum(dim=1, keepdim=True)  # 0 where the row did not choose expert e
        acc = acc + weight * out
    return k.round(acc), ids
