"""MoE routing agreement per layer on the builtin ``hybrid-moe`` engine: clean against the ``router-fp8`` faults.

    .venv/bin/python benchmarks/bench_routing.py [--samples 8] [--prompt-tokens 256] [--max-new-tokens 64]

Two columns per engine and MoE layer, as the ``routing`` check computes them (``metrics.routing``):

* **PR vs baseline** — prefills of the same corpus prompts (plus their clean greedy continuation) on the
  engine and on the clean engine, which plays the recorded baseline (``baselines.routing_record``);
* **decode vs prefill** — the engine's own greedy decode of ``--max-new-tokens`` against a prefill of the same
  tokens.

Prints a Markdown table (exact top-k set agreement, Jaccard in brackets) and the wall time; production
numerics, the default bpe-4096 vocabulary.
"""

from __future__ import annotations

import argparse
import platform
import time

from precisionbot import corpus
from precisionbot.baselines.routing_record import prefill_routing
from precisionbot.builtin import EngineOptions, parse_fault
from precisionbot.engines.base import GenerateRequest
from precisionbot.engines.builtin import BuiltinEngine
from precisionbot.metrics.routing import LayerAgreement, agreement, pool, share

TOP_K = 2
VARIANTS = ("clean", "router-fp8=0", "router-fp8=2")


def _engine(variant: str) -> BuiltinEngine:
    faults = () if variant == "clean" else (parse_fault(variant),)
    return BuiltinEngine(options=EngineOptions(preset="hybrid-moe", faults=faults))


def _cell(la: LayerAgreement) -> str:
    return f"{share(la.exact)} ({la.jaccard:.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    t0 = time.perf_counter()
    clean = _engine("clean")
    docs = corpus.builtin_documents(max_code_files=8)
    prompts = corpus.build_prompts(clean.tokenize, docs, args.samples, (args.prompt_tokens, args.prompt_tokens), 0)
    greedy = clean.generate([GenerateRequest(p, args.max_new_tokens) for p in prompts])
    sequences = [(*p, *g.output_ids) for p, g in zip(prompts, greedy, strict=True)]
    reference = prefill_routing(clean, sequences)
    assert reference is not None
    rows: list[tuple[str, int, str, str]] = []
    for variant in VARIANTS:
        engine = clean if variant == "clean" else _engine(variant)
        try:
            pre = prefill_routing(engine, sequences)
            decoded = engine.generate(
                [GenerateRequest(p, args.max_new_tokens, return_routed_experts=True) for p in prompts]
            )
            again = prefill_routing(engine, [(*p, *g.output_ids) for p, g in zip(prompts, decoded, strict=True)])
        finally:
            if engine is not clean:
                engine.close()
        assert pre is not None and again is not None
        base = pool([agreement(r, c, TOP_K) for r, c in zip(reference, pre, strict=True)])
        path = []
        for p, g, a in zip(prompts, decoded, again, strict=True):
            assert g.routed_experts is not None
            rows_ = slice(len(p), len(p) + len(g.output_ids) - 1)
            path.append(agreement(g.routed_experts[rows_], a[rows_], TOP_K))
        by_layer = {la.layer: la for la in pool(path)}
        rows += [(variant, la.layer, _cell(la), _cell(by_layer[la.layer])) for la in base]
    clean.close()
    print(f"{args.samples} prompts x {args.prompt_tokens} tokens + {args.max_new_tokens} greedy tokens; "
          f"{platform.processor() or platform.machine()}, {time.perf_counter() - t0:.0f} s")  # fmt: skip
    print("| engine | layer | PR vs baseline: exact (Jaccard) | decode vs prefill: exact (Jaccard) |")
    print("|---|---|---|---|")
    for variant, layer, base_cell, path_cell in rows:
        print(f"| {variant} | {layer} | {base_cell} | {path_cell} |")


if __name__ == "__main__":
    main()
