"""The ``spec_decode`` check on the builtin engine: noise and acceptance, clean and under each spec fault.

    .venv/bin/python benchmarks/bench_spec_decode.py [--preset hybrid] [--samples 4] [--max-new-tokens 64] \\
        [--prompt-tokens 200..400] [--faults spec-kv-rollback,...] [--algorithm NGRAM]

Runs the check (both arms, main's acceptance and the sampled path) once per variant and prints one row each:
verdict, the parts that caught it, mean / max k3 of the common tokens, identical samples, mean accepted length
main → PR, acceptance rate, the sampled path's p-value, and the wall time. The clean rows are the noise a PR is
judged against (``match``'s thresholds); the builtin engine reruns bit-identically, so one run per variant is
the figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import time

from precisionbot.builtin.options import SPEC_FAULTS, EngineOptions, parse_fault
from precisionbot.checks import run_suite
from precisionbot.config import Config
from precisionbot.engines.builtin import BuiltinEngine


def _sizes(text: str) -> tuple[int, int]:
    low, _, high = text.partition("..")
    return int(low), int(high or low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="hybrid", choices=("hybrid", "tiny"))
    parser.add_argument("--algorithm", default=None, choices=("NGRAM", "STANDALONE"))
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=_sizes, default=(200, 400))
    parser.add_argument("--faults", default=None, help="comma-separated variants ('' = clean); default: clean + all")
    args = parser.parse_args()
    variants = ["", *SPEC_FAULTS] if args.faults is None else [v.strip() for v in args.faults.split(",")]
    if args.preset == "tiny":
        variants = [v for v in variants if v != "spec-state-rollback"]
    config = Config.default()
    suite = dataclasses.replace(
        config.suite("consistency"),
        samples=args.samples,
        max_new_tokens=args.max_new_tokens,
        prompt_tokens=args.prompt_tokens,
        checks=("spec_decode",),
    )
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; preset {args.preset}, "
        f"{args.samples} samples x {args.max_new_tokens} new tokens, prompts {args.prompt_tokens[0]}.."
        f"{args.prompt_tokens[1]} tokens, algorithm {args.algorithm or 'NGRAM (default)'}"
    )
    header = ("variant", "verdict", "caught by", "mean k3", "max k3", "identical", "AL main → PR", "rate", "p", "s")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for variant in variants:
        algorithm = args.algorithm
        if variant == "spec-bonus-logprob":
            algorithm = "STANDALONE"
        options = EngineOptions(
            preset=args.preset, faults=(parse_fault(variant),) if variant else (), speculative_algorithm=algorithm
        )
        start = time.perf_counter()
        engine = BuiltinEngine(options=options)
        try:
            (result,) = run_suite(engine, config, suite).result.checks
        finally:
            engine.close()
        s = result.stats
        main_al = s.get("main_accept_length")
        cells = (
            variant or "(clean)",
            result.verdict.value,
            ", ".join(s.get("caught_by", [])) or "–",
            f"{s['mean_k3']:.3g}",
            f"{s['max']:.3g}",
            f"{s['identical_samples']}/{s['arm_samples']}",
            f"{main_al:.2f} → {s['accept_length']:.2f}" if main_al is not None else f"{s['accept_length']:.2f}",
            f"{s['accept_rate']:.2f}",
            f"{s['sampled_p_value']:.2g}",
            f"{time.perf_counter() - start:.0f}",
        )
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
