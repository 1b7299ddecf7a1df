"""Baselines benchmark: bytes per stored position and golden comparison throughput.

    .venv/bin/python benchmarks/bench_baselines.py [--positions 1000000]

Synthetic but realistic rows: vocabulary 151,936 (Qwen), top-20 ids drawn at random (as incompressible as
real ids), logprobs from a peaked softmax, stored exactly as ``baseline record`` stores them (``.npz``,
deflate). The comparison is the whole golden path minus the engine: align, union top-k KL, flips, margins,
ranks, shared-id |Δ|, tail statistics, band, verdict.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from precisionbot.baselines import RunMeta, Signature, load_arrays, new_run_id, now_utc, open_store, write_run
from precisionbot.baselines.record import encode_arrays
from precisionbot.config import GoldenThresholds
from precisionbot.results.golden_record import GoldenRecord, GoldenSample
from precisionbot.scoring.golden_compare import compare_records
from precisionbot.scoring.golden_judge import golden_stats, judge_golden

VOCAB = 151_936
K = 20


def synthetic(n: int, seed: int, noise: float = 0.0, base: GoldenRecord | None = None) -> GoldenRecord:
    rng = np.random.default_rng(seed)
    if base is None:
        ids = rng.integers(0, VOCAB, size=(n, K), dtype=np.int32)  # a rare repeat within a row does not matter here
        logits = np.sort(rng.gumbel(size=(n, K)) * 2.0, axis=1)[:, ::-1]
    else:
        ids = base.top_ids.copy()
        logits = base.top_lp.astype(np.float64) + rng.normal(scale=noise, size=base.top_lp.shape)
        order = np.argsort(-logits, axis=1, kind="stable")
        ids = np.take_along_axis(ids, order, axis=1)
        logits = np.take_along_axis(logits, order, axis=1)
    lse = np.log(np.sum(np.exp(logits), axis=1, keepdims=True) + 0.05)  # 5 % mass outside the top-20
    top_lp = (logits - lse).astype(np.float32)
    token = ids[:, 0] if base is None else base.token_id
    lp = top_lp[:, 0] if base is None else top_lp[np.arange(n), 0]
    samples = (GoldenSample("prefill", "synthetic", "prose", n + 1, 1, n, first_token=0),)
    return GoldenRecord(samples, token.astype(np.int32), lp.astype(np.float32), ids.astype(np.int32), top_lp)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--positions", type=int, default=1_000_000)
    args = parser.parse_args()
    n = args.positions
    print(f"machine: {platform.machine()}, {platform.python_version()}, numpy {np.__version__}")

    ref = synthetic(n, 0)
    data = encode_arrays(ref.to_arrays())
    raw = sum(a.nbytes for a in ref.to_arrays().values())
    print("\n| stored baseline (top-20, fp32 logprobs) | bytes/position |")
    print("| --- | ---: |")
    print(f"| raw arrays (int32 ids + fp32 logprobs + token + lp) | {raw / n:.1f} |")
    print(f"| .npz as stored (deflate) | {len(data) / n:.1f} |")
    print(f"| llama.cpp --kl-divergence-base (uint16 full vocab, 2·V) | {2 * VOCAB} |")

    cand = synthetic(n, 1, noise=0.01, base=ref)
    t0 = time.perf_counter()
    c = compare_records(ref, cand)
    t1 = time.perf_counter()
    stats = golden_stats(c, depth_edges=[0, 512, 2048, 4096], kinds=["prose"], band=None)
    judge_golden(c, stats, None, GoldenThresholds())
    t2 = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "store"))
        sig = Signature.build(model="bench")
        when = now_utc()
        meta = RunMeta(new_run_id(when, "bench"), "bench", sig.digest, sig.parts, when.isoformat(), "passed", "bench")
        t3 = time.perf_counter()
        written = write_run(store, meta, {"golden": ref.to_arrays()})
        t4 = time.perf_counter()
        load_arrays(store, written, "golden")
        t5 = time.perf_counter()

    print(f"\n| {n:,} positions | seconds | positions/s |")
    print("| --- | ---: | ---: |")
    for label, dt in [
        ("compare (align, union KL, flips, margins, ranks, shared |Δ|)", t1 - t0),
        ("stats + verdict", t2 - t1),
        ("compare + stats + verdict", t2 - t0),
        ("write run to a local store (encode + sha256)", t4 - t3),
        ("load run (read + sha256 + decode)", t5 - t4),
    ]:
        print(f"| {label} | {dt:.2f} | {n / dt:,.0f} |")


if __name__ == "__main__":
    main()
