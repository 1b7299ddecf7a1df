"""Distributions: KL from log-probabilities and from full-vocabulary logits, top-k comparisons (KL over a
top-k plus a rest bucket, flips, margins, ranks, shared-id |Δ|). Pure numpy, natural logs (nats).

Re-exported by ``precisionbot.metrics`` (``kl_divergence`` is part of its stable API). Shapes: ``[N, V]`` a
full vocabulary row per position, ``[N, k]`` a top-k list per position sorted by descending logprob.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

ArrayLike = npt.ArrayLike
F64 = npt.NDArray[np.float64]


def log_softmax(logits: ArrayLike, axis: int = -1) -> F64:
    """``x − logsumexp(x)`` in float64 (reference helper for small inputs; see ``kl_from_logits`` for big ones)."""
    x = np.asarray(logits, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out: F64 = x - (m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)))
    return out


def kl_divergence(logp: ArrayLike, logq: ArrayLike, axis: int = -1) -> F64:
    """KL(P‖Q) = Σ p (log p − log q) from log-probabilities (nats), reduced over ``axis``.

    Rows of any length; zero-probability entries of P (``log p = −inf``) contribute 0 even where Q is 0 too;
    an entry with p > 0 and q = 0 gives +inf. Seed 000: P = (0.7, 0.2, 0.1), Q = (0.6, 0.3, 0.1) → 0.0268.
    """
    lp = np.asarray(logp, dtype=np.float64)
    lq = np.asarray(logq, dtype=np.float64)
    if lp.shape != lq.shape:
        raise ValueError(f"kl_divergence: shapes differ {lp.shape} vs {lq.shape}")
    p = np.exp(lp)
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0, p * (lp - lq), 0.0)
    out: F64 = np.sum(terms, axis=axis)
    return out


def _load_rows(block: npt.NDArray[Any], bf16: bool, buf: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``block`` as float32 in (a leading slice of) the reusable buffer ``buf``."""
    out = buf[: block.shape[0]]
    if bf16:
        if block.dtype != np.uint16:
            raise ValueError("kl_from_logits: bf16=True expects the raw bfloat16 bits as a uint16 array")
        np.left_shift(block, 16, out=out.view(np.uint32), dtype=np.uint32)
    else:
        np.copyto(out, block, casting="same_kind")
    return out


class _Kernel:
    """The kernel of ``kl_from_logits``: three block-sized float32 buffers, reused block after block (fresh
    buffers per block cost page faults that took as long as the arithmetic)."""

    def __init__(self, rows: int, vocab: int) -> None:
        self.x = np.empty((rows, vocab), dtype=np.float32)
        self.d = np.empty((rows, vocab), dtype=np.float32)
        self.w = np.empty((rows, vocab), dtype=np.float32)

    def __call__(self, xb: npt.NDArray[Any], yb: npt.NDArray[Any], bf16: bool) -> F64:
        x = _load_rows(xb, bf16, self.x)
        d = _load_rows(yb, bf16, self.d)
        n = x.shape[0]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            impossible: npt.NDArray[np.bool_] = np.zeros(n, dtype=bool)
            np.subtract(x, d, out=d)  # d = x − y
            x -= np.max(x, axis=1, keepdims=True)
            e = np.exp(x, out=x)  # unnormalised p
            s = np.sum(e, axis=1)
            m = np.einsum("ij,ij->i", e, d) / s
            bad = ~np.isfinite(m)
            if bad.any():  # masked logits (−inf) somewhere in these rows: the careful path for them only
                rows = np.flatnonzero(bad)
                dd = d[rows]
                impossible[rows] = ((e[rows] > 0) & (dd == np.inf)).any(axis=1)
                dd[(e[rows] == 0) | ~np.isfinite(dd)] = 0.0
                d[rows] = dd
                m[rows] = np.einsum("ij,ij->i", e[rows], dd) / s[rows]
            nu = np.subtract(m[:, None].astype(np.float32), d, out=d)  # −u, u = d − m
            r = -np.einsum("ij,ij->i", e, nu) / s
            w = np.expm1(nu, out=self.w[:n])
            w -= nu  # e^{−u} − 1 + u ≥ 0
            t = np.einsum("ij,ij->i", e, w) / s
        r64 = r.astype(np.float64)
        # r is what float32 rounding left of E_p[u] (exactly 0 in exact arithmetic); keeping it makes the
        # identity exact for the m actually used.
        kl = r64 + np.log1p(t.astype(np.float64) - r64)
        out: F64 = np.where(impossible, np.inf, kl)
        return out


