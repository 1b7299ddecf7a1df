"""Deterministic weights: a corpus bigram model carried by the embeddings, plus seeded transformer layers.

No training loop: byte-bigram log-probabilities counted on a fixed training text (pydoc topics and a few
stdlib modules, both shipped with Python) give realistic next-token distributions, peaked after ``q`` and
flat after a space. A low-rank factor of that table goes into the embedding and unembedding, so the residual
stream carries the current byte; the seeded attention and MLP layers add a context-dependent part that is
large enough that a broken KV cache moves logits by a tenth of a nat or more, and small enough to keep the
distributions realistic. Same seed + same Python and torch versions give the same weights, at any thread count
(each singular pair's sign is fixed: :func:`_sign_fixed`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from precisionbot.builtin.bpe import cache_dir, cache_key
from precisionbot.builtin.moe import MoeWeights, build_moe_weights
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.recurrent import CONV_WIDTH, GdnWeights
from precisionbot.builtin.tokenizer import VOCAB_SIZE, Vocab, vocab_for
from precisionbot.builtin.training_text import training_documents

BIGRAM_RANK = 96
"""Rank of the bigram factor in the residual stream (the rest of d_model is free for the layers)."""
SHARPNESS = 1.9
"""Multiplies the bigram log-table: > 1 peaks the distributions, < 1 flattens them."""
SUBWORD_SHARPNESS = 1.4
"""``SHARPNESS`` for the subword vocabulary: a subword bigram is already more confident than a byte bigram."""
SMOOTHING = 2.0
"""Pseudo-counts spread by the unigram distribution (interpolated add-k smoothing)."""
SUBWORD_SMOOTHING = 6.0
"""``SMOOTHING`` for the subword vocabulary (its rows are seen less often, so they are more over-confident)."""
ATTN_OUT_SCALE = 0.2
MLP_OUT_SCALE = 0.05
"""Scales of the attention and MLP outputs added to the residual stream (relative to the bigram part)."""

# The heads (4 query heads over 2 KV heads by default). Tuned together so that each fault is caught by the
# check docs/builtin-engine.md names and the harmless variants pass (figures in docs/builtin-engine.md).
BROAD_QK_SCALE = 1.0
BROAD_OUT_GAIN = 3.0
"""The query heads of the first KV group attend broadly (P spread over the whole context, a bag of context
bytes): those P values fall under fp8's smallest subnormal at depth, so the unscaled fp8 P bug grows with
context."""
QK_SCALE = 0.8
FAST_PAIR_GAIN = 3.0
PEAKED_OUT_GAIN = 1.6
"""The peaked head leans on the fastest RoPE pair (1 radian per token), so which keys it picks depends on exact
relative positions (an off-by-one chunk position reshuffles it); its gain is bounded by fp8-scaled P, which
is coarsest where P is concentrated."""
LOCAL_SCORE = 2.0
LOCAL_OUT_GAIN = 1.0
"""The local head (the last query head): RoPE of a constant query and key gives a score
``LOCAL_SCORE * sum_i cos(theta_i * distance)``, peaked at the most recent tokens, as real models attend."""
CONSTANT = 2.0
"""Value of the constant residual dimension (the last one) that the local head reads."""
SINK_LOGIT = 3.0
GDN_HEADS = 4
GDN_HEAD_DIM = 16
GDN_OUT_SCALE = 1.0
"""Scale of the recurrent layer's output: it carries a slowly decaying summary of the whole context, so a
stale or shifted restored state moves logits clearly while the bf16 chunk increment stays a small noise."""
CONV_SCALE = 1.0
"""Spread of the conv taps (the current token's tap gets 1 more)."""
GDN_DECAY_BIAS = -4.5
"""Decay logit bias: ``g = exp(-softplus(bias + ...))`` is about 0.99 per token, a memory of about a hundred tokens."""
SWA_OUT_GAIN = 1.0
SWA_LOCAL_SINK_LOGIT = 12.0
"""The sliding-window layer's local head has a weak sink (the dense layer it copies has 12): in a hybrid model
the few attention layers carry the exact recent recall the recurrent layers blur, so which recent keys the
window holds matters."""
LOCAL_SINK_LOGIT = 12.0
"""Attention sinks (gpt-oss style) take most of the mass while the context is short, as in real models:
without them the first positions attend to one or two keys with large P, where any P rounding shows in full."""


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: torch.Tensor  # [d]
    sinks: torch.Tensor  # [H] attention-sink logit per query head (gpt-oss style: a softmax column, no value)
    wqkv: torch.Tensor  # [d, (H + 2 Hkv) D]
    wo: torch.Tensor  # [H D, d]
    mlp_norm: torch.Tensor  # [d]
    w_gate_up: torch.Tensor  # [d, 2 F]
    w_down: torch.Tensor  # [F, d]


@dataclass(frozen=True)
class ModelWeights:
    embed: torch.Tensor  # [V, d] float32 (the residual stream stays fp32)
    layers: tuple[LayerWeights | GdnWeights, ...]
    final_norm: torch.Tensor  # [d]
    unembed: torch.Tensor  # [d, V]
    moe: Mapping[int, MoeWeights] = field(default_factory=dict)
    """Layer -> its mixture-of-experts MLP (``EngineOptions.moe_layers``); those layers' dense MLP is unused."""


_TABLE_CACHE: dict[str, torch.Tensor] = {}


def bigram_logprobs(vocab: Vocab) -> torch.Tensor:
    """``[V, V]`` float64 table: row a = log P(next | current token a), smoothed; cached in memory."""
    if vocab.name in _TABLE_CACHE:
        return _TABLE_CACHE[vocab.name]
    v = vocab.size
    pairs = []
    for doc in training_documents():
        body = vocab.encode(doc.decode("utf-8", errors="replace"), add_bos=False)
        ids = torch.tensor([vocab.bos_id, *body, vocab.eos_id], dtype=torch.int64)
        pairs.append(ids[:-1] * v + ids[1:])
    counts = torch.bincount(torch.cat(pairs), minlength=v * v).to(torch.float64).view(v, v)
    unigram = counts.sum(0) + 0.5
    unigram[vocab.bos_id] = 0.0  # BOS never follows anything
    unigram /= unigram.sum()
    k = SMOOTHING if v <= 1024 else SUBWORD_SMOOTHING
    probs = (counts + k * unigram) / (counts.sum(1, keepdim=True) + k)
    table = torch.log(probs.clamp_min(1e-12))
    _TABLE_CACHE[vocab.name] = table
    return table


_WEIGHTS_CACHE: dict[tuple[object, ...], ModelWeights] = {}
_BUILD_LOCK = threading.Lock()


def build_weights(options: EngineOptions) -> ModelWeights:
    """Weights for ``options`` (float32 tensors on CPU; the model moves and rounds them); cached in memory."""
    o = options
    key: tuple[object, ...] = (o.seed, o.d_model, o.n_heads, o.n_kv_heads, o.head_dim, o.mlp_hidden)
    key += (o.layer_kinds, o.vocab_name, o.moe_layers)
    # One build at a time: _top_svd seeds torch's global generator, which two threads building at once (ranks of
    # a multi-node engine in one process, as the tests run them) would interleave into other weights.
    with _BUILD_LOCK:
        if key not in _WEIGHTS_CACHE:
            _WEIGHTS_CACHE[key] = _build(options)
        return _WEIGHTS_CACHE[key]


def _build(options: EngineOptions) -> ModelWeights:
    d, rank = options.d_model, min(BIGRAM_RANK, options.d_model - 8)
    gen = torch.Generator().manual_seed(options.seed * 1_000_003 + 17)

    vocab = vocab_for(options.vocab_name)
    left, right = _bigram_factors(vocab, rank)
    # Every embedding row gets the same norm (a filler in the free dims), so the final RMSNorm leaves the
    # bigram part intact and the unembedding can undo the fixed scale exactly.
    radius = float(left.norm(dim=1).max()) * 1.05
    target = d**0.5  # rms 1 per element
    embed = torch.zeros(vocab.size, d, dtype=torch.float64)
    embed[:, :rank] = left / radius * target
    embed[:, d - 1] = CONSTANT
    # The first 258 filler rows come from ``gen`` whatever the vocabulary, the rest of a subword vocabulary's
    # from their own stream, so the layers below get the same draws from ``gen`` with either vocabulary (the
    # hybrid preset's attention layers stay the tiny preset's).
    head = min(vocab.size, VOCAB_SIZE)
    fgen = torch.Generator().manual_seed(options.seed * 1_000_003 + 41)
    filler_dirs = torch.cat([
        torch.randn(head, d - rank - 1, generator=gen, dtype=torch.float64),
        torch.randn(vocab.size - head, d - rank - 1, generator=fgen, dtype=torch.float64),
    ])  # fmt: skip
    filler_dirs /= filler_dirs.norm(dim=1, keepdim=True)
    filler = (target**2 - embed[:, :rank].pow(2).sum(1) - CONSTANT**2).clamp_min(0).sqrt()
    embed[:, rank : d - 1] = filler_dirs * filler[:, None]
    unembed = torch.zeros(d, vocab.size, dtype=torch.float64)
    unembed[:rank] = right * radius / target

    h, hkv, hd, f = options.n_heads, options.n_kv_heads, options.head_dim, options.mlp_hidden

    def rand(*shape: int, scale: float) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    layers: list[LayerWeights | GdnWeights] = []
    kinds = options.layer_kinds
    for _ in (k for k in kinds if k != "gdn"):
        group = h // hkv
        head_scale = torch.tensor([BROAD_QK_SCALE if i < group else QK_SCALE for i in range(h)])
        wq = rand(d, h, hd, scale=1.0 / d**0.5) * head_scale[None, :, None].double()
        wk = rand(d, hkv, hd, scale=1.0 / d**0.5)
        gains = [BROAD_OUT_GAIN if i < group else PEAKED_OUT_GAIN for i in range(h)]
        sinks = [SINK_LOGIT] * h
        if hkv > 1:  # the local head: a constant query meets a constant part of the last KV head's keys
            half, amp = hd // 2, (LOCAL_SCORE * hd**0.5) ** 0.5 / CONSTANT
            wq[:, h - 1] = 0.0
            wq[d - 1, h - 1, :half] = amp
            wk[d - 1, hkv - 1, :half] += amp
            gains[h - 1] = LOCAL_OUT_GAIN
            sinks[h - 1] = LOCAL_SINK_LOGIT
            # The peaked head leans on the fastest RoPE pair (1 radian per token): which keys it picks then
            # depends on exact relative positions, so an off-by-one position (chunk-boundary) reshuffles it.
            for col in (0, half):
                wq[:, h - 2, col] *= FAST_PAIR_GAIN
                wk[:, hkv - 1, col] *= FAST_PAIR_GAIN
        wq, wk = wq.reshape(d, h * hd), wk.reshape(d, hkv * hd)
        out_gain = torch.tensor(gains, dtype=torch.float64)
        wv = rand(d, hkv * hd, scale=1.0 / d**0.5)
        layers.append(
            LayerWeights(
                attn_norm=torch.ones(d),
                sinks=torch.tensor(sinks, dtype=torch.float32),
                wqkv=torch.cat([wq, wk, wv], dim=1).float(),
                wo=(rand(h, hd, d, scale=ATTN_OUT_SCALE / (h * hd) ** 0.5) * out_gain[:, None, None])
                .reshape(h * hd, d)
                .float(),
                mlp_norm=torch.ones(d),
                w_gate_up=rand(d, 2 * f, scale=1.0 / d**0.5).float(),
                w_down=rand(f, d, scale=MLP_OUT_SCALE / f**0.5).float(),
            )
        )
    # Attention layers draw from ``gen`` in order, so the hybrid preset's full and sliding-window layers have
    # the tiny preset's weights; the recurrent layers draw from their own generator.
    attn = iter(layers)
    rgen = torch.Generator().manual_seed(options.seed * 1_000_003 + 29)
    ordered = [_gdn(d, f, rgen) if kind == "gdn" else next(attn) for kind in kinds]
    ordered = [_swa(lw) if kind == "swa" else lw for kind, lw in zip(kinds, ordered, strict=True)]
    return ModelWeights(
        embed=embed.float(),
        layers=tuple(ordered),
        final_norm=torch.ones(d),
        unembed=unembed.float(),
        moe=build_moe_weights(options.moe_layers, d, f, options.seed),
    )


def _bigram_factors(vocab: Vocab, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``left`` [V, r] and ``right`` [r, V] with ``left @ right`` the best rank-r fit of the centered table.
    The subword table's factors take seconds to compute, so they are cached on disk next to the vocabulary."""
    path = None
    if vocab.size > 1024:
        tag = f"{cache_key(vocab.size)}-{rank}-{SUBWORD_SHARPNESS}-{SUBWORD_SMOOTHING}-{torch.__version__}-tuned-signs"
        path = cache_dir() / f"bigram-{vocab.name}-{hashlib.sha256(tag.encode()).hexdigest()[:16]}.pt"
        try:
            cached = torch.load(path, weights_only=True)
            return cached["left"], cached["right"]
        except Exception:  # missing or corrupt: compute afresh
            pass
    table = bigram_logprobs(vocab) * (SHARPNESS if vocab.size <= 1024 else SUBWORD_SHARPNESS)
    centered = table - table.mean(1, keepdim=True)
    u, s, vh = _top_svd(centered, rank, TUNED_SIGNS.get(vocab.name, 0))
    left = u[:, :rank] * s[:rank].sqrt()
    right = s[:rank].sqrt()[:, None] * vh[:rank]
    if path is not None:
        _save(path, {"left": left.contiguous(), "right": right.contiguous()})
    return left, right


def _save(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Atomic write; an unwritable cache only costs time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".bigram-", suffix=".pt")
        os.close(fd)
        torch.save(tensors, tmp)
        os.replace(tmp, path)
    except OSError:
        pass


def _top_svd(a: torch.Tensor, rank: int, flips: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The leading ``rank`` singular triplets: exact for the byte table, randomized (seeded) for a subword
    table, where a full SVD of [V, V] would take most of a minute on 2 cores; signs as :func:`_sign_fixed`
    sets them with ``flips``."""
    if a.shape[0] <= 1024:
        u, s, vh = torch.linalg.svd(a)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            u, s, v = torch.svd_lowrank(a, q=rank + 16, niter=4)
        vh = v.T
    return _sign_fixed(u, s, vh, flips)


TUNED_SIGNS = {"byte": 0x21A182E83B4240407254A26B, "bpe-4096": 0x76AB12C958B482B0CE0617DC}
"""Per vocabulary, bit i set: singular pair i has its largest-magnitude left entry negative. These are the
signs LAPACK gave a 2-thread process, the model the tests' thresholds and the docs' figures were measured on;
recorded so that every machine and thread count builds that same model (:func:`_sign_fixed`)."""


def _sign_fixed(
    u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor, flips: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The triplets with each pair's sign fixed: the entry of largest magnitude in left singular vector i is
    made positive, or negative where bit i of ``flips`` is set, and its right vector flipped with it, so
    ``u @ diag(s) @ vh`` is unchanged.

    An SVD defines each pair only up to a shared sign, and LAPACK's choice follows the reduction order, which
    follows the thread count: without this, a process with 1 thread built a different model (the same
    ``left @ right``, but ``left`` and ``right`` feed different layers) than one with 2, and the demo's figures
    moved from machine to machine."""
    columns = torch.arange(u.shape[1])
    pivot = u.abs().argmax(dim=0)
    signs = torch.sign(u[pivot, columns])
    signs[signs == 0] = 1
    wanted = torch.tensor([-1.0 if flips >> int(i) & 1 else 1.0 for i in columns], dtype=u.dtype)
    signs = signs * wanted
    return u * signs, s, vh * signs[: vh.shape[0], None]


def _swa(lw: LayerWeights | GdnWeights) -> LayerWeights:
    assert isinstance(lw, LayerWeights)
    sinks = lw.sinks.clone()
    sinks[-1] = SWA_LOCAL_SINK_LOGIT
    return dataclasses.replace(lw, wo=lw.wo * SWA_OUT_GAIN, sinks=sinks)


def _gdn(d: int, f: int, gen: torch.Generator) -> GdnWeights:
    h, hd = GDN_HEADS, GDN_HEAD_DIM
    width = 3 * h * hd

    def rand(*shape: int, scale: float) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    w_in = rand(d, width + 2 * h, scale=1.0 / d**0.5)
    # The constant residual dimension is a bias: beta about 0.5, decay about 0.99 per token.
    w_in[:, width:] *= 0.3
    w_in[d - 1, width + h :] += GDN_DECAY_BIAS / CONSTANT
    conv = rand(CONV_WIDTH, width, scale=CONV_SCALE)
    conv[-1] += 1.0  # the current token dominates its window, as a trained short conv does
    return GdnWeights(
        norm=torch.ones(d),
        w_in=w_in.float(),
        conv=conv.float(),
        w_out=rand(h * hd, d, scale=GDN_OUT_SCALE / (h * hd) ** 0.5).float(),
        mlp_norm=torch.ones(d),
        w_gate_up=rand(d, 2 * f, scale=1.0 / d**0.5).float(),
        w_down=rand(f, d, scale=MLP_OUT_SCALE / f**0.5).float(),
    )
