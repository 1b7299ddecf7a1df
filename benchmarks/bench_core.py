"""Benchmark of the pure math core (issue 2). Prints one table; not a test.

    .venv/bin/python benchmarks/bench_core.py [--rows 4096] [--vocab 151936] [--repeat 3]

For each case: our time, a naive numpy reference's time (what one writes first: full log_softmax copies,
one pass per statistic), the ratio, and peak memory above the inputs (tracemalloc sees numpy's buffers).
The full-vocabulary rows also give throughput in GB/s of input next to this machine's numpy copy bandwidth
for the same bytes.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from precisionbot import metrics
from precisionbot.metrics.onset import sample_shapes


def measure(fn: Callable[[], Any], repeat: int) -> tuple[float, int]:
    """Best wall time of ``repeat`` calls and the peak traced allocation of one call (bytes)."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    gc.collect()
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return best, peak


def naive_consistency(delta: np.ndarray, sample: np.ndarray) -> dict[str, Any]:
    k = np.exp(delta) - 1 - delta
    out: dict[str, Any] = {q: float(np.percentile(k, q)) for q in metrics.PERCENTILES}
    out["max"] = float(k.max())
    out["frac"] = [float(np.mean(k > t)) for t in metrics.DEFAULT_THRESHOLDS]
    means, onsets = [], []
    for s in np.unique(sample):
        ks = k[sample == s]
        means.append(ks.mean())
        over = np.flatnonzero(ks > 1e-3)
        onsets.append(over[0] if over.size else None)
    out["mean_k3"] = float(np.mean(means))
    return out


def ours_consistency(delta: np.ndarray, sample: np.ndarray) -> dict[str, Any]:
    k = metrics.k3(delta)
    out = metrics.tail_stats(k)
    out["mean_k3"] = metrics.sglang_mean_k3(k, sample)
    out["shapes"] = sample_shapes(k, sample, 1e-3)
    return out


def naive_topk(ref_lp: np.ndarray, q_at: np.ndarray, ref_ids: np.ndarray, test_ids: np.ndarray) -> np.ndarray:
    p = np.exp(ref_lp)
    q = np.exp(q_at)
    p_rest = np.maximum(1 - p.sum(1), 1e-12)
    q_rest = np.maximum(1 - q.sum(1), 1e-12)
    kl = (p * (ref_lp - q_at)).sum(1) + p_rest * (np.log(p_rest) - np.log(q_rest))
    flips = ref_ids[:, 0] != test_ids[:, 0]
    margins = ref_lp[:, 0] - ref_lp[:, 1]
    return np.stack([kl, flips, margins])


def ours_topk(ref_lp: np.ndarray, q_at: np.ndarray, ref_ids: np.ndarray, test_ids: np.ndarray) -> np.ndarray:
    return np.stack([metrics.topk_rest_kl(ref_lp, q_at), metrics.top1_flip(ref_ids, test_ids), metrics.margin(ref_lp)])


def naive_golden_rows(rid: np.ndarray, rlp: np.ndarray, tid: np.ndarray, tlp: np.ndarray) -> tuple[Any, ...]:
    """Golden's per-row metrics as first written: one ``[N, k, k]`` id match for the union KL, another for
    the shared-id |Δ|, whatever the rows look like."""
    eq = tid[:, :, None] == rid[:, None, :]
    test_in_ref, ref_in_test = eq.any(axis=2), eq.any(axis=1)
    test_at_ref = np.take_along_axis(tlp, eq.argmax(axis=1), axis=1)
    ones = np.ones_like(ref_in_test)
    in_union = np.concatenate([ones, ~test_in_ref], axis=1)
    looked = (
        (np.concatenate([rlp, rlp], axis=1), np.concatenate([ones, test_in_ref], axis=1)),
        (np.concatenate([test_at_ref, tlp], axis=1), np.concatenate([ref_in_test, ones], axis=1)),
    )
    sides = []
    for own, (lp, found) in zip((rlp, tlp), looked, strict=True):
        rest = np.maximum(1 - np.exp(own).sum(1), 0.0)
        missing = in_union & ~found
        n_missing = missing.sum(1)
        share = np.minimum(rest / np.maximum(n_missing, 1), np.exp(own[:, -1]))
        lp = np.where(missing, np.log(np.maximum(share, 1e-12))[:, None], lp)
        lp = np.where(in_union, lp, -np.inf)
        sides.append(np.concatenate([lp, np.log(np.maximum(rest - share * n_missing, 1e-12))[:, None]], axis=1))
    p = np.exp(sides[0])
    with np.errstate(invalid="ignore"):
        kl = np.where(p > 0, p * (sides[0] - sides[1]), 0.0).sum(1)
    shared = metrics.lookup_topk(rid, tid, tlp)
    return kl, shared


def ours_golden_rows(rid: np.ndarray, rlp: np.ndarray, tid: np.ndarray, tlp: np.ndarray) -> tuple[Any, ...]:
    a = metrics.align_topk(rid, tid)
    return (
        metrics.topk_union_kl(rid, rlp, tid, tlp, alignment=a),
        metrics.shared_topk_abs_delta(rid, rlp, tid, tlp, alignment=a),
    )


