"""The baseline build's module tensors stored with a golden baseline (``localize:``, docs/localize.md): what
they cost in bytes and record time at several ``stored_tokens`` / ``stored_stride`` settings, and whether a
golden failure is still localized to the right module against them. Prints a Markdown table; exits 1 when a
fault is named wrongly by a setting that stores past the 512-token chunk.

    .venv/bin/python benchmarks/bench_stored_modules.py [--depth 1024] [--out DIR]

Each setting records one golden baseline of the clean builtin engine (default hybrid model; the golden
corpus at one context depth, ``--depth``) with the tensors, then runs ``check --suite`` golden with each fault
against it, in-process. "record s" is the record's wall time, "+ s" what the tensors added to it (against a
record without ``localize:``, measured first); "raw MB" the tensors' bytes, "stored MB" the compressed
``modules.npz``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from precisionbot.cli import main

FAULTS = (
    ("attn-p-fp8", "model.layers.0.self_attn"),
    ("state-mantissa=4", "model.layers.1.linear_attn"),
    ("chunk-boundary", "positions"),
)
SETTINGS = ((256, 128), (1024, 128), (1024, 64), (1024, 512))
"""(stored_tokens, stored_stride): the default is (1024, 128)."""
BOUNDARY = 512
"""The builtin engine's chunked-prefill size: settings that store fewer tokens cannot see ``chunk-boundary``
(a miss there is the measurement, not a failure of the script)."""


def _config(root: Path, depth: int, localize: dict[str, object] | None) -> Path:
    data = {
        "localize": {"enabled": localize is not None, **(localize or {})},
        "suites": {"g": {"checks": ["golden"], "golden": {"context_depths": [depth], "decode_steps": 8}}},
    }
    path = root / f"cfg-{len(list(root.glob('cfg-*')))}.json"
    path.write_text(json.dumps(data))
    return path


def _quiet(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(argv)


def _record(cfg: Path, store: Path) -> float:
    t0 = time.perf_counter()
    code = _quiet(["baseline", "record", "--engine", "builtin", "--config", str(cfg), "--suite", "g", "--store",
                   str(store), "--reruns", "0", "--quiet"])  # fmt: skip
    if code != 0:
        raise SystemExit(f"baseline record exited {code}")
    return time.perf_counter() - t0


def main_() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depth", type=int, default=1024, help="the golden corpus's context depth (default 1024)")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-stored-"))
    root.mkdir(parents=True, exist_ok=True)
    plain = _record(_config(root, args.depth, None), root / "plain")
    print(f"golden record without tensors: {plain:.1f} s (depth {args.depth})\n")
    print("| stored_tokens | stride | rows/sample | raw MB | stored MB | record s | + s | " + " | ".join(
        f"`{f}`" for f, _ in FAULTS) + " |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + " --- |" * len(FAULTS))
    wrong = 0
    for tokens, stride in SETTINGS:
        store = root / f"store-{tokens}-{stride}"
        shutil.rmtree(store, ignore_errors=True)  # a rerun into the same --out records afresh
        cfg = _config(root, args.depth, {"stored_tokens": tokens, "stored_stride": stride})
        took = _record(cfg, store)
        (meta_path,) = store.rglob("meta.json")
        meta = json.loads(meta_path.read_text())
        manifest = meta["extra"]["modules"]
        rows = manifest["samples"][0]["positions"] if manifest.get("samples") else 0
        stored_bytes = meta["files"]["modules.npz"]["bytes"] if "modules.npz" in meta["files"] else 0
        cells = []
        for fault, expected in FAULTS:
            out = root / f"check-{tokens}-{stride}-{fault}"
            t0 = time.perf_counter()
            _quiet(["check", "--engine", "builtin", "--fault", fault, "--config", str(cfg), "--suite", "g",
                    "--baseline-store", str(store), "--out", str(out), "--quiet"])  # fmt: skip
            seconds = time.perf_counter() - t0
            result = json.loads((out / "result.json").read_text())
            if result["verdict"] != "fail":
                cells.append(f"golden: {result['verdict']} ({seconds:.0f} s)")
                continue
            (record,) = result["localization"]
            found = record.get("first_diverging_op") or {}
            if "error" in record:
                text = f"error: {record['error'][:60]}"
            elif not found:
                text = f"none at the {record['aligned_positions']} stored rows"
            else:
                text = f"{found['module']} @{found['position']}"
            ok = found.get("module") == expected
            wrong += not ok and tokens >= BOUNDARY
            cells.append(f"{text} ({seconds:.0f} s)" + ("" if ok else " **missed**"))
        print(f"| {tokens} | {stride} | {rows} | {manifest.get('bytes', 0) / 1e6:.2f} | {stored_bytes / 1e6:.2f} | "
              f"{took:.1f} | {took - plain:+.1f} | " + " | ".join(cells) + " |")  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main_())
