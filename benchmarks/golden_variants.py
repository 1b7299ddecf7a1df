"""Golden's per-position KL statistics for every harmless and bug variant against one clean baseline.

    .venv/bin/python benchmarks/golden_variants.py [--vocab bpe-4096|byte] [--depths 512,2048,4096]
        [--decode-steps 16] [--docs-per-kind 1] [--enable-deterministic-inference]

Records a clean golden baseline of the builtin engine (hybrid preset, production numerics unless
``--enable-deterministic-inference``) into a temporary store, then judges each catalogue variant against it
with the default thresholds. Prints one Markdown row per variant: KL p50 / p99.9 / max, how many positions are
above ``golden.logit_kl``, the mean-logprob drift, and the verdict under both ``logit_kl_stat`` rules (the
99.9th percentile, the default, and kern's max). This is the measurement behind golden's default thresholds
(docs/baselines.md); it is a calibration, not a speed figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

import numpy as np

import precisionbot.checks.golden as golden
from precisionbot import corpus
from precisionbot.baselines import open_store
from precisionbot.baselines.golden_recording import GoldenTarget, record_golden
from precisionbot.config import GoldenOptions, GoldenThresholds
from precisionbot.engines.builtin import BuiltinEngine

VARIANTS = (
    "",
    "mantissa=16",
    "nondeterministic",
    "attn-p-bf16",
    "attn-p-fp8-scaled",
    "state-mantissa=12",
    "state-bf16-decode",
    "mantissa=7",
    "state-mantissa=4",
    "mantissa=5",
    "attn-p-fp8",
    "chunk-boundary",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", default=None, choices=("byte", "bpe-4096"), help="default: the preset's")
    parser.add_argument("--depths", default="512,2048,4096", help="golden context depths (comma-separated)")
    parser.add_argument("--decode-steps", type=int, default=16)
    parser.add_argument("--docs-per-kind", type=int, default=1)
    parser.add_argument("--enable-deterministic-inference", action="store_true")
    args = parser.parse_args()
    options = GoldenOptions(
        top_k=20, context_depths=tuple(int(d) for d in args.depths.split(",")), decode_steps=args.decode_steps
    )
    docs = tuple(corpus.builtin_documents(max_code_files=8))
    t = GoldenThresholds()
    kern = dataclasses.replace(t, logit_kl_stat="max")
    store = open_store(tempfile.mkdtemp(prefix="golden-variants-") + "/store")

    kl_of: dict[str, np.ndarray] = {}
    judge = golden.judge_golden

    def capture(c, stats, band, thresholds, band_abs_delta_nats=0.0):  # type: ignore[no-untyped-def]
        kl_of["last"] = np.asarray(c.kl)
        verdict, reasons = judge(c, stats, band, thresholds, band_abs_delta_nats)
        kl_of["kern"] = judge(c, dict(stats), band, kern, band_abs_delta_nats)[0].value
        return verdict, reasons

    golden.judge_golden = capture

    def engine(*faults: str) -> BuiltinEngine:
        return BuiltinEngine(
            faults=faults, vocab=args.vocab, enable_deterministic_inference=args.enable_deterministic_inference
        )

    def target(e: BuiltinEngine) -> GoldenTarget:
        return GoldenTarget(e, "builtin", docs, options, docs_per_kind=args.docs_per_kind)

    e = engine()
    t0 = time.perf_counter()
    record_golden(target(e), store)
    e.close()
    print(f"clean baseline recorded in {time.perf_counter() - t0:.1f} s\n")
    print(
        f"| variant | positions | KL p50 | KL p99.9 | KL max | positions > {t.logit_kl:g} | drift (nats/token) "
        "| verdict (p999, default) | verdict (max, kern) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for fault in VARIANTS:
        e = engine(*([fault] if fault else []))
        try:
            result = golden.compare_golden(target(e), store, t).result
        finally:
            e.close()
        s, kl = result.stats, kl_of["last"]
        print(
            f"| {fault or '(clean)'} | {s['positions']} | {s['kl_p50']:.2g} | {s['kl_p999']:.2g} | {s['kl_max']:.2g} "
            f"| {int(np.count_nonzero(kl > t.logit_kl))} | {s['nll_increase']:.2g} ± {s['nll_increase_se']:.1g} "
            f"| {result.verdict.value} | {kl_of['kern']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
