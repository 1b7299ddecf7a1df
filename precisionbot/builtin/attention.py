"""Attention over the paged KV pool: full and sliding-window layers, two kernels.

The *blocked* kernel (every prefill; decode too under ``--enable-deterministic-inference``) treats queries in
aligned blocks of ``QBLOCK`` positions: the queries of block ``b`` meet keys ``[k0, (b + 1) * QBLOCK)`` in one
GEMM whose shape depends only on ``b`` (``k0`` is 0 for full attention and the first key block a query of the
block can see for a sliding window). A decode step computes the same block with one real row, so its numbers
equal a prefill's (any chunking) bit for bit.

The *split-KV* kernel (decode, production numerics) is flash-decoding's: the keys are cut into splits of
``KV_SPLIT``, each split gets its own max, sum and un-normalised ``P @ V``, and the partials are merged with
their max corrections. Mathematically the same softmax; the sums run in another order, so its fp32 results
differ from the blocked kernel's in the last bits, as a GPU decode kernel's differ from its prefill kernel's.

A sliding-window layer's query at position ``i`` sees keys ``(i - W, i]``, read from the SWA pool through its
own slot mapping (swa_cache.py): positions whose pages were freed map to the null page and are masked, being
out of the window anyway. ``swa-decode-window`` (decode's window one token shorter once generation passes W)
is applied by model.py; ``swa-early-evict`` is a real use-after-free in swa_cache.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

QBLOCK = 16
"""Query positions per attention block (keys are padded to a multiple of it)."""
KV_SPLIT = 64
"""Keys per split of the split-KV decode kernel."""
NULL_SLOT = 0
"""A KV slot that is never allocated: it pads key blocks (always masked)."""
FP8_MAX = 448.0


@dataclass(frozen=True)
class Window:
    """What one segment's queries may see in one layer."""

    size: int | None
    """Keys a query sees (itself included); None = full attention."""


def p_transform(p: torch.Tensor, fault: str | None) -> torch.Tensor:
    """The attention-P faults (``attn-p-*``) applied to normalised probabilities."""
    if fault == "attn-p-fp8":
        return p.to(torch.float8_e4m3fn).float()
    if fault == "attn-p-fp8-scaled":
        return (p * FP8_MAX).to(torch.float8_e4m3fn).float() / FP8_MAX
    if fault == "attn-p-bf16":
        return p.to(torch.bfloat16).float()
    return p


def _key_mask(positions: torch.Tensor, keys: torch.Tensor, window: Window) -> torch.Tensor:
    """True where query position ``positions[r]`` must not see key position ``keys[c]``."""
    hidden = keys[None, :] > positions[:, None]
    if window.size is not None:
        hidden |= keys[None, :] <= positions[:, None] - window.size
    return hidden


def blocked(
    q: torch.Tensor,
    keys: torch.Tensor,
    vals: torch.Tensor,
    sink: torch.Tensor,
    start: int,
    window: Window,
    fault: str | None,
) -> torch.Tensor:
    """Causal attention of ``q`` ([Hkv, G, n, D], positions ``start..``) over ``keys``/``vals`` ([L, Hkv, D],
    L a multiple of QBLOCK covering every position up to the last query); returns [Hkv, G, n, D]."""
    hkv, group, n, hd = q.shape
    end = start + n
    out = torch.empty(hkv, group, n, hd, device=q.device)
    scale = hd**-0.5
    for block in range(start // QBLOCK, (end - 1) // QBLOCK + 1):
        base = block * QBLOCK
        r0, r1 = max(start - base, 0), min(end - base, QBLOCK)
        width = base + QBLOCK
        k0 = 0 if window.size is None else max(0, base - window.size + 1) // QBLOCK * QBLOCK
        qb = torch.zeros(hkv, group, QBLOCK, hd, device=q.device)
        qb[:, :, r0:r1] = q[:, :, base + r0 - start : base + r1 - start]
        kb = keys[k0:width].permute(1, 2, 0)
        scores = torch.matmul(qb.view(hkv, group * QBLOCK, hd), kb)
        scores = (scores * scale).view(hkv, group, QBLOCK, width - k0)
        qpos = torch.arange(base, width, device=q.device)
        kpos = torch.arange(k0, width, device=q.device)
        scores.masked_fill_(_key_mask(qpos, kpos, window), float("-inf"))
        probs = torch.zeros_like(scores)
        real = scores[:, :, r0:r1]
        s = sink.expand(hkv, group, r1 - r0, 1)
        probs[:, :, r0:r1] = p_transform(torch.softmax(torch.cat([real, s], dim=-1), dim=-1)[..., : width - k0], fault)
        ob = torch.matmul(probs.view(hkv, group * QBLOCK, width - k0), vals[k0:width].permute(1, 0, 2))
        out[:, :, base + r0 - start : base + r1 - start] = ob.view(hkv, group, QBLOCK, hd)[:, :, r0:r1]
    return out


def split_kv(
    q: torch.Tensor,
    keys: torch.Tensor,
    vals: torch.Tensor,
    sink: torch.Tensor,
    pos: int,
    window: Window,
    fault: str | None,
) -> torch.Tensor:
    """One decode query ``q`` ([Hkv, G, 1, D] at position ``pos``) by flash-decoding: per-split partial
    softmax over ``KV_SPLIT`` keys, merged with max corrections; returns [Hkv, G, 1, D]."""
    hkv, group, _, hd = q.shape
    k0 = 0 if window.size is None else max(0, pos - window.size + 1)
    n_keys = pos + 1 - k0
    n_split = -(-n_keys // KV_SPLIT)
    padded = n_split * KV_SPLIT
    kpos = torch.arange(k0, k0 + padded, device=q.device)
    kk = torch.zeros(padded, hkv, hd, device=q.device)
    vv = torch.zeros(padded, hkv, hd, device=q.device)
    kk[:n_keys], vv[:n_keys] = keys[k0 : pos + 1], vals[k0 : pos + 1]
    scores = torch.matmul(q.view(hkv, group, hd), kk.permute(1, 2, 0)) * hd**-0.5  # [Hkv, G, padded]
    hidden = _key_mask(torch.tensor([pos], device=q.device), kpos, window)[0]
    scores = scores.masked_fill(hidden, float("-inf")).view(hkv, group, n_split, KV_SPLIT)
    m_split = scores.amax(-1, keepdim=True).clamp_min(-1e30)  # an all-masked split contributes nothing
    sinkv = sink.view(hkv, group, 1, 1)
    m = torch.maximum(m_split.amax(-2, keepdim=True), sinkv)  # [Hkv, G, 1, 1]
    p = torch.exp(scores - m_split)  # un-normalised, per split
    l_split = p.sum(-1, keepdim=True)
    corr = torch.exp(m_split - m)
    total = (l_split * corr).sum(-2, keepdim=True) + torch.exp(sinkv - m)
    v_split = vv.permute(1, 0, 2).reshape(hkv, 1, n_split, KV_SPLIT, hd)
    if fault is not None:
        # The P faults act on normalised probabilities, as in the blocked kernel.
        pn = p_transform(p * corr / total, fault)
        out = torch.matmul(pn.unsqueeze(-2), v_split.expand(hkv, group, n_split, KV_SPLIT, hd)).sum(2)
        return out.view(hkv, group, 1, hd)
    o_split = torch.matmul(p.unsqueeze(-2), v_split.expand(hkv, group, n_split, KV_SPLIT, hd))  # [.., S, 1, D]
    out = (o_split * corr.unsqueeze(-1)).sum(2) / total.view(hkv, group, 1, 1)
    return out.view(hkv, group, 1, hd)
