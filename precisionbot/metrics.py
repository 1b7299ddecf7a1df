"""The precision math: pure numpy, natural logs (nats), no I/O. Stable API: ``k3``, ``kl_divergence``,
``flip_probability``, ``tail_stats`` (CONTRACT.md); the rest is public but may grow.

Shapes: ``[N]`` is one value per scored position, ``[N, V]`` a full vocabulary row per position, ``[N, k]``
a top-k list per position sorted by descending logprob (column 0 is the top-1).

Sign convention: ``delta = lp_ref - lp_test`` (SGLang's ``logr = replay - generation``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

ArrayLike = npt.ArrayLike
F64 = npt.NDArray[np.float64]

DEFAULT_THRESHOLDS = (1e-4, 1e-3, 1e-2)
"""Per-token k3 thresholds whose exceedance fractions every report shows."""

PERCENTILES = (0.1, 1.0, 5.0, 10.0, 50.0, 90.0, 95.0, 99.0, 99.9)
"""llama.cpp's ``--kl-divergence`` percentile set (plus min and max), so figures compare with the community's."""

_SERIES_CUTOFF = 1e-2


def k3(delta: ArrayLike) -> F64:
    """Schulman's k3 estimator per token: ``exp(δ) − 1 − δ`` (nats), elementwise, float64.

    ``δ = lp_ref − lp_test``; k3 ≥ 0 with equality only at δ = 0, ≈ δ²/2 for small δ. ``expm1(δ) − δ``
    cancels for tiny δ (1e-8 would give 0 or noise), so below |δ| = 1e-2 a Taylor series is used; its
    truncation error there is below 1e-15 relative.

    >>> float(k3(1e-8))
    5.0000000166666665e-17
    """
    d = np.asarray(delta, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.atleast_1d(np.expm1(d) - d)
    d = np.atleast_1d(d)
    small = np.abs(d) < _SERIES_CUTOFF
    if np.any(small):
        s = d[small]
        # δ²/2! + δ³/3! + ... + δ⁷/7!, Horner form.
        out[small] = s * s * (1 / 2 + s * (1 / 6 + s * (1 / 24 + s * (1 / 120 + s * (1 / 720 + s / 5040)))))
    result: F64 = out.reshape(np.shape(delta))
    return result


def logprob_errors(lp_ref: ArrayLike, lp_test: ArrayLike) -> dict[str, float]:
    """Error of the test path's logprobs against the reference (nats): MSE, RMSE, max |Δ|, mean Δ.

    Δ is ``lp_ref − lp_test``, the sign convention everywhere else (so ``mean`` agrees with the checks'
    ``mean_delta``). Seed 000: |Δ| = 0.1, 0.1, 0.05, 0.2 → MSE 0.015625, max error 0.2.
    """
    a = np.asarray(lp_ref, dtype=np.float64)
    b = np.asarray(lp_test, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"logprob_errors: shapes differ {a.shape} vs {b.shape}")
    if a.size == 0:
        raise ValueError("logprob_errors: no positions to compare (empty input)")
    d = a - b
    mse = float(np.mean(d * d))
    return {
        "mse": mse,
        "rmse": math.sqrt(mse),
        "max_abs": float(np.max(np.abs(d))),
        "mean": float(np.mean(d)),
    }


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


def _as_float32_rows(block: npt.NDArray[Any], bf16: bool) -> npt.NDArray[np.float32]:
    if bf16:
        if block.dtype != np.uint16:
            raise ValueError("kl_from_logits: bf16=True expects the raw bfloat16 bits as a uint16 array")
        bits: npt.NDArray[np.uint32] = np.left_shift(block, 16, dtype=np.uint32)
        return bits.view(np.float32)
    return block.astype(np.float32)  # always a fresh buffer: the kernel works in place


def _kl_rows(xb: npt.NDArray[Any], yb: npt.NDArray[Any], bf16: bool) -> F64:
    """The kernel of ``kl_from_logits`` for one block of rows (fresh float32 buffers, updated in place)."""
    x = _as_float32_rows(xb, bf16)
    d = _as_float32_rows(yb, bf16)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        impossible: npt.NDArray[np.bool_] = np.zeros(d.shape[0], dtype=bool)
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
        impossible &= bad
        nu = np.subtract(m[:, None].astype(np.float32), d, out=d)  # −u, u = d − m
        r = -np.einsum("ij,ij->i", e, nu) / s
        w = np.expm1(nu)
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
    ``bf16=True``) never gets a full-size log_softmax copy: peak extra memory is a few block-sized buffers per
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
    starts = range(0, n, step)
    out = np.empty(n, dtype=np.float64)

    def run(start: int) -> None:
        out[start : start + step] = _kl_rows(logits_p[start : start + step], logits_q[start : start + step], bf16)

    threads = min(max(workers, 1), len(starts))
    if threads <= 1:
        for start in starts:
            run(start)
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(run, starts))
    return out


def _rest_logprob(lps: npt.NDArray[np.float64], floor: float) -> F64:
    """log(1 − Σ exp(lps)) per row, floored at ``floor``; via expm1 so a near-1 sum does not cancel."""
    with np.errstate(divide="ignore"):  # a top-k holding all the mass leaves log(0) = −inf, which is right
        lse = np.logaddexp.reduce(lps, axis=-1)
        rest = -np.expm1(np.minimum(lse, 0.0))
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


def topk_union_kl(
    ref_ids: npt.NDArray[Any],
    ref_lp: ArrayLike,
    test_ids: npt.NDArray[Any],
    test_lp: ArrayLike,
    *,
    floor: float = 1e-12,
    chunk_rows: int = 65_536,
) -> F64:
    """KL(ref‖test) over the union of both sides' top-k plus a rest bucket, when each side knows only its own top-k.

    An id missing from one side's top-k gets, on that side, an equal share of that side's rest mass, capped at
    its k-th probability (it ranked below it); the rest bucket keeps what is left (floored). An estimate, not a
    bound: prefer ``topk_rest_kl`` with the candidate's logprobs of the reference ids when the engine gives them.
    """
    rid = np.asarray(ref_ids)
    tid = np.asarray(test_ids)
    rlp = np.asarray(ref_lp, dtype=np.float64)
    tlp = np.asarray(test_lp, dtype=np.float64)
    if rid.shape != rlp.shape or tid.shape != tlp.shape or rid.ndim != 2 or rid.shape[0] != tid.shape[0]:
        raise ValueError("topk_union_kl: ids and logprobs must be [N, k] arrays with one N")
    out = np.empty(rid.shape[0], dtype=np.float64)
    for s in range(0, rid.shape[0], chunk_rows):
        sl = slice(s, s + chunk_rows)
        out[sl] = _union_kl_block(rid[sl], rlp[sl], tid[sl], tlp[sl], floor)
    return out


def _union_kl_block(rid: npt.NDArray[Any], rlp: F64, tid: npt.NDArray[Any], tlp: F64, floor: float) -> F64:
    # Union columns: all of ref's ids, then test's ids that ref does not list (others masked out).
    test_new = ~(tid[:, :, None] == rid[:, None, :]).any(axis=2)
    ids = np.concatenate([rid, tid], axis=1)
    in_union = np.concatenate([np.ones_like(rid, dtype=bool), test_new], axis=1)
    sides = []
    for own_ids, own_lp in ((rid, rlp), (tid, tlp)):
        lp, found = lookup_topk(ids, own_ids, own_lp)
        rest = np.exp(_rest_logprob(own_lp, 0.0))
        missing = in_union & ~found
        n_missing = np.maximum(missing.sum(axis=1), 1)
        share = np.minimum(rest / n_missing, np.exp(own_lp[:, -1]))
        with np.errstate(divide="ignore"):
            est = np.log(np.maximum(share, floor))
        lp = np.where(missing, est[:, None], lp)
        lp = np.where(in_union, lp, -np.inf)
        left = np.maximum(rest - share * missing.sum(axis=1), floor)
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
    ref_ids: npt.NDArray[Any], ref_lp: ArrayLike, test_ids: npt.NDArray[Any], test_lp: ArrayLike
) -> tuple[F64, F64, npt.NDArray[np.int64]]:
    """|Δ logprob| over the token ids both top-k lists share, per row: ``(max[N], mean[N], common[N])``.

    SGLang's ``test_logprobs.py`` rule: a sample fails if its max or mean |Δ| exceeds 1e-5 (deterministic
    builds). Rows with no shared id give NaN max/mean and ``common = 0``.
    """
    t_at_r, found = lookup_topk(np.asarray(ref_ids), np.asarray(test_ids), np.asarray(test_lp))
    d = np.abs(np.asarray(ref_lp, dtype=np.float64) - t_at_r)
    common = found.sum(axis=1).astype(np.int64)
    none = common == 0
    mx: F64 = np.where(none, np.nan, np.max(np.where(found, d, -np.inf), axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean: F64 = np.where(none, np.nan, np.sum(np.where(found, d, 0.0), axis=1) / common)
    return mx, mean, common


def rel_diff(x: ArrayLike, y: ArrayLike) -> float:
    """SGLang's tensor comparator: ``1 − 2Σxy / Σ(x² + y²)`` in float64 (0 = identical, 1 = orthogonal).

    Two all-zero tensors compare as 0. Threshold used upstream: 1e-3.
    """
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"rel_diff: shapes differ {np.shape(x)} vs {np.shape(y)}")
    denom = float(np.dot(a, a) + np.dot(b, b))
    if denom == 0.0:
        return 0.0
    return 1.0 - 2.0 * float(np.dot(a, b)) / denom


def threshold_key(threshold: float) -> str:
    """The JSON key of a threshold: 1e-4 → ``"1e-4"``, 2.5e-3 → ``"2.5e-3"``."""
    return np.format_float_scientific(threshold, trim="-", exp_digits=1)


def percentile_key(q: float) -> str:
    """``p50``, ``p99``, ``p999`` (99.9), ``p001`` (0.1) ...: the stats key of a percentile."""
    if q == int(q) and q >= 10:
        return f"p{int(q)}"
    if q == int(q):
        return f"p0{int(q)}"
    return "p" + f"{q:g}".replace(".", "").rjust(3, "0")


def tail_stats(values: ArrayLike, thresholds: Sequence[float] = DEFAULT_THRESHOLDS) -> dict[str, Any]:
    """Tail statistics of per-position values (k3, KL, |Δ| ...): the ``stats`` keys of result.json.

    Keys: ``positions``, ``mean``, ``mean_se`` (standard error), ``min``, the llama.cpp percentiles
    (``p001`` = 0.1 %, ``p01``, ``p05``, ``p10``, ``p50``, ``p90``, ``p95``, ``p99``, ``p999``; linear
    interpolation), ``max``, ``argmax`` (index of the max), ``frac_over`` (``{"1e-4": fraction > 1e-4, ...}``),
    ``nonfinite`` (count of NaN/inf) and ``nonfinite_at`` (their first indices). NaN or inf is never averaged
    away: statistics are over the finite values and the non-finite ones are reported, so a verdict can fail on
    them. Empty input is a ``ValueError``.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise ValueError("tail_stats: no positions (empty input); a check that compared nothing cannot pass")
    finite = np.isfinite(v)
    bad = np.flatnonzero(~finite)
    f = v[finite]
    out: dict[str, Any] = {
        "positions": int(v.size),
        "nonfinite": int(bad.size),
        "nonfinite_at": bad[:10].tolist(),
    }
    if f.size == 0:
        out.update({"mean": math.nan, "mean_se": math.nan, "min": math.nan, "max": math.nan, "argmax": None})
        out.update({percentile_key(q): math.nan for q in PERCENTILES})
        out["frac_over"] = {threshold_key(t): math.nan for t in thresholds}
        return out
    qs = np.percentile(f, PERCENTILES)
    out["mean"] = float(np.mean(f))
    out["mean_se"] = float(np.std(f, ddof=1) / math.sqrt(f.size)) if f.size > 1 else 0.0
    out["min"] = float(np.min(f))
    out.update({percentile_key(q): float(x) for q, x in zip(PERCENTILES, qs, strict=True)})
    out["max"] = float(np.max(f))
    out["argmax"] = int(np.flatnonzero(finite)[np.argmax(f)])
    out["frac_over"] = {threshold_key(t): float(np.count_nonzero(f > t) / v.size) for t in thresholds}
    return out