def kl_from_logits(
    logits_p: npt.NDArray[Any],
    logits_q: npt.NDArray[Any],
    *,
    bf16: bool = False,
    chunk_elements: int = 1 << 18,
    workers: int = 1,
) -> F64:
    """Full-vocabulary KL(softmax(x) ‖ softmax(y)) per row of ``[N, V]`` logits, in nats, shape ``[N]``.

    Works block by block of rows (about ``chunk_elements`` values, so a block stays in cache) in float32,
    so a ``[N, V]`` input (V up to ~256k; fp16, fp32, or bfloat16 passed as its uint16 bits with
    ``bf16=True``) never gets a full-size log_softmax copy: peak extra memory is three block-sized buffers per
    worker thread (numpy releases the GIL in its loops, so ``workers = os.cpu_count()`` scales; the default 1
    keeps the core free of machine reads).

    Written without cancellation: with ``d = x − y``, ``m ≈ E_p[d]``, ``u = d − m`` and ``r = E_p[u]`` (≈ 0),
    ``KL = E_p[d] + log E_p[e^{−d}] = r + log1p(Σ p (e^{−u} − 1 + u) − r)``; every term of the sum is ≥ 0, so
    KL ~ 1e-7 is resolved in float32 where the textbook ``Σ p d − lse(x) + lse(y)`` would lose it to rounding.
    Entries with ``x = −inf`` (masked) contribute nothing; ``y = −inf`` where p > 0 gives +inf.
    """
    if logits_p.shape != logits_q.shape or logits_p.ndim != 2:
        raise ValueError(f"kl_from_logits: need two [N, V] arrays of one shape; got {logits_p.shape}, {logits_q.shape}")
    n, v = logits_p.shape
    step = max(1, chunk_elements // max(v, 1))
    out = np.empty(n, dtype=np.float64)
    threads = max(1, min(workers, -(-n // step)))
    # Each worker owns a contiguous range of rows and its own buffers.
    bounds = np.linspace(0, n, threads + 1).astype(int)

    def run(worker: int) -> None:
        kernel = _Kernel(min(step, n), v)
        lo, hi = int(bounds[worker]), int(bounds[worker + 1])
        for start in range(lo, hi, step):
            end = min(start + step, hi)
            out[start:end] = kernel(logits_p[start:end], logits_q[start:end], bf16)

    if threads == 1:
        run(0)
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(run, range(threads)))
    return out


def _rest_logprob(lps: npt.NDArray[np.float64], floor: float, p: F64 | None = None) -> F64:
    """log(1 − Σ exp(lps)) per row, floored at ``floor``; via log and expm1 so a near-1 sum does not cancel.
    ``p``: ``exp(lps)`` when the caller has it. Logprobs are <= 0 (a rounding above allowed), so the
    exponentials need no shift; a row of −inf sums to 0 and leaves all the mass to the rest."""
    total = np.sum(np.exp(lps) if p is None else p, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):  # all mass in the top-k leaves log(0) = −inf: right
        rest = -np.expm1(np.minimum(np.log(total), 0.0))
        out: F64 = np.log(np.maximum(rest, floor))
    return out


def topk_rest_kl(
    ref_top_lp: ArrayLike,
    test_lp_at_ref_ids: ArrayLike,
    *,
    floor: float = 1e-12,
) -> F64:
    """KL(ref‖test) over the reference's top-k tokens plus one "rest" bucket, per row (nats), shape ``[N]``.

    ``ref_top_lp[N, k]``: the reference's top-k logprobs; ``test_lp_at_ref_ids[N, k]``: the candidate's logprobs
    of those same token ids (SGLang's ``token_ids_logprob``). ``p_rest = 1 − Σ p_kept`` and
    ``q_rest = 1 − Σ q_kept``, both floored at ``floor`` (kern: 1e-12). A coarse-graining of the full
    distributions, so it never exceeds the full-vocabulary KL (up to the floor).
    """
    lp = np.asarray(ref_top_lp, dtype=np.float64)
    lq = np.asarray(test_lp_at_ref_ids, dtype=np.float64)
    if lp.shape != lq.shape or lp.ndim != 2:
        raise ValueError(f"topk_rest_kl: need two [N, k] arrays of one shape; got {lp.shape}, {lq.shape}")
    p = np.exp(lp)
    with np.errstate(invalid="ignore"):
        terms = p * (lp - lq)
    if not np.isfinite(terms).all():  # a −inf on both sides at p = 0 contributes nothing
        terms = np.where(p > 0, terms, 0.0)
    p_rest = np.maximum(1.0 - np.sum(p, axis=1), floor)
    q_rest = np.maximum(1.0 - np.sum(np.exp(lq), axis=1), floor)
    out: F64 = np.sum(terms, axis=1) + p_rest * (np.log(p_rest) - np.log(q_rest))
    return out


def lookup_topk(
    ids: npt.NDArray[Any], top_ids: npt.NDArray[Any], top_lp: npt.NDArray[Any]
) -> tuple[F64, npt.NDArray[np.bool_]]:
    """For each row, the logprob in ``(top_ids, top_lp)`` of every id in ``ids[N, m]``; NaN where absent.

    Returns ``(lp[N, m], found[N, m])``.
    """
    eq = ids[:, :, None] == top_ids[:, None, :]
    found = eq.any(axis=2)
    idx = eq.argmax(axis=2)
    lp = np.take_along_axis(np.asarray(top_lp, dtype=np.float64), idx, axis=1)
    return np.where(found, lp, np.nan), found


CHUNK_ROWS = 65_536
"""Rows per block in the top-k comparisons whose temporaries grow with k² or 2k per row."""


@dataclass(frozen=True)
class TopkAlignment:
    """Where each id of one side's top-k list sits in the other side's, per row (``-1``: not listed there).

    Built by ``align_topk`` once per pair of lists and shared by the metrics that need it. Rows whose two
    lists are identical (the common case between two runs of one model: noise rarely reorders a top-k)
    cost one comparison; only the others get the ``[N, k, k]`` id match.
    """

    same: npt.NDArray[np.bool_]
    """``[N]``: both lists hold the same ids in the same order."""
    ref_in_test: npt.NDArray[np.int64]
    """``[N, k_ref]``: the position of each reference id in the candidate's list."""
    test_in_ref: npt.NDArray[np.int64]
    """``[N, k_test]``: the position of each candidate id in the reference's list."""


def align_topk(ref_ids: npt.NDArray[Any], test_ids: npt.NDArray[Any]) -> TopkAlignment:
    """The ``TopkAlignment`` of two ``[N, k]`` id arrays (one N; k may differ between the sides)."""
    rid, tid = np.asarray(ref_ids), np.asarray(test_ids)
    if rid.ndim != 2 or tid.ndim != 2 or rid.shape[0] != tid.shape[0]:
        raise ValueError(f"align_topk: need two [N, k] id arrays with one N; got {rid.shape}, {tid.shape}")
    n = rid.shape[0]
    same = (rid == tid).all(axis=1) if rid.shape == tid.shape else np.zeros(n, dtype=bool)
    differ = np.flatnonzero(~same)
    # Identical lists: each id sits where it is (a read-only view when no row differs: nothing to fill in).
    ref_in_test = np.broadcast_to(np.arange(rid.shape[1], dtype=np.int64), rid.shape)
    test_in_ref = np.broadcast_to(np.arange(tid.shape[1], dtype=np.int64), tid.shape)
    if differ.size:
        ref_in_test, test_in_ref = ref_in_test.copy(), test_in_ref.copy()
    for s in range(0, differ.size, CHUNK_ROWS):  # bounded memory: the match is k_test x k_ref per row
        rows = differ[s : s + CHUNK_ROWS]
        eq = tid[rows, :, None] == rid[rows, None, :]  # [m, k_test, k_ref]
        test_in_ref[rows] = np.where(eq.any(axis=2), eq.argmax(axis=2), -1)
        ref_in_test[rows] = np.where(eq.any(axis=1), eq.argmax(axis=1), -1)
    return TopkAlignment(same=same, ref_in_test=ref_in_test, test_in_ref=test_in_ref)


def _gather(lp: F64, positions: npt.NDArray[np.int64]) -> tuple[F64, npt.NDArray[np.bool_]]:
    """``lp`` at ``positions`` per row (``-1``: not listed, read as column 0 and marked not found)."""
    found = positions >= 0
    return np.take_along_axis(lp, np.maximum(positions, 0), axis=1), found


def topk_union_kl(
    ref_ids: npt.NDArray[Any],
    ref_lp: ArrayLike,
    test_ids: npt.NDArray[Any],
    test_lp: ArrayLike,
    *,
    floor: float = 1e-12,
    alignment: TopkAlignment | None = None,
) -> F64:
    """KL(ref‖test) over the union of both sides' top-k plus a rest bucket, when each side knows only its own top-k.

    An id missing from one side's top-k gets, on that side, an equal share of that side's rest mass, capped at
    its k-th probability (it ranked below it); the rest bucket keeps what is left (floored). An estimate, not a
    bound: prefer ``topk_rest_kl`` with the candidate's logprobs of the reference ids when the engine gives them.
    ``alignment``: ``align_topk(ref_ids, test_ids)`` when the caller has it already.
    """
    rid = np.asarray(ref_ids)
    tid = np.asarray(test_ids)
    rlp = np.asarray(ref_lp, dtype=np.float64)
    tlp = np.asarray(test_lp, dtype=np.float64)
    if rid.shape != rlp.shape or tid.shape != tlp.shape or rid.ndim != 2 or rid.shape[0] != tid.shape[0]:
        raise ValueError("topk_union_kl: ids and logprobs must be [N, k] arrays with one N")
    a = alignment if alignment is not None else align_topk(rid, tid)
    if a.same.all():
        return _same_list_kl(rlp, tlp, floor)
    out = np.empty(rid.shape[0], dtype=np.float64)
    same = np.flatnonzero(a.same)
    if same.size:
        out[same] = _same_list_kl(rlp[same], tlp[same], floor)
    other = np.flatnonzero(~a.same)
    for s in range(0, other.size, CHUNK_ROWS):  # bounded memory: a dozen [rows, 2k] temporaries
        rows = other[s : s + CHUNK_ROWS]
        out[rows] = _union_kl_rows(rlp[rows], tlp[rows], a.ref_in_test[rows], a.test_in_ref[rows], floor)
    return out


def _same_list_kl(rlp: F64, tlp: F64, floor: float) -> F64:
    """The union KL of rows whose two lists hold the same ids in the same order: the union is that list and
    nothing is missing on either side, so it is the top-k terms plus the two rest buckets. Written in place
    (each fresh ``[N, k]`` temporary costs page faults that took longer than the arithmetic)."""
    p = np.exp(rlp)
    terms = np.subtract(rlp, tlp)
    with np.errstate(invalid="ignore"):
        np.multiply(terms, p, out=terms)
    if not np.isfinite(terms).all():  # −inf on both sides at p = 0 contributes nothing (kl_divergence's rule)
        terms = np.where(p > 0, terms, 0.0)
    rest_p, rest_q = _rest_logprob(rlp, floor, p), _rest_logprob(tlp, floor)
    out: F64 = np.sum(terms, axis=1) + np.exp(rest_p) * (rest_p - rest_q)
    return out


def _union_kl_rows(
    rlp: F64, tlp: F64, ref_in_test: npt.NDArray[np.int64], test_in_ref: npt.NDArray[np.int64], floor: float
) -> F64:
    # Union columns: all of ref's ids, then test's ids that ref does not list (the others masked out). The
    # test ids in the union are by construction missing on ref's side, so ref needs no lookup.
    test_listed_in_ref = test_in_ref >= 0
    test_at_ref, ref_listed_in_test = _gather(tlp, ref_in_test)
    ones_r, ones_t = np.ones_like(ref_listed_in_test), np.ones_like(test_listed_in_ref)
    in_union = np.concatenate([ones_r, ~test_listed_in_ref], axis=1)
    looked = (
        (np.concatenate([rlp, np.full_like(tlp, -np.inf)], axis=1), np.concatenate([ones_r, ~ones_t], axis=1)),
        (np.concatenate([test_at_ref, tlp], axis=1), np.concatenate([ref_listed_in_test, ones_t], axis=1)),
    )
    sides = []
    for own_lp, (lp, found) in zip((rlp, tlp), looked, strict=True):
        rest = np.exp(_rest_logprob(own_lp, 0.0))
        missing = in_union & ~found
        n_missing = missing.sum(axis=1)
        share = np.minimum(rest / np.maximum(n_missing, 1), np.exp(own_lp[:, -1]))
        with np.errstate(divide="ignore"):
            est = np.log(np.maximum(share, floor))
        lp = np.where(missing, est[:, None], lp)
        lp = np.where(in_union, lp, -np.inf)
        left = np.maximum(rest - share * n_missing, floor)
        sides.append(np.concatenate([lp, np.log(left)[:, None]], axis=1))
    return kl_divergence(sides[0], sides[1])


def top1_flip(ref_ids: npt.NDArray[Any], test_ids: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """True where the top-1 token differs; ``[N, k]`` sorted lists (or ``[N]`` top-1 ids) in, ``[N]`` out."""
    r = np.asarray(ref_ids)
    t = np.asarray(test_ids)
    r1 = r[:, 0] if r.ndim == 2 else r
    t1 = t[:, 0] if t.ndim == 2 else t
    out: npt.NDArray[np.bool_] = r1 != t1
    return out


def margin(top_lp: ArrayLike) -> F64:
    """Top-1 minus top-2 logprob per row (nats): how far a position is from a flip. ``[N, k≥2]`` → ``[N]``."""
    lp = np.asarray(top_lp, dtype=np.float64)
    if lp.ndim != 2 or lp.shape[1] < 2:
        raise ValueError(f"margin: need [N, k>=2] top-k logprobs; got shape {lp.shape}")
    out: F64 = lp[:, 0] - lp[:, 1]
    return out


def rank_of(token_ids: ArrayLike, top_ids: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """0-based rank of ``token_ids[N]`` in each row of ``top_ids[N, k]``; ``k`` where it is not listed."""
    t = np.asarray(token_ids)
    eq = np.asarray(top_ids) == t[:, None]
    out: npt.NDArray[np.int64] = np.where(eq.any(axis=1), eq.argmax(axis=1), eq.shape[1]).astype(np.int64)
    return out


def shared_topk_abs_delta(
    ref_ids: npt.NDArray[Any],
    ref_lp: ArrayLike,
    test_ids: npt.NDArray[Any],
    test_lp: ArrayLike,
    *,
    alignment: TopkAlignment | None = None,
) -> tuple[F64, F64, npt.NDArray[np.int64]]:
    """|Δ logprob| over the token ids both top-k lists share, per row: ``(max[N], mean[N], common[N])``.

    SGLang's ``test_logprobs.py`` rule: a sample fails if its max or mean |Δ| exceeds 1e-5 (deterministic
    builds). Rows with no shared id give NaN max/mean and ``common = 0``. ``alignment``: as in ``topk_union_kl``.
    """
    a = alignment if alignment is not None else align_topk(np.asarray(ref_ids), np.asarray(test_ids))
    tlp = np.asarray(test_lp, dtype=np.float64)
    if a.same.all() and tlp.shape[1]:  # every list identical: each id's logprob is in the same column
        d = np.subtract(np.asarray(ref_lp, dtype=np.float64), tlp)
        np.abs(d, out=d)
        return d.max(axis=1), d.mean(axis=1), np.full(d.shape[0], d.shape[1], dtype=np.int64)
    t_at_r, found = _gather(tlp, a.ref_in_test)
    d = np.abs(np.asarray(ref_lp, dtype=np.float64) - t_at_r)
    common = found.sum(axis=1).astype(np.int64)
    none = common == 0
    mx: F64 = np.where(none, np.nan, np.max(np.where(found, d, -np.inf), axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean: F64 = np.where(none, np.nan, np.sum(np.where(found, d, 0.0), axis=1) / common)
    return mx, mean, common
