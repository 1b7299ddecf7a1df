"""The transformer forward pass over a paged KV pool, batch- and path-invariant by construction.

Why invariant: a GEMM's or a reduction's rounding depends on its shape (gemv vs gemm, split-K, vector
tails), so the clean engine never lets a shape depend on the batch:

* every per-token op (norms, projections, RoPE, SwiGLU, the unembedding) runs on tiles of exactly ``TILE``
  rows, whatever mix of prefill chunks and decode requests those rows come from;
* attention treats queries in aligned blocks of ``QBLOCK`` positions: the queries of block ``b`` meet keys
  ``[0, (b + 1) * QBLOCK)`` (later ones masked to -inf) in one GEMM of a fixed shape. A decode step computes
  the same block with one real row, so its numbers equal a prefill's (any chunking) bit for bit.

The logprob of a token at a position is therefore the same from prefill, decode, any batch and any cache
hit; SGLang's ``match`` k3 is exactly 0 for the clean engine. The faults (options.py) break exactly this
in the place where the real bugs live.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.weights import ModelWeights

TILE = 64
"""Rows per per-token tile."""
QBLOCK = 16
"""Query positions per attention block (keys are padded to a multiple of it)."""
NULL_SLOT = 0
"""A KV slot that is never allocated: it pads key blocks (always masked)."""
RMS_EPS = 1e-6
FP8_MAX = 448.0
NOISE_CHOICES = 16
"""``nondeterministic``: each row draws one of this many reduction orders (choices 1-3 differ from clean)."""


@dataclass
class Segment:
    """New tokens of one request computed in one forward call (a prefill chunk or one decode token)."""

    tokens: list[int]
    start: int
    """Position of ``tokens[0]``; the KV of positions ``[0, start)`` is already in the pool."""
    slots: torch.Tensor
    """int64 KV slot of every position ``[0, start + len(tokens))`` (CPU)."""
    rope_offset: int = 0
    """Added to the RoPE positions (only the ``chunk-boundary`` fault sets it)."""
    noise: torch.Generator | None = None
    """Per-request generator of the ``nondeterministic`` fault."""
    out_logits: torch.Tensor | None = field(default=None)
    """Filled by ``forward``: float32 ``[len(tokens), V]`` logits (CPU)."""


class Model:
    """Weights on a device plus the KV pool; ``forward`` computes segments and writes their KV."""

    def __init__(self, options: EngineOptions, weights: ModelWeights, n_slots: int, device: torch.device) -> None:
        self.options = options
        self.device = device
        self.act_dtype = torch.bfloat16 if options.dtype == "bfloat16" else torch.float32
        self.h, self.hkv, self.hd = options.n_heads, options.n_kv_heads, options.head_dim
        self.group = self.h // self.hkv

        def put(t: torch.Tensor) -> torch.Tensor:
            # Weights hold activation-dtype values (stored in fp32: the GEMMs accumulate in fp32, like bf16 GPU
            # kernels with fp32 accumulators).
            return t.to(self.act_dtype).to(device=device, dtype=torch.float32)

        self.embed = weights.embed.to(device)
        self.layers = [
            (put(lw.attn_norm), put(lw.wqkv), put(lw.wo), put(lw.mlp_norm), put(lw.w_gate_up), put(lw.w_down))
            for lw in weights.layers
        ]
        self.sinks = [
            lw.sinks.to(device=device, dtype=torch.float32).view(self.hkv, self.group, 1, 1) for lw in weights.layers
        ]
        self.final_norm = put(weights.final_norm)
        self.unembed = put(weights.unembed)
        shape = (options.n_layers, n_slots, self.hkv, self.hd)
        self.k_pool = torch.zeros(shape, dtype=self.act_dtype, device=device)
        self.v_pool = torch.zeros(shape, dtype=self.act_dtype, device=device)
        half = self.hd // 2
        inv_freq = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float64) / half))
        angles = torch.arange(options.max_context_tokens + 2 * QBLOCK, dtype=torch.float64)[:, None] * inv_freq
        # A table, not torch.cos per call: vectorised and scalar-tail paths of cos may round differently.
        self.cos = angles.cos().float().to(device)
        self.sin = angles.sin().float().to(device)
        mask = torch.ones(QBLOCK, QBLOCK, dtype=torch.bool, device=device).triu(1)
        self.block_mask = mask
        self.p_fault = next((f.name for f in options.faults if f.name.startswith("attn-p-")), None)
        self.mantissa = options.fault_value("mantissa")
        self.batch_variant = options.has_fault("batch-variant")

    def round(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.act_dtype).float() if self.act_dtype != torch.float32 else t

    # ---- per-token tiles -------------------------------------------------------------------------------
    def linear(self, x: torch.Tensor, w: torch.Tensor, batch_rows: int) -> torch.Tensor:
        if self.batch_variant and batch_rows <= TILE:
            # The bug: a small batch takes a split-K path (partials rounded to the activation dtype) that a
            # large one does not, so decode (few rows) and prefill (many rows) round differently.
            k = x.shape[1]
            cut = k // 2
            return self.round(self.round(x[:, :cut] @ w[:cut]) + self.round(x[:, cut:] @ w[cut:]))
        return self.round(x @ w)

    def rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self.round(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w)

    def rope(self, t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        half = self.hd // 2
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        a, b = t[..., :half], t[..., half:]
        return self.round(torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1))

    def noisy_wo(self, a: torch.Tensor, w: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
        """The ``nondeterministic`` fault: each row's o_proj reduction order is drawn at random.

        Choices 1-2 of ``NOISE_CHOICES`` split the reduction with fp32 partials (ulp-level), choice 3 with partials
        stored in the activation dtype, like a split-K kernel whose split count depends on a race: bf16
        run-to-run noise (about 1e-3 nats at a typical position).
        """
        out = self.round(a @ w)
        k = a.shape[1]
        for i, cut in enumerate((k // 4, k // 2), start=1):
            alt = self.round(a[:, :cut] @ w[:cut] + a[:, cut:] @ w[cut:])
            out = torch.where((choice == i)[:, None], alt, out)
        cut = 3 * k // 4
        alt = self.round(self.round(a[:, :cut] @ w[:cut]) + self.round(a[:, cut:] @ w[cut:]))
        return torch.where((choice == 3)[:, None], alt, out)

    # ---- attention ---------------------------------------------------------------------------------------
    def attend(self, layer: int, seg: Segment, q: torch.Tensor) -> torch.Tensor:
        """Causal attention of ``seg``'s queries ``q`` ([n, H, D]) over the pool; returns [n, H*D]."""
        n, start = len(seg.tokens), seg.start
        end = start + n
        padded = -(-end // QBLOCK) * QBLOCK
        idx = torch.full((padded,), NULL_SLOT, dtype=torch.int64)
        idx[:end] = seg.slots[:end]
        idx_dev = idx.to(self.device)
        keys = self.k_pool[layer].index_select(0, idx_dev).float()  # [padded, Hkv, D]
        vals = self.v_pool[layer].index_select(0, idx_dev).float()
        qh = q.permute(1, 0, 2).reshape(self.hkv, self.group, n, self.hd)
        out = torch.empty(self.hkv, self.group, n, self.hd, device=self.device)
        scale = self.hd**-0.5
        for block in range(start // QBLOCK, (end - 1) // QBLOCK + 1):
            base = block * QBLOCK
            r0, r1 = max(start - base, 0), min(end - base, QBLOCK)
            width = base + QBLOCK
            qb = torch.zeros(self.hkv, self.group, QBLOCK, self.hd, device=self.device)
            qb[:, :, r0:r1] = qh[:, :, base + r0 - start : base + r1 - start]
            scores = torch.matmul(qb.view(self.hkv, self.group * QBLOCK, self.hd), keys[:width].permute(1, 2, 0))
            scores = (scores * scale).view(self.hkv, self.group, QBLOCK, width)
            scores[..., base:].masked_fill_(self.block_mask, float("-inf"))
            probs = torch.zeros_like(scores)
            real = scores[:, :, r0:r1]
            sink = self.sinks[layer].expand(self.hkv, self.group, r1 - r0, 1)
            probs[:, :, r0:r1] = self.p_transform(torch.softmax(torch.cat([real, sink], dim=-1), dim=-1)[..., :width])
            ob = torch.matmul(probs.view(self.hkv, self.group * QBLOCK, width), vals[:width].permute(1, 0, 2))
            out[:, :, base + r0 - start : base + r1 - start] = ob.view(self.hkv, self.group, QBLOCK, self.hd)[
                :, :, r0:r1
            ]
        return out.reshape(self.h, n, self.hd).permute(1, 0, 2).reshape(n, self.h * self.hd)

    def p_transform(self, p: torch.Tensor) -> torch.Tensor:
        if self.p_fault == "attn-p-fp8":
            return p.to(torch.float8_e4m3fn).float()
        if self.p_fault == "attn-p-fp8-scaled":
            return (p * FP8_MAX).to(torch.float8_e4m3fn).float() / FP8_MAX
        if self.p_fault == "attn-p-bf16":
            return p.to(torch.bfloat16).float()
        return p

    # ---- the forward ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, segments: list[Segment]) -> None:
        """Computes every segment's new tokens, writes their KV, sets ``seg.out_logits``."""
        rows = sum(len(s.tokens) for s in segments)
        padded = -(-rows // TILE) * TILE
        tokens = torch.zeros(padded, dtype=torch.int64)
        pos = torch.zeros(padded, dtype=torch.int64)
        slots = torch.full((rows,), NULL_SLOT, dtype=torch.int64)
        noise_choice = torch.zeros(padded, dtype=torch.int64)
        offset = 0
        for seg in segments:
            n = len(seg.tokens)
            tokens[offset : offset + n] = torch.tensor(seg.tokens, dtype=torch.int64)
            pos[offset : offset + n] = torch.arange(seg.start, seg.start + n) + seg.rope_offset
            slots[offset : offset + n] = seg.slots[seg.start : seg.start + n]
            if seg.noise is not None:
                noise_choice[offset : offset + n] = torch.randint(0, NOISE_CHOICES, (n,), generator=seg.noise)
            offset += n
        dev = self.device
        tokens, pos, slots_dev = tokens.to(dev), pos.clamp(min=0).to(dev), slots.to(dev)
        noisy = bool(noise_choice.any())
        noise_dev = noise_choice.to(dev)
        x = self.embed.index_select(0, tokens)  # [padded, d] fp32 residual stream
        tiles = range(0, padded, TILE)
        qkv_sizes = [self.h * self.hd, self.hkv * self.hd, self.hkv * self.hd]
        for layer, (attn_norm, wqkv, wo, mlp_norm, w_gu, w_down) in enumerate(self.layers):
            qs, attn_in = [], []
            for t0 in tiles:
                sl = slice(t0, t0 + TILE)
                q, k, v = torch.split(self.linear(self.rms(x[sl], attn_norm), wqkv, rows), qkv_sizes, dim=1)
                qs.append(self.rope(q.reshape(TILE, self.h, self.hd), pos[sl]))
                k = self.rope(k.reshape(TILE, self.hkv, self.hd), pos[sl])
                real = slice(0, max(0, min(TILE, rows - t0)))
                self.k_pool[layer].index_copy_(0, slots_dev[t0 : t0 + TILE][real], k[real].to(self.act_dtype))
                v = v.reshape(TILE, self.hkv, self.hd)[real].to(self.act_dtype)
                self.v_pool[layer].index_copy_(0, slots_dev[t0 : t0 + TILE][real], v)
            q_all = torch.cat(qs)
            offset = 0
            for seg in segments:
                n = len(seg.tokens)
                attn_in.append(self.attend(layer, seg, q_all[offset : offset + n]))
                offset += n
            attn = torch.zeros(padded, self.h * self.hd, device=dev)
            attn[:rows] = torch.cat(attn_in)
            new_x = []
            for t0 in tiles:
                sl = slice(t0, t0 + TILE)
                a = self.round(attn[sl])
                o = self.noisy_wo(a, wo, noise_dev[sl]) if noisy else self.linear(a, wo, rows)
                xt = x[sl] + o
                gate, up = self.linear(self.rms(xt, mlp_norm), w_gu, rows).chunk(2, dim=1)
                xt = xt + self.linear(self.round(torch.nn.functional.silu(gate) * up), w_down, rows)
                new_x.append(self.truncate(xt))
            x = torch.cat(new_x)
        logits = torch.cat([self.rms(x[t0 : t0 + TILE], self.final_norm) @ self.unembed for t0 in tiles])
        logits = logits[:rows].cpu()
        offset = 0
        for seg in segments:
            seg.out_logits = logits[offset : offset + len(seg.tokens)]
            offset += len(seg.tokens)

    def truncate(self, x: torch.Tensor) -> torch.Tensor:
        """The ``mantissa=N`` fault: keep N mantissa bits of the fp32 hidden state (round toward zero)."""
        if self.mantissa is None:
            return x
        mask = -(1 << (23 - self.mantissa))  # ones above the dropped low bits, as a signed int32
        return (x.view(torch.int32) & mask).view(torch.float32)
