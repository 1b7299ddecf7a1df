"""Answer parsing alone: one replay batch of the consistency helpers' shape, CPU time per path.

    .venv/bin/python benchmarks/bench_parse.py [--prompts 8] [--repeat 7]

A synthetic ``/generate`` answer as SGLang sends a helper's replay (``max_new_tokens = 0``, logprobs from
position 0, top-2 with token text; prompts of 2,000..5,000 tokens), encoded compactly as orjson does. Three
ways to read it into validated ``Generation`` arrays, timed as process CPU time (so that other work on a shared
machine does not count), best of ``--repeat``:

* general path: the standard library's ``json`` and ``parse_batch`` (what the client did before typed decoding;
  it still reads any answer of an unusual shape);
* ``parse_batch_bytes``: msgspec into typed entries with the collector paused (what the client does now);
* floor: the same bytes decoded by msgspec with nothing but the logprob and id arrays built (``bench_client``'s).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_client import floor_msgspec

from precisionbot.engines.base import GenerateRequest
from precisionbot.engines.sglang_parse import parse_batch, parse_batch_bytes


def replay_answer(rng: random.Random, n: int) -> tuple[list[int], dict[str, Any]]:
    ids = [rng.randrange(4096) for _ in range(n)]
    entries = [[None if i == 0 else -3 * rng.random(), t, f"tok{t}"] for i, t in enumerate(ids)]
    top: list[Any] = [None]
    for i in range(1, n):
        a, b = -0.5 * rng.random(), -0.5 - rng.random()
        top.append([[a, rng.randrange(4096), f"a{i}"], [b, rng.randrange(4096), "b"]])
    meta = {
        "id": "x",
        "finish_reason": {"type": "length", "length": 0},
        "prompt_tokens": n,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "e2e_latency": 0.5,
        "input_token_logprobs": entries,
        "output_token_logprobs": [],
        "input_top_logprobs": top,
        "output_top_logprobs": [],
    }
    return ids, {"text": "", "output_ids": [], "meta_info": meta}


def cpu_best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(0)
    batch = [replay_answer(rng, rng.randint(2000, 5000)) for _ in range(args.prompts)]
    requests = [
        GenerateRequest(tuple(ids), max_new_tokens=0, logprob_start_len=0, top_logprobs_num=2, return_text=True)
        for ids, _ in batch
    ]
    body = orjson.dumps([answer for _, answer in batch])
    items = [orjson.dumps(answer) for _, answer in batch]
    positions = sum(len(ids) for ids, _ in batch)
    rows = [
        ("general path (json + parse_batch)", lambda: parse_batch(json.loads(body), requests, 0)),
        ("parse_batch_bytes (msgspec, typed)", lambda: parse_batch_bytes(body, requests, 0, "bench")),
        ("floor (msgspec, arrays only)", lambda: [floor_msgspec(item) for item in items]),
    ]
    print(
        f"{platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}, msgspec "
        f"{msgspec.__version__}; {args.prompts} prompts, {positions:,} positions, {len(body) / 2**20:.1f} MiB; "
        f"CPU time, best of {args.repeat}"
    )
    print("| path | CPU ms | ms per 1,000 positions |")
    print("| --- | ---: | ---: |")
    for name, fn in rows:
        t = cpu_best(fn, args.repeat)
        print(f"| {name} | {1e3 * t:.1f} | {1e6 * t / positions:.2f} |")


if __name__ == "__main__":
    main()