def golden_rows(rng: np.random.Generator, n: int, noise: float) -> tuple[np.ndarray, ...]:
    """Two top-20 lists per row from one 200-token distribution and a noisy copy of it (``noise`` nats of
    Gaussian logit noise reorders some rows' lists, as a rerun or a harmless kernel change does)."""
    logits = rng.standard_normal((n, 200)) * 3
    lp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    lq = lp + rng.standard_normal(lp.shape) * noise
    lq -= np.log(np.exp(lq).sum(1, keepdims=True))
    rid, tid = np.argsort(-lp, 1)[:, :20].astype(np.int32), np.argsort(-lq, 1)[:, :20].astype(np.int32)
    return rid, np.take_along_axis(lp, rid, 1), tid, np.take_along_axis(lq, tid, 1)


def naive_full_kl(x: np.ndarray, y: np.ndarray, bf16: bool) -> np.ndarray:
    if bf16:
        x = (x.astype(np.uint32) << 16).view(np.float32)
        y = (y.astype(np.uint32) << 16).view(np.float32)
    lx = (
        x.astype(np.float32)
        - np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True))
        - x.max(1, keepdims=True)
    )
    ly = (
        y.astype(np.float32)
        - np.log(np.exp(y - y.max(1, keepdims=True)).sum(1, keepdims=True))
        - y.max(1, keepdims=True)
    )
    out: np.ndarray = (np.exp(lx) * (lx - ly)).sum(1)
    return out


def copy_bandwidth(nbytes: int, repeat: int) -> float:
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096, help="positions for the full-vocabulary KL (0: skip those rows)")
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows: list[tuple[str, float, float, int, str]] = []

    for n, label in ((32 * 512, "consistency stats, 32 × 512"), (1_000_000, "consistency stats, 1,000,000")):
        delta = rng.normal(0, 3e-3, n)
        sample = np.arange(n) // 512
        ours, mem = measure(lambda d=delta, s=sample: ours_consistency(d, s), args.repeat)
        naive, _ = measure(lambda d=delta, s=sample: naive_consistency(d, s), args.repeat)
        rows.append((label, ours, naive, mem, ""))

    n, k = 1_000_000, 20
    logits = rng.normal(0, 2, (n, k + 1))
    lp = np.sort(logits - np.log(np.exp(logits).sum(1, keepdims=True) * 1.5), axis=1)[:, ::-1][:, :k].copy()
    q_at = lp + rng.normal(0, 1e-2, lp.shape)
    ids = np.tile(np.arange(k, dtype=np.int32), (n, 1))
    tids = ids.copy()
    tids[::50, 0] = 99
    ours, mem = measure(lambda: ours_topk(lp, q_at, ids, tids), args.repeat)
    naive, _ = measure(lambda: naive_topk(lp, q_at, ids, tids), args.repeat)
    rows.append(("top-20+rest KL + flips, 1,000,000", ours, naive, mem, ""))

    for noise in (0.0, 1e-3, 3e-2):
        rid, rlp, tid, tlp = golden_rows(rng, 16_516, noise)
        reordered = float(np.mean((rid != tid).any(axis=1)))
        ours, mem = measure(lambda a=rid, b=rlp, c=tid, d=tlp: ours_golden_rows(a, b, c, d), args.repeat)
        naive, _ = measure(lambda a=rid, b=rlp, c=tid, d=tlp: naive_golden_rows(a, b, c, d), args.repeat)
        rows.append(
            (f"golden union KL + shared-id Δ, 16,516 × top-20, {reordered:.0%} of lists differ", ours, naive, mem, "")
        )

    v = args.vocab
    workers = os.cpu_count() or 1
    for kind in ("bf16 (uint16 bits)", "fp16", "fp32") if args.rows else ():
        base = rng.standard_normal((args.rows, v), dtype=np.float32) * 3
        other = base + rng.standard_normal((args.rows, v), dtype=np.float32) * 0.01
        bf16 = kind.startswith("bf16")
        if bf16:
            x = (base.view(np.uint32) >> 16).astype(np.uint16)
            y = (other.view(np.uint32) >> 16).astype(np.uint16)
        else:
            dt = {"fp16": np.float16, "fp32": np.float32}[kind]
            x, y = base.astype(dt), other.astype(dt)
        del base, other
        nbytes = x.nbytes + y.nbytes
        ours, mem = measure(lambda x=x, y=y, b=bf16: metrics.kl_from_logits(x, y, bf16=b, workers=workers), 1)
        naive, _ = measure(lambda x=x, y=y, b=bf16: naive_full_kl(x, y, b), 1)
        bw = copy_bandwidth(nbytes, args.repeat)
        gbps = nbytes / ours / 1e9
        note = f"{gbps:.2f} GB/s vs copy {bw:.2f} GB/s ({gbps / bw:.0%}); input {nbytes / 2**20:.0f} MiB"
        rows.append((f"full KL {args.rows} × {v} {kind}", ours, naive, mem, note))
        del x, y

    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, numpy {np.__version__}")
    print(f"| {'case':<40} | {'ours s':>8} | {'naive s':>8} | {'ratio':>6} | {'peak extra MiB':>14} | notes")
    print(f"|{'-' * 42}|{'-' * 10}|{'-' * 10}|{'-' * 8}|{'-' * 16}|------")
    for label, ours, naive, mem, note in rows:
        print(f"| {label:<40} | {ours:8.3f} | {naive:8.3f} | {naive / ours:5.1f}× | {mem / 2**20:14.1f} | {note}")


if __name__ == "__main__":
    main()
