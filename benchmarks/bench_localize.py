"""``precisionbot localize`` on every op-level fault of the builtin engine: the module it names, the time and
the disk the dumps took. Prints a Markdown table; exits 1 when a fault is named wrongly.

    .venv/bin/python benchmarks/bench_localize.py [--out DIR] [--paths spec-decode,...]

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
from precisionbot.localize.catalogue import OP_FAULTS

ROWS = [
    (
        f.path,
        f.fault,
        ["--prompt-tokens", str(f.prompt_tokens), "--max-new-tokens", str(f.max_new_tokens)]
        + [x for name, value in f.engine for x in (f"--{name.replace('_', '-')}", str(value))],
        f.expected,
    )
    for f in OP_FAULTS
] + [("decode", "", [], None), ("spec-decode", "", [], None)]
"""Every op-level fault of the catalogue (the module it lives in), then the clean engine (no module) on the
decode path and on the spec-decode path (the plain and spec arms of the clean engine)."""


def main_() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--paths", default=None, help="only these comma-separated paths (default: every path)")
    args = parser.parse_args()
    paths = None if args.paths is None else set(args.paths.split(","))
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-localize-"))
    print("| fault | path | module named | expected | time s | dumps MB |")
    print("| --- | --- | --- | --- | ---: | ---: |")
    wrong = 0
    for path, fault, extra, expected in ROWS:
        if paths is not None and path not in paths:
            continue
        out = root / (fault or f"clean-{path}")
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
