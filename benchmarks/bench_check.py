"""Check benchmark: wall time of a full consistency check against the builtin engine, split into engine time
(the engine's own reported ``e2e_latency``) and client overhead (everything else: HTTP + JSON, validation,
corpus, statistics). Goal: overhead under 5 % of wall time.

    .venv/bin/python benchmarks/bench_check.py [--samples 8] [--max-new-tokens 64] [--prompt-tokens 256..512]

To separate the two cleanly every phase sends all prompts in one ``/generate`` call (batch size = samples,
concurrency 1), so engine intervals do not overlap and ``wall = engine + overhead``.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import time

from precisionbot.checks import run_suite
from precisionbot.config import Config
from precisionbot.config.fields import parse_int_range
from precisionbot.engines.builtin import BuiltinEngine


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", default="256..512")
    parser.add_argument("--checks", default="match,prefill_cache_hit,decode_cache_hit")
    args = parser.parse_args()
    config = Config.default()
    suite = dataclasses.replace(
        config.suite("consistency"),
        samples=args.samples,
        max_new_tokens=args.max_new_tokens,
        prompt_tokens=parse_int_range(args.prompt_tokens),
    )
    t_start = time.perf_counter()
    engine = BuiltinEngine(batch_size=args.samples, concurrency=1)
    startup = time.perf_counter() - t_start
    try:
        t0 = time.perf_counter()
        run = run_suite(engine, config, suite, checks=tuple(args.checks.split(","))).result
        wall = time.perf_counter() - t0
    finally:
        engine.close()
    engine_s, http_s = engine.engine_time_s, engine.http.busy_s
    overhead = wall - engine_s
    print(
        f"{platform.machine()}, {args.samples} samples x {args.max_new_tokens} new tokens, prompts "
        f"{args.prompt_tokens} tokens, checks {args.checks}"
    )
    print(f"verdicts: {', '.join(f'{c.name}={c.verdict.value}' for c in run.checks)}")
    print("| part | seconds | share of wall |")
    print("| --- | ---: | ---: |")
    print(f"| wall time of the check | {wall:.2f} | 100 % |")
    print(f"| engine (sum of reported e2e_latency) | {engine_s:.2f} | {100 * engine_s / wall:.1f} % |")
    print(
        f"| HTTP + JSON transport (round trips − engine) | {http_s - engine_s:.2f} | "
        f"{100 * (http_s - engine_s) / wall:.1f} % |"
    )
    print(
        f"| client compute (validation, corpus, stats) | {wall - http_s:.2f} | {100 * (wall - http_s) / wall:.1f} % |"
    )
    print(f"| **client overhead (wall − engine)** | {overhead:.2f} | **{100 * overhead / wall:.1f} %** (goal < 5 %) |")
    print(f"(engine start-up, not counted: {startup:.2f} s)")


if __name__ == "__main__":
    main()