def mean_block_se(values: ArrayLike, block: int = 64) -> tuple[float, float]:
    """Mean of ``values`` and its standard error from means of consecutive blocks of ``block`` positions.

    Neighbouring tokens' errors are correlated (they share context), so the textbook ``σ/√N`` overstates how
    sure a mean is; block means are close to independent. With fewer than two blocks the plain standard error
    is returned. NaN/inf are ignored; an empty input is a ``ValueError``.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        raise ValueError("mean_block_se: no finite values (empty input)")
    nb = v.size // block
    if nb < 2:
        se = float(np.std(v, ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
        return float(np.mean(v)), se
    means = v[: nb * block].reshape(nb, block).mean(axis=1)
    return float(np.mean(v)), float(np.std(means, ddof=1) / math.sqrt(nb))


def sglang_mean_k3(k3_values: ArrayLike, sample: ArrayLike) -> float:
    """SGLang's helper number: the unweighted mean over samples of each sample's mean k3.

    Pass iff ``< kl_div`` (strict), so thresholds port unchanged from ``kl_test_utils.py``.
    """
    v = np.asarray(k3_values, dtype=np.float64)
    s = np.asarray(sample)
    if v.size == 0:
        raise ValueError("sglang_mean_k3: no positions (empty input)")
    _, inv = np.unique(s, return_inverse=True)
    sums = np.bincount(inv, weights=v)
    counts = np.bincount(inv)
    return float(np.mean(sums / counts))


def delta_p_stats(lp_ref: ArrayLike, lp_test: ArrayLike) -> dict[str, Any]:
    """llama.cpp's Δp table: Δp = p_test − p_ref of the scored token; mean ± se, percentiles, RMS Δp."""
    dp = np.exp(np.asarray(lp_test, dtype=np.float64)) - np.exp(np.asarray(lp_ref, dtype=np.float64))
    stats = tail_stats(dp, thresholds=())
    del stats["frac_over"]
    stats["rms"] = float(np.sqrt(np.mean(dp[np.isfinite(dp)] ** 2))) if np.isfinite(dp).any() else math.nan
    return stats


