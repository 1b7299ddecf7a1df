"""llama.cpp noise figures and replay cost: the three helpers against a real ``llama-server`` (built by
scripts/build-llama-server.sh, serving the tiny f32 llama of the tests) in three numeric configurations:
llama.cpp's default CPU flash attention, ``-fa off``, and ``-fa off`` with an f32 KV cache.

    .venv/bin/python -m benchmarks.bench_llamacpp [--samples 4] [--prompt-tokens 128] [--max-new-tokens 16]

Per configuration: each helper's verdict, cache hits, ``mean_k3`` and max k3, wall time, and the replay's cost
(per-position requests sent; every compared position is one no-cache prefill of its prefix).
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import tempfile
import time
from pathlib import Path

from precisionbot.checks import run_suite
from precisionbot.config import Config
from precisionbot.config.fields import parse_int_range
from precisionbot.engines.llamacpp import LlamaCppEngine
from tests.support.llamacpp import build, llama_server

CONFIGS = {
    "default (CPU flash attention)": "--no-repack",
    "-fa off": "-fa off --no-repack",
    "-fa off, f32 KV": "-fa off -ctk f32 -ctv f32 --no-repack",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--prompt-tokens", default="128")
    parser.add_argument("--checks", default="match,prefill_cache_hit,decode_cache_hit")
    args = parser.parse_args()
    config = Config.default()
    suite = dataclasses.replace(
        config.suite("consistency"),
        checks=tuple(args.checks.split(",")),
        samples=args.samples,
        max_new_tokens=args.max_new_tokens,
        prompt_tokens=parse_int_range(args.prompt_tokens),
    )
    llama = build()
    print(f"machine: {platform.machine()} {platform.processor() or ''}, model: tiny llama f32 (2 layers, width 64)")
    print(f"{args.samples} prompts x {args.prompt_tokens} tokens, {args.max_new_tokens} new tokens\n")
    print("| configuration | check | verdict | hits | mean_k3 | max k3 |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    costs = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in CONFIGS.items():
            logs = Path(tmp) / label.replace(" ", "_").replace(",", "")
            (logs / "slots").mkdir(parents=True)
            server_args = f"{extra} --slot-save-path {logs}/slots --cache-ram 0"
            with llama_server(llama, llama.model(), logs, server_args) as url:
                engine = LlamaCppEngine(url)
                t0 = time.perf_counter()
                results = run_suite(engine, config, suite).result.checks
                costs.append((label, time.perf_counter() - t0, engine.scoring_requests))
                engine.close()
            for r in results:
                hits = "" if r.cache is None else f"{r.cache.kept}/{r.cache.total}"
                mean, worst = r.stats.get("mean_k3", float("nan")), r.stats.get("max", float("nan"))
                print(f"| {label} | {r.name} | {r.verdict.value} | {hits} | {mean:.2g} | {worst:.2g} |")
    print("\n| configuration | seconds (3 helpers) | per-position replay requests |")
    print("| --- | ---: | ---: |")
    for label, seconds, requests in costs:
        print(f"| {label} | {seconds:.1f} | {requests} |")


if __name__ == "__main__":
    main()
