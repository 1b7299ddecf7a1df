"""The forward pass over a paged KV pool: per-token tiles, then each layer's mixer (attention.py for full and
sliding-window attention, recurrent.py for the gated-delta layer), then an MLP.

Why the deterministic engine is invariant (``--enable-deterministic-inference``): a GEMM's or a reduction's
rounding depends on its shape (gemv vs gemm, split-K, vector tails), so no shape may depend on the batch:

* every per-token op (norms, projections, RoPE, SwiGLU, the unembedding) runs on tiles of exactly ``TILE``
  rows, whatever mix of prefill chunks and decode requests those rows come from;
* attention uses the blocked kernel (attention.py): a decode step computes the same query block as a
  prefill, with one real row; the recurrent layer runs stepwise in float32 in both.

The logprob of a token at a position is then the same from prefill, decode, any batch and any cache hit;
SGLang's ``match`` k3 is exactly 0. Without the flag (the default, *production numerics*), decode rows take
the one-row GEMM tiling (numerics.py), split-KV attention and the stepwise recurrence while prefill takes the
many-row tiling, blocked attention and the chunkwise recurrence with its bf16 increment: a clean ``match``
k3 is small but not zero, as on a GPU. The kernel is chosen per row, never per batch size, so the engine stays
batch-invariant. The faults (options.py) break exactly this in the place where the real bugs live.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from precisionbot.builtin import attention, moe, numerics
from precisionbot.builtin import hooks as hooks_names
from precisionbot.builtin.attention import NULL_SLOT, QBLOCK, Window
from precisionbot.builtin.hooks import BatchTensors, ModuleHook
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.recurrent import GdnNumerics, GdnWeights, RecurrentState, gdn
from precisionbot.builtin.weights import LayerWeights, ModelWeights

TILE = 64
"""Rows per per-token tile."""
RMS_EPS = 1e-6
MLP_BF16_CHUNK = 32
"""``mlp-bf16=L``: products summed in fp32 before each bf16 rounding of the running sum."""
NOISE_CHOICES = 16
"""``nondeterministic``: each row draws one of this many reduction orders (choices 1-3 differ from clean)."""

__all__ = ["NULL_SLOT", "QBLOCK", "TILE", "Model", "Segment"]


class TensorParallelMlp(Protocol):
    """Each layer's MLP computed over several nodes (tensor_parallel.py's ``MlpGroup``)."""

    def mlp(self, layer: int, h: torch.Tensor, rows: int, decode: torch.Tensor) -> torch.Tensor:
        """The MLP output of every row of ``h`` ([padded, d]: the post-attention norm's output), rounded."""
        ...


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
    decode: bool = False
    """A decode step (one token after the prompt): production numerics give it the decode kernels."""
    state: RecurrentState | None = None
    """The request's recurrent state (hybrid preset), updated in place."""
    swa_slots: torch.Tensor | None = None
    """int64 slot in the SWA pool of every position ``[0, start + len(tokens))`` (CPU; the null page's slots
    where the request holds no SWA page: out of the window). None: ``slots`` index the SWA pool too."""
    generated: int = 0
    """Tokens this request generated before this step (``swa-decode-window`` looks at it)."""
    rid: str = ""
    """The request's id (the dumper's ``rids``)."""
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
        self.kinds = options.layer_kinds
        self.production = not options.enable_deterministic_inference

        def put(t: torch.Tensor) -> torch.Tensor:
            # Weights hold activation-dtype values (stored in fp32: the GEMMs accumulate in fp32, like bf16 GPU
            # kernels with fp32 accumulators).
            return t.to(self.act_dtype).to(device=device, dtype=torch.float32)

        self.embed = weights.embed.to(device)
        self.layers: list[tuple[torch.Tensor, ...]] = []
        self.gdn: dict[int, GdnWeights] = {}
        self.sinks: dict[int, torch.Tensor] = {}
        for i, lw in enumerate(weights.layers):
            if isinstance(lw, GdnWeights):
                self.gdn[i] = GdnWeights(
                    put(lw.norm), put(lw.w_in), lw.conv.to(device), put(lw.w_out),
                    put(lw.mlp_norm), put(lw.w_gate_up), put(lw.w_down),
                )  # fmt: skip
                g = self.gdn[i]
                self.layers.append((g.norm, g.w_in, g.w_out, g.mlp_norm, g.w_gate_up, g.w_down))
                continue
            assert isinstance(lw, LayerWeights)
            self.layers.append(
                (put(lw.attn_norm), put(lw.wqkv), put(lw.wo), put(lw.mlp_norm), put(lw.w_gate_up), put(lw.w_down))
            )
            self.sinks[i] = lw.sinks.to(device=device, dtype=torch.float32).view(self.hkv, self.group, 1, 1)
        self.final_norm = put(weights.final_norm)
        self.moe = {i: moe.MoeWeights(put(w.router), put(w.w_gate_up), put(w.w_down)) for i, w in weights.moe.items()}
        self.router_fp8 = options.fault_value("router-fp8")
        self.routed: torch.Tensor | None = None
        """MoE models: the expert ids each KV slot's token was routed to, ``[n_slots, layers, TOP_K]`` int16
        (``moe.NO_EXPERT`` in dense layers), kept per slot as SGLang's capturer keeps them per cache location,
        so a prefix-cache hit still returns its tokens' routing (read by the scheduler when a request ends)."""
        if self.moe:
            self.routed = torch.full((n_slots, len(self.kinds), moe.TOP_K), moe.NO_EXPERT, dtype=torch.int16)
        self.unembed = put(weights.unembed)
        # Pools hold a row per layer that keeps KV in them: the full pool for full attention (and sliding-window
        # layers under ``disable_hybrid_swa_memory``), the SWA pool (swa_cache.py) for sliding-window layers.
        # The recurrent layer keeps no KV.
        swa_pool = options.uses_swa_pool
        swa_layers = [i for i, kind in enumerate(self.kinds) if kind == "swa" and swa_pool]
        full_layers = [i for i, kind in enumerate(self.kinds) if kind != "gdn" and i not in swa_layers]
        self.full_row = {layer: row for row, layer in enumerate(full_layers)}
        self.swa_row = {layer: row for row, layer in enumerate(swa_layers)}
        shape = (len(full_layers), n_slots, self.hkv, self.hd)
        self.k_pool = torch.zeros(shape, dtype=self.act_dtype, device=device)
        self.v_pool = torch.zeros(shape, dtype=self.act_dtype, device=device)
        swa_shape = (len(swa_layers), options.swa_pool_tokens if swa_layers else 0, self.hkv, self.hd)
        self.swa_k_pool = torch.zeros(swa_shape, dtype=self.act_dtype, device=device)
        self.swa_v_pool = torch.zeros(swa_shape, dtype=self.act_dtype, device=device)
        half = self.hd // 2
        inv_freq = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float64) / half))
        angles = torch.arange(options.max_context_tokens + 2 * QBLOCK, dtype=torch.float64)[:, None] * inv_freq
        # A table, not torch.cos per call: vectorised and scalar-tail paths of cos may round differently.
        self.cos = angles.cos().float().to(device)
        self.sin = angles.sin().float().to(device)
        self.p_fault = next((f.name for f in options.faults if f.name.startswith("attn-p-")), None)
        self.mantissa = options.fault_value("mantissa")
        self.batch_variant = options.has_fault("batch-variant")
        self.short_decode_window = options.has_fault("swa-decode-window")
        self.mlp_bf16 = options.fault_value("mlp-bf16")
        self.hooks: list[ModuleHook] = []
        """Forward hooks (hooks.py): called at every module boundary of every forward."""
        self.after_forward: list[Callable[[], None]] = []
        """Called after every forward (the dumper's ``step``)."""
        self.tp: TensorParallelMlp | None = None
        """Set on rank 0 of a multi-node engine (tensor_parallel.py): each layer's MLP is split over the nodes."""

    def round(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.act_dtype).float() if self.act_dtype != torch.float32 else t

    # ---- per-token tiles -------------------------------------------------------------------------------
    def linear(self, x: torch.Tensor, w: torch.Tensor, batch_rows: int, decode_rows: torch.Tensor) -> torch.Tensor:
        """``x @ w`` rounded; ``decode_rows`` ([TILE] bool) marks rows that take the decode GEMM tiling."""
        return self.round(self.gemm(x, w, batch_rows, decode_rows))

    def gemm(self, x: torch.Tensor, w: torch.Tensor, batch_rows: int, decode_rows: torch.Tensor) -> torch.Tensor:
        """``linear`` before its final rounding (numerics.gemm)."""
        # The batch-variant bug: a small batch takes a split-K path (partials rounded to the activation dtype)
        # that a large one does not, so decode (few rows) and prefill (many rows) round differently.
        small = self.batch_variant and batch_rows <= TILE
        return numerics.gemm(
            x, w, decode_rows, production=self.production, small_batch_split=small, round_act=self.round
        )

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

    # ---- mixers ------------------------------------------------------------------------------------------
    def window(self, layer: int, seg: Segment) -> Window:
        if self.kinds[layer] != "swa":
            return Window(None)
        return Window(self.options.sliding_window_size)

    def pools(self, layer: int, seg: Segment) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(k, v, slots)`` where ``layer``'s KV of ``seg`` lives: a sliding-window layer's in the SWA pool at
        the segment's SWA slots (at its ``slots`` when it has none: a caller without the scheduler), any other
        attention layer's in the full pool."""
        row = self.swa_row.get(layer)
        if row is not None:
            slots = seg.swa_slots if seg.swa_slots is not None else seg.slots
            return self.swa_k_pool[row], self.swa_v_pool[row], slots
        row = self.full_row[layer]
        return self.k_pool[row], self.v_pool[row], seg.slots

    def attend(self, layer: int, seg: Segment, q: torch.Tensor) -> torch.Tensor:
        """Causal attention of ``seg``'s queries ``q`` ([n, H, D]) over the pool; returns [n, H*D]."""
        n, start = len(seg.tokens), seg.start
        end = start + n
        padded = -(-end // QBLOCK) * QBLOCK
        k_pool, v_pool, slots = self.pools(layer, seg)
        idx = torch.full((padded,), NULL_SLOT, dtype=torch.int64)
        idx[:end] = slots[:end]
        idx_dev = idx.to(self.device)
        keys = k_pool.index_select(0, idx_dev).float()  # [padded, Hkv, D]
        vals = v_pool.index_select(0, idx_dev).float()
        qh = q.permute(1, 0, 2).reshape(self.hkv, self.group, n, self.hd)
        window = self.window(layer, seg)
        if window.size is not None and self.short_decode_window and seg.decode and seg.generated >= window.size:
            # The bug: decode keeps the window in a ring of W - 1 slots (an off-by-one), which wraps once
            # generation passes W: the previous token's slot still holds the key written W - 1 tokens before
            # it, so decode has W - 1 right keys where prefill has W.
            stale = start - window.size
            keys[start - 1], vals[start - 1] = keys[stale], vals[stale]
        if self.production and seg.decode:
            out = attention.split_kv(qh, keys, vals, self.sinks[layer], start, window, self.p_fault)
        else:
            out = attention.blocked(qh, keys, vals, self.sinks[layer], start, window, self.p_fault)
        return out.reshape(self.h, n, self.hd).permute(1, 0, 2).reshape(n, self.h * self.hd)

    def recur(self, layer: int, seg: Segment, proj: torch.Tensor) -> torch.Tensor:
        o = self.options
        assert seg.state is not None, "a hybrid model's segments carry their request's recurrent state"
        mode = GdnNumerics(
            chunkwise=self.production and not seg.decode,
            mantissa=o.fault_value("state-mantissa"),
            bf16_state=seg.decode and o.has_fault("state-bf16-decode"),
        )
        return gdn(self.gdn[layer], proj, seg.state, layer, seg.start, mode, o.mamba_track_interval)

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
        decode_rows = torch.zeros(padded, dtype=torch.bool)
        offset = 0
        for seg in segments:
            n = len(seg.tokens)
            tokens[offset : offset + n] = torch.tensor(seg.tokens, dtype=torch.int64)
            pos[offset : offset + n] = torch.arange(seg.start, seg.start + n) + seg.rope_offset
            slots[offset : offset + n] = seg.slots[seg.start : seg.start + n]
            decode_rows[offset : offset + n] = seg.decode
            if seg.noise is not None:
                noise_choice[offset : offset + n] = torch.randint(0, NOISE_CHOICES, (n,), generator=seg.noise)
            offset += n
        decode_only = all(seg.decode for seg in segments)
        if decode_only:
            decode_rows[:] = True  # padding rows too: a decode-only step needs no prefill GEMM at all
        dev = self.device
        tokens, pos, full_slots = tokens.to(dev), pos.clamp(min=0).to(dev), slots.to(dev)
        decode_dev = decode_rows.to(dev)
        noisy = bool(noise_choice.any())
        noise_dev = noise_choice.to(dev)
        hooks = list(self.hooks)
        emit = _Emit(hooks, rows) if hooks else None
        if emit is not None:
            emit.batch(segments, tokens, pos, decode_only)
        x = self.embed.index_select(0, tokens)  # [padded, d] fp32 residual stream
        if emit is not None:
            emit(hooks_names.EMBED, None, (tokens,), x)
        tiles = range(0, padded, TILE)
        for layer, (norm, w_in, wo, mlp_norm, w_gu, w_down) in enumerate(self.layers):
            layer_in = x
            slots_dev = full_slots
            normed = torch.cat([self.rms(x[t : t + TILE], norm) for t in tiles])
            if emit is not None:
                emit(hooks_names.sub(layer, "input_layernorm"), layer, (x,), normed)
            if self.kinds[layer] == "gdn":
                proj = torch.cat(
                    [self.linear(normed[t : t + TILE], w_in, rows, decode_dev[t : t + TILE]) for t in tiles]
                )
                mixed = [self.recur(layer, seg, proj[a : a + len(seg.tokens)]) for seg, a in _spans(segments)]
            else:
                k_pool, v_pool, _ = self.pools(layer, segments[0])
                if layer in self.swa_row:
                    swa = [self.pools(layer, s)[2][s.start : s.start + len(s.tokens)] for s in segments]
                    slots_dev = torch.cat(swa).to(dev)
                q_all = self._qkv(layer, normed, w_in, pos, (k_pool, v_pool), slots_dev, rows, decode_dev)
                mixed = [self.attend(layer, seg, q_all[a : a + len(seg.tokens)]) for seg, a in _spans(segments)]
            mix = torch.zeros(padded, mixed[0].shape[1], device=dev)
            mix[:rows] = torch.cat(mixed)
            outs = []
            for t0 in tiles:
                sl = slice(t0, t0 + TILE)
                a = self.round(mix[sl])
                outs.append(self.noisy_wo(a, wo, noise_dev[sl]) if noisy else self.linear(a, wo, rows, decode_dev[sl]))
            o = torch.cat(outs)
            if emit is not None:
                emit(hooks_names.sub(layer, hooks_names.MIXER_NAMES[self.kinds[layer]]), layer, (pos, normed), o)
            xt = x + o
            normed2 = torch.cat([self.rms(xt[t : t + TILE], mlp_norm) for t in tiles])
            if emit is not None:
                emit(hooks_names.sub(layer, "post_attention_layernorm"), layer, (xt,), normed2)
            if layer in self.moe:
                mlp_out = self._moe(layer, normed2, rows, decode_dev, slots)
            elif self.tp is not None:
                mlp_out = self.tp.mlp(layer, normed2, rows, decode_dev)
            else:
                mlp_out = torch.cat(
                    [
                        self.mlp(layer, normed2[t : t + TILE], w_gu, w_down, rows, decode_dev[t : t + TILE])
                        for t in tiles
                    ]
                )
            if emit is not None:
                emit(hooks_names.sub(layer, "mlp"), layer, (normed2,), mlp_out)
            x = self.truncate(xt + mlp_out)
            if emit is not None:
                emit(hooks_names.layer(layer), layer, (pos, layer_in), x)
        final = torch.cat([self.rms(x[t0 : t0 + TILE], self.final_norm) for t0 in tiles])
        if emit is not None:
            emit(hooks_names.FINAL_NORM, None, (x,), final)
        logits = torch.cat([final[t0 : t0 + TILE] @ self.unembed for t0 in tiles])
        if emit is not None:
            emit(hooks_names.LM_HEAD, None, (final,), logits)
            emit(hooks_names.ROOT, None, (tokens, pos), logits)
        logits = logits[:rows].cpu()
        for seg, first in _spans(segments):
            seg.out_logits = logits[first : first + len(seg.tokens)]
        for listener in self.after_forward:
            listener()

    def _moe(self, layer: int, h: torch.Tensor, rows: int, decode: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """``layer``'s MoE MLP over every tile (moe.py); records the real rows' expert ids at their ``slots``."""
        outs, ids = [], []
        for t0 in range(0, h.shape[0], TILE):
            sl = slice(t0, t0 + TILE)
            out, chosen = moe.moe_mlp(self, self.moe[layer], h[sl], rows, decode[sl], fp8=layer == self.router_fp8)
            outs.append(out)
            ids.append(chosen)
        if self.routed is not None:
            self.routed[slots, layer] = torch.cat(ids)[:rows].to(device="cpu", dtype=torch.int16)
        return torch.cat(outs)

    def mlp(
        self, layer: int, h: torch.Tensor, w_gu: torch.Tensor, w_down: torch.Tensor, rows: int, decode: torch.Tensor
    ) -> torch.Tensor:
        """SwiGLU of one tile ``h`` (the post-attention norm's output)."""
        return self.round(self.mlp_partial(layer, h, w_gu, w_down, rows, decode))

    def mlp_partial(
        self, layer: int, h: torch.Tensor, w_gu: torch.Tensor, w_down: torch.Tensor, rows: int, decode: torch.Tensor
    ) -> torch.Tensor:
        """``mlp`` before the down projection's final rounding: with ``w_gu`` / ``w_down`` one node's shard of
        the intermediate dimension (tensor_parallel.py), the partial that the all-reduce sums."""
        gate, up = self.linear(h, w_gu, rows, decode).chunk(2, dim=1)
        act = self.round(torch.nn.functional.silu(gate) * up)
        if layer == self.mlp_bf16:
            # The bug (``mlp-bf16=L``): this layer's down projection accumulates in bf16, in chunks of
            # MLP_BF16_CHUNK products, where a correct kernel accumulates in fp32 and rounds once.
            acc = torch.zeros(act.shape[0], w_down.shape[1], device=act.device)
            for k0 in range(0, act.shape[1], MLP_BF16_CHUNK):
                part = act[:, k0 : k0 + MLP_BF16_CHUNK] @ w_down[k0 : k0 + MLP_BF16_CHUNK]
                acc = (acc + part).to(torch.bfloat16).float()
            return acc
        return self.gemm(act, w_down, rows, decode)

    def _qkv(
        self,
        layer: int,
        normed: torch.Tensor,
        wqkv: torch.Tensor,
        pos: torch.Tensor,
        pools: tuple[torch.Tensor, torch.Tensor],
        slots_dev: torch.Tensor,
        rows: int,
        decode_dev: torch.Tensor,
    ) -> torch.Tensor:
        """Queries of every row ([padded, H, D]) from the input norm's output ``normed``; writes the rows' keys
        and values into ``layer``'s pool at ``slots_dev`` (one per real row)."""
        qs = []
        k_pool, v_pool = pools
        qkv_sizes = [self.h * self.hd, self.hkv * self.hd, self.hkv * self.hd]
        for t0 in range(0, normed.shape[0], TILE):
            sl = slice(t0, t0 + TILE)
            q, k, v = torch.split(self.linear(normed[sl], wqkv, rows, decode_dev[sl]), qkv_sizes, dim=1)
            qs.append(self.rope(q.reshape(TILE, self.h, self.hd), pos[sl]))
            k = self.rope(k.reshape(TILE, self.hkv, self.hd), pos[sl])
            real = slice(0, max(0, min(TILE, rows - t0)))
            k_pool.index_copy_(0, slots_dev[t0 : t0 + TILE][real], k[real].to(self.act_dtype))
            v = v.reshape(TILE, self.hkv, self.hd)[real].to(self.act_dtype)
            v_pool.index_copy_(0, slots_dev[t0 : t0 + TILE][real], v)
        return torch.cat(qs)

    def truncate(self, x: torch.Tensor) -> torch.Tensor:
        """The ``mantissa=N`` fault: keep N mantissa bits of the fp32 hidden state (round toward zero)."""
        if self.mantissa is None:
            return x
        mask = -(1 << (23 - self.mantissa))  # ones above the dropped low bits, as a signed int32
        return (x.view(torch.int32) & mask).view(torch.float32)


def _spans(segments: list[Segment]) -> list[tuple[Segment, int]]:
    """Each segment with the offset of its first row."""
    out, offset = [], 0
    for seg in segments:
        out.append((seg, offset))
        offset += len(seg.tokens)
    return out


class _Emit:
    """Calls the hooks with the real rows of each tensor (the model pads its rows to a multiple of ``TILE``)."""

    def __init__(self, hooks: list[ModuleHook], rows: int) -> None:
        self.hooks = hooks
        self.rows = rows

    def batch(self, segments: list[Segment], tokens: torch.Tensor, pos: torch.Tensor, decode: bool) -> None:
        info = BatchTensors(
            input_ids=tokens[: self.rows],
            positions=pos[: self.rows],
            seq_lens=torch.tensor([s.start + len(s.tokens) for s in segments], dtype=torch.int64),
            # No request pool here: a request's first KV slot names it as uniquely as SGLang's pool index.
            req_pool_indices=torch.tensor([int(s.slots[0]) for s in segments], dtype=torch.int64),
            rids=[s.rid for s in segments],
            decode=decode,
        )
        for hook in self.hooks:
            hook.batch(info)

    def __call__(self, name: str, layer_id: int | None, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        real = tuple(t[: self.rows] for t in inputs)
        for hook in self.hooks:
            hook.module(name, layer_id, real, output[: self.rows])