def same_top(flips: ArrayLike) -> tuple[float, float]:
    """Fraction of positions whose top-1 agrees, with its binomial standard error (llama.cpp's "same top p")."""
    f = np.asarray(flips, dtype=bool)
    if f.size == 0:
        raise ValueError("same_top: no positions (empty input)")
    rate = 1.0 - float(np.mean(f))
    return rate, math.sqrt(rate * (1.0 - rate) / f.size)


def flip_probability(margin_nats: ArrayLike, sigma: float) -> F64:
    """P(top-1 flip | margin m) under independent Gaussian logit noise σ on both logits: Φ(−m / (√2 σ)).

    Computed as ``½ erfc(m / (2σ))``, accurate deep in the tail (no ``1 − Φ`` cancellation). Seed 003 with
    σ = 0.1: m = 0.1 → ≈ 0.24; m = 0.5 → ≈ 2e-4; m = 1 → ≈ 8e-13.
    """
    if not sigma > 0:
        raise ValueError(f"flip_probability: sigma must be > 0, got {sigma}")
    m = np.asarray(margin_nats, dtype=np.float64)
    out: F64 = 0.5 * np.asarray(_erfc(m / (2.0 * sigma)), dtype=np.float64)
    return out


_erfc = np.frompyfunc(math.erfc, 1, 1)


def accuracy_bound(kl_per_step: Iterable[float]) -> float:
    """Upper bound on the change of any sequence-level success probability: √(½ Σ_t KL_t) (Pinsker + chain rule).

    Seed 003: 500 steps × 7e-4 → ≈ 0.42.
    """
    total = float(np.sum(np.asarray(list(kl_per_step), dtype=np.float64)))
    return math.sqrt(0.5 * max(total, 0.0))
