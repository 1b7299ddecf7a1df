"""The recurrent layer of the hybrid preset: a gated delta rule (GDN, as in Qwen3-Next / Kimi-Linear) with a
short causal convolution, whose state is what a prefix-cache hit must restore.

Per head, with ``q``, ``k`` L2-normalised, ``beta`` in (0, 1) and a decay ``g`` in (0, 1)::

    S' = g * S                       # S: [Dk, Dv] float32, the "mamba" state SGLang checkpoints
    S  = S' + k (beta * (v - k^T S'))  # delta rule: overwrite what k retrieved with v
    o  = q^T S

``q``, ``k``, ``v`` come from a depthwise causal conv of window ``CONV_WIDTH`` (4) over the input projection,
so the last three inputs are state too (the conv state). Both states are per request; the scheduler stores
copies every ``mamba_track_interval`` tokens with the radix tree (SGLang's mamba checkpoints).

Two kernels, as on a GPU:

* *stepwise* (decode; prefill too under ``--enable-deterministic-inference``): the recurrence above in
  float32, one token at a time; prefill and decode then agree bit for bit;
* *chunkwise* (prefill, production numerics): chunks aligned to multiples of ``CHUNK``; inside a chunk the
  state is carried as ``S = M S0 + U`` (``M`` the accumulated transition, ``U`` the chunk's increment) and at
  the chunk's end ``S0 <- M S0 + bf16(U)``, the bf16 cast of the increment that FLA's chunk kernel makes.
  Exact arithmetic gives the stepwise result; the cast gives the normal prefill/decode difference. A chunk
  cut by chunked prefill is continued, not closed, so a prompt's numbers never depend on its batch; decode
  folds an unfinished chunk in before its first step.

Faults: ``state-mantissa=N`` keeps N mantissa bits of S after every update (docs/background.md's sweep): after each
step in the stepwise kernel, at each chunk's end in the chunkwise one; ``state-bf16-decode`` stores S in bf16
after each decode step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

CONV_WIDTH = 4
CONV_STASH = CONV_WIDTH
"""Input rows kept as conv state: the 3 the conv needs plus one more (``conv-state-shift`` restores a window
shifted by one token, which needs the row before)."""
CHUNK = 64
"""Chunk length of the chunkwise prefill kernel (FLA's default chunk size)."""


@dataclass(frozen=True)
class GdnWeights:
    norm: torch.Tensor  # [d]
    w_in: torch.Tensor  # [d, 3 H D + 2 H]: q, k, v (conv inputs), then beta and decay logits per head
    conv: torch.Tensor  # [CONV_WIDTH, 3 H D] depthwise conv taps, oldest first
    w_out: torch.Tensor  # [H D, d]
    mlp_norm: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor


@dataclass
class RecurrentState:
    """One request's state of every recurrent layer, and the checkpoints taken while computing it."""

    ssm: dict[int, torch.Tensor] = field(default_factory=dict)
    """Layer → S, [H, D, D] float32."""
    conv: dict[int, torch.Tensor] = field(default_factory=dict)
    """Layer → the last ``CONV_STASH`` conv inputs, [CONV_STASH, 3 H D] (oldest first)."""
    checkpoints: dict[int, Snapshot] = field(default_factory=dict)
    """Tokens covered → a copy of the state after that many tokens (multiples of the track interval)."""
    pending: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """Layer → ``(M, U)`` of a chunk the chunkwise kernel has not finished (``ssm`` then holds its ``S0``): a
    prefill split by the scheduler at any position continues the same chunk, so how a batch splits a prompt
    never changes its numbers."""

    def settle(self, layer: int) -> torch.Tensor:
        """The state S with any unfinished chunk folded in (``M S0 + bf16(U)``, as at a chunk's end)."""
        if layer in self.pending:
            m, u = self.pending.pop(layer)
            self.ssm[layer] = torch.matmul(m, self.ssm[layer]) + u.to(torch.bfloat16).float()
        return self.ssm[layer]

    def snapshot(self) -> Snapshot:
        return Snapshot({k: v.clone() for k, v in self.ssm.items()}, {k: v.clone() for k, v in self.conv.items()})


@dataclass(frozen=True)
class Snapshot:
    """A checkpoint: the recurrent and conv state of every recurrent layer after some number of tokens."""

    ssm: dict[int, torch.Tensor]
    conv: dict[int, torch.Tensor]

    def restore(self, *, conv_shift: bool = False) -> RecurrentState:
        """A fresh state from this checkpoint; ``conv_shift`` is the ``conv-state-shift`` fault."""
        conv = {}
        for layer, c in self.conv.items():
            # The bug: the window is read one row too early (row -2 back to the oldest row).
            conv[layer] = torch.cat([c[:1], c[:-1]]) if conv_shift else c.clone()
        return RecurrentState({k: v.clone() for k, v in self.ssm.items()}, conv)


@dataclass(frozen=True)
class GdnNumerics:
    chunkwise: bool
    """Production prefill kernel (chunkwise, bf16 increment) instead of stepwise float32."""
    mantissa: int | None = None
    bf16_state: bool = False


def _truncate(x: torch.Tensor, bits: int | None) -> torch.Tensor:
    if bits is None:
        return x
    return (x.view(torch.int32) & -(1 << (23 - bits))).view(torch.float32)


def _step(
    s: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    s = s * g[:, None, None]
    kv_mem = (s * k[:, :, None]).sum(1)
    s = s + k[:, :, None] * ((v - kv_mem) * beta[:, None])[:, None, :]
    return s, (s * q[:, :, None]).sum(1)


def gdn(
    w: GdnWeights,
    proj: torch.Tensor,
    state: RecurrentState,
    layer: int,
    start: int,
    numerics: GdnNumerics,
    track_interval: int,
) -> torch.Tensor:
    """The layer's mixer for one segment: ``proj`` ([n, 3 H D + 2 H], the input projection of tokens at
    positions ``start..``) in, [n, H D] out; updates ``state`` and takes checkpoints at multiples of
    ``track_interval``."""
    n = proj.shape[0]
    width = w.conv.shape[1]
    n_heads = (proj.shape[1] - width) // 2
    hd = width // 3 // n_heads
    dev = proj.device
    if layer not in state.ssm:
        state.ssm[layer] = torch.zeros(n_heads, hd, hd, device=dev)
        state.conv[layer] = torch.zeros(CONV_STASH, width, device=dev)
    raw = torch.cat([state.conv[layer], proj[:, :width]])  # [STASH + n, C]
    base = CONV_STASH - CONV_WIDTH + 1
    acc = raw[base : base + n] * w.conv[0]
    for tap in range(1, CONV_WIDTH):  # a fixed order of adds: the same numbers for one token or many
        acc = acc + raw[base + tap : base + tap + n] * w.conv[tap]
    mixed = torch.nn.functional.silu(acc).view(n, 3, n_heads, hd)
    q = torch.nn.functional.normalize(mixed[:, 0], dim=-1)
    k = torch.nn.functional.normalize(mixed[:, 1], dim=-1)
    v = mixed[:, 2]
    beta = torch.sigmoid(proj[:, width : width + n_heads])
    g = torch.exp(-torch.nn.functional.softplus(proj[:, width + n_heads :]))
    out = torch.empty(n, n_heads, hd, device=dev)
    chunkwise = numerics.chunkwise
    s = state.ssm[layer] if chunkwise else state.settle(layer)
    t = 0
    while t < n:
        pos = start + t
        stop = min(n, t + (CHUNK - pos % CHUNK if chunkwise else 1))
        if chunkwise:
            carried = state.pending.pop(layer, None)
            m, u = carried if carried is not None else _fresh_chunk(s)
            m, u = _chunk(s, m, u, q[t:stop], k[t:stop], v[t:stop], beta[t:stop], g[t:stop], out[t:stop])
            if (start + stop) % CHUNK == 0:
                s = _truncate(torch.matmul(m, s) + u.to(torch.bfloat16).float(), numerics.mantissa)
            else:
                state.pending[layer] = (m, u)
        else:
            s, out[t] = _step(s, q[t], k[t], v[t], beta[t], g[t])
            s = _truncate(s, numerics.mantissa)
            if numerics.bf16_state:
                s = s.to(torch.bfloat16).float()
        t = stop
        covered = start + t
        if covered % track_interval == 0 or t == n:
            state.ssm[layer] = s
            state.conv[layer] = raw[t : t + CONV_STASH]
            if covered % track_interval == 0:
                snap = state.checkpoints.setdefault(covered, Snapshot({}, {}))
                snap.ssm[layer] = _settled_copy(state, layer)
                snap.conv[layer] = state.conv[layer].clone()
    return out.view(n, n_heads * hd)


def _fresh_chunk(s0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n_heads, hd, _ = s0.shape
    return torch.eye(hd, device=s0.device).expand(n_heads, hd, hd).clone(), torch.zeros_like(s0)


def _settled_copy(state: RecurrentState, layer: int) -> torch.Tensor:
    s = state.ssm[layer]
    if layer not in state.pending:
        return s.clone()
    m, u = state.pending[layer]
    return torch.matmul(m, s) + u.to(torch.bfloat16).float()


def _chunk(
    s0: torch.Tensor,
    m: torch.Tensor,
    u: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens of one chunk from ``S = M s0 + U``; writes ``out``, returns the new ``(M, U)``."""
    for t in range(q.shape[0]):
        m = m * g[t][:, None, None]
        u = u * g[t][:, None, None]
        km = (m * k[t][:, :, None]).sum(1)
        ku = (u * k[t][:, :, None]).sum(1)
        # k^T S' = (k^T M') S0 + k^T U': the first part moves into M, the second (with v) into U.
        m = m - beta[t][:, None, None] * k[t][:, :, None] * km[:, None, :]
        u = u + k[t][:, :, None] * ((v[t] - ku) * beta[t][:, None])[:, None, :]
        qm = (m * q[t][:, :, None]).sum(1)
        out[t] = (qm[:, :, None] * s0).sum(1) + (u * q[t][:, :, None]).sum(1)
    return m, u
