"""Production GEMM numerics: the one-row (decode) tiling differs from the many-row (prefill) tiling.

On a GPU a GEMM with a handful of rows runs another kernel than one with thousands: a split-K GEMV whose
partial sums meet in another order. The results agree to float32 rounding, and after the activation's bf16
rounding they differ in the last bit at some elements: that, plus split-KV attention (attention.py) and the
chunkwise recurrent kernel (recurrent.py), is why a real engine's decode logprobs are not bit-identical to a
prefill's unless it runs with ``--enable-deterministic-inference``.

Here decode rows take ``SPLIT_K`` partial products with float32 partials; prefill rows one product. The
choice is per row (per request kind), never per batch size, so the engine stays batch-invariant: the same
request gives the same numbers alone or in any batch (``batch_invariance`` passes), only prefill and decode
differ. ``--enable-deterministic-inference`` sends every row through the prefill kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import torch

SPLIT_K = 4
"""Partial products of the decode GEMM (float32 partials, summed in order)."""


def gemm(
    x: torch.Tensor,
    w: torch.Tensor,
    decode_rows: torch.Tensor,
    *,
    production: bool,
    small_batch_split: bool,
    round_act: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """``x @ w`` before its final rounding to the activation dtype, with the kernel each row takes.

    ``decode_rows`` ([rows] bool) marks rows that take the decode tiling (``production``); with
    ``small_batch_split`` (the ``batch-variant`` fault on a small batch) every row takes a two-way split-K whose
    partials are rounded by ``round_act``. ``Model.linear`` rounds the result; tensor_parallel.py sums the
    unrounded partial of each node's shard first.
    """
    if small_batch_split:
        cut = x.shape[1] // 2
        return round_act(x[:, :cut] @ w[:cut]) + round_act(x[:, cut:] @ w[cut:])
    if production and bool(decode_rows.any()):
        one = split_k(x, w)
        if bool(decode_rows.all()):
            return one
        return torch.where(decode_rows[:, None], one, x @ w)
    return x @ w


def split_k(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w`` as ``SPLIT_K`` partial products over the inner dimension, accumulated in float32."""
    k = x.shape[1]
    cuts = [k * i // SPLIT_K for i in range(SPLIT_K + 1)]
    out = x[:, cuts[0] : cuts[1]] @ w[cuts[0] : cuts[1]]
    for a, b in pairwise(cuts[1:]):
        out = out + x[:, a:b] @ w[a:b]
    return out
