"""Builtin engine throughput: prefill and decode tokens per second through its real HTTP API.

    .venv/bin/python benchmarks/bench_engine.py [--quick] [--preset hybrid|tiny] [--enable-deterministic-inference]

Prefill: batches of prompts with ``max_new_tokens=0`` after a cache flush (no reuse). Decode: the prompts are
first put in the prefix cache, then generated greedily with ``ignore_eos``, so the timed call is almost all
decode steps (one batched step per token for every running request). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import time

import httpx

from precisionbot.builtin import BuiltinServer, EngineOptions
from precisionbot.builtin.tokenizer import Vocab, vocab_for
from precisionbot.corpus import builtin_documents


def _prompts(vocab: Vocab, n: int, tokens: int) -> list[list[int]]:
    encoded = [vocab.encode(d.text or "") for d in builtin_documents() if len(d.text or "") > tokens + 200]
    long_enough = [ids for ids in encoded if len(ids) >= tokens]
    return [long_enough[(i * 7) % len(long_enough)][:tokens] for i in range(n)]


def _post(c: httpx.Client, body: dict[str, object]) -> float:
    t0 = time.perf_counter()
    r = c.post("/generate", json=body)
    r.raise_for_status()
    return time.perf_counter() - t0


def bench_prefill(c: httpx.Client, vocab: Vocab, n: int, tokens: int) -> tuple[str, float]:
    prompts = _prompts(vocab, n, tokens)
    c.post("/flush_cache")
    dt = _post(c, {"input_ids": prompts, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
                   "logprob_start_len": 0})  # fmt: skip
    return f"prefill {n} x {tokens} (logprobs of every position)", n * tokens / dt


def bench_decode(c: httpx.Client, vocab: Vocab, n: int, context: int, new: int) -> tuple[str, float]:
    prompts = _prompts(vocab, n, context)
    c.post("/flush_cache")
    _post(c, {"input_ids": prompts, "sampling_params": {"max_new_tokens": 0}})
    sp = {"temperature": 0, "max_new_tokens": new, "ignore_eos": True}
    dt = _post(c, {"input_ids": prompts, "sampling_params": sp, "return_logprob": True})
    return f"decode batch {n}, context {context}, {new} new tokens", n * new / dt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--preset", default="hybrid", choices=("hybrid", "tiny"))
    parser.add_argument("--enable-deterministic-inference", action="store_true")
    parser.add_argument("--vocab", default=None, choices=("byte", "bpe-4096"), help="default: the preset's")
    args = parser.parse_args()
    scale = 4 if args.quick else 1
    options = EngineOptions(
        preset=args.preset, enable_deterministic_inference=args.enable_deterministic_inference, vocab=args.vocab
    )
    vocab = vocab_for(options.vocab_name)
    t0 = time.perf_counter()
    with BuiltinServer(options) as server, httpx.Client(base_url=server.url, timeout=3600) as c:
        print(f"engine start (vocabulary {vocab.name}, weights, health): {time.perf_counter() - t0:.1f} s\n")
        rows = [
            bench_prefill(c, vocab, 8, 2048 // scale),
            bench_prefill(c, vocab, 2, 4096 // scale),
            bench_decode(c, vocab, 1, 2048 // scale, 128 // scale),
            bench_decode(c, vocab, 8, 2048 // scale, 128 // scale),
            bench_decode(c, vocab, 32, 3072 // scale, 64 // scale),
        ]
    print("| measurement | tokens/s |")
    print("| --- | ---: |")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
