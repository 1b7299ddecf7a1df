"""``precisionbot localize`` on every op-level fault of the builtin engine: the module it names, the time and
the disk the dumps took. Prints a Markdown table; exits 1 when a fault is named wrongly.

    .venv/bin/python benchmarks/bench_localize.py [--out DIR]

Each row is one ``precisionbot localize --engine builtin`` run (in-process; the engine starts and stops each
time, torch already loaded). The expected module is where the fault lives (docs/builtin-engine.md).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

from precisionbot.cli import main

ROWS = [
    ("golden", "attn-p-fp8", [], "model.layers.0.self_attn"),
    ("golden", "attn-p-fp8-scaled", [], "model.layers.0.self_attn"),
    ("golden", "attn-p-bf16", [], "model.layers.0.self_attn"),
    ("golden", "state-mantissa=4", [], "model.layers.1.linear_attn"),
    ("golden", "mlp-bf16=0", [], "model.layers.0.mlp"),
    ("golden", "mlp-bf16=1", [], "model.layers.1.mlp"),
    ("golden", "mlp-bf16=2", [], "model.layers.2.mlp"),
    ("golden", "mantissa=10", [], "model.layers.0"),
    ("decode", "state-bf16-decode", [], "model.layers.1.linear_attn"),
    ("decode", "swa-decode-window", ["--max-new-tokens", "260"], "model.layers.2.self_attn"),
    ("prefill-cache-hit", "restore-stale-page", ["--prompt-tokens", "160"], "model.layers.0.self_attn"),
    ("prefill-cache-hit", "restore-layer0-only", ["--prompt-tokens", "160"], "model.layers.1.linear_attn"),
    ("prefill-cache-hit", "mamba-stale-checkpoint", ["--prompt-tokens", "160"], "model.layers.1.linear_attn"),
    ("prefill-cache-hit", "conv-state-shift", ["--prompt-tokens", "160"], "model.layers.1.linear_attn"),
    ("prefill-cache-hit", "swa-early-evict", ["--prompt-tokens", "160"], "model.layers.2.self_attn"),
    (
        "decode-cache-hit",
        "cache-decode-kv-rounded",
        ["--prompt-tokens", "120", "--max-new-tokens", "24"],
        "model.layers.0.self_attn",
    ),
    ("decode", "", [], None),
]


def main_() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-localize-"))
    print("| fault | path | module named | expected | time s | dumps MB |")
    print("| --- | --- | --- | --- | ---: | ---: |")
    wrong = 0
    for path, fault, extra, expected in ROWS:
        out = root / (fault or "clean")
        argv = ["localize", "--engine", "builtin", "--path", path, "--out", str(out), *extra]
        if fault:
            argv += ["--fault", fault]
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(argv)
        seconds = time.perf_counter() - t0
        found = json.loads((out / "localization.json").read_text())
        first = found["first_diverging_op"]
        named = first["module"] if first else None
        wrong += named != expected
        mb = found["dump_bytes"] / 1e6
        print(f"| `{fault or '(clean)'}` | {path} | `{named}` | `{expected}` | {seconds:.1f} | {mb:.1f} |", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main_())
