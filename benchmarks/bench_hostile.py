"""Benchmark of the hostile inputs of issue 17: time and traced peak memory of each. Not a test.

    .venv/bin/python -m benchmarks.bench_hostile [--comments]      (from the repository root)

Each case is an input the issue reported as a hang or a memory blow-up; the table shows what it costs now.
"Peak MiB" is tracemalloc's peak during the call (NumPy's allocations are traced). A second table parses each
shape of PR comment in ``tests/test_hostile_fuzz.py``'s ``LARGEST_COMMENTS`` (GitHub's largest body, 65,536
characters) as the slash-command parser; CPU time, best of 5, so that other work on a shared machine does not
count (the quadratic parser took 20 s to a minute of it on a long word). ``--comments`` prints that table only.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import tempfile
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from precisionbot.config import load_config
from precisionbot.errors import ConfigError
from precisionbot.gh.slash import Malformed, SlashCommand, parse_command
from precisionbot.gh.sticky import COMMENT_LIMIT_CHARS
from precisionbot.report import render_comment
from precisionbot.report.heat_strip import worst_strips
from precisionbot.report.load import load_sections
from precisionbot.results import PositionRecord, RunResult
from precisionbot.results.directory import write_result
from tests.test_hostile_fuzz import LARGEST_COMMENTS, LAUGHS, forged_run


def measure(fn: Callable[[], Any]) -> tuple[float, float, str]:
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        out = fn()
        outcome = "ok" if out is None else str(out)[:60]
    except ConfigError as exc:
        outcome = str(exc).split(": ", 1)[-1][:60]
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak, outcome


def one_sample_per_position(n: int) -> Callable[[], Any]:
    record = PositionRecord(
        sample=np.arange(n, dtype=np.int32),
        position=np.zeros(n, dtype=np.int32),
        token_id=np.zeros(n, dtype=np.int32),
        lp_ref=np.zeros(n),
        lp_test=np.full(n, -0.01),
    )
    return lambda: f"{len(worst_strips('match', record))} strips"


def npz_cell(root: Path, name: str, member: str, header_shape: tuple[int, ...], data_bytes: int) -> Path:
    directory = root / name
    write_result(directory, RunResult.from_json(json.dumps(forged_run())))
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": "<f8", "fortran_order": False, "shape": header_shape})
    with zipfile.ZipFile(directory / "match.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, out.getvalue() + b"\0" * data_bytes)
    return directory


def cell_outcome(directory: Path) -> Callable[[], Any]:
    def run() -> str:
        sections = load_sections([directory])
        render_comment(sections)
        return sections[0].run.checks[0].reasons[0].split(": ", 2)[-1]

    return run


def answer(result: SlashCommand | Malformed | None) -> str:
    if result is None:
        return "not a command"
    if isinstance(result, Malformed):
        return "usage reply: " + result.problem.replace("|", "\\|")
    names = f" ({len(result.models):,} model name{'s' * (len(result.models) > 1)})" if result.models else ""
    return f"`{result.verb}`{names}" + (f", reason of {len(result.reason):,} characters" if result.reason else "")


def cpu_ms(fn: Callable[[], Any], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return 1e3 * best


def comment_table() -> None:
    print(f"| PR comment of {COMMENT_LIMIT_CHARS:,} characters | CPU ms, best of 5 | answer |")
    print("| --- | ---: | --- |")
    for name, body in LARGEST_COMMENTS.items():
        ms = cpu_ms(lambda body=body: parse_command(body))
        print(f"| {name} | {ms:.2f} | {answer(parse_command(body))} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comments", action="store_true", help="only the PR comment table")
    if parser.parse_args().comments:
        print(f"{platform.machine()}, Python {platform.python_version()}")
        print()
        comment_table()
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        laughs, deep = root / "laughs.yml", root / "deep.yml"
        laughs.write_text(LAUGHS)
        deep.write_text("engine: " + "[" * 1_000_000)
        cases: dict[str, Callable[[], Any]] = {
            f"heat strips, {n:,} samples of 1 position": one_sample_per_position(n) for n in (100_000, 1_000_000)
        }
        header = npz_cell(root, "header", "lp_ref.npy", (10**11,), 64)
        bomb = npz_cell(root, "bomb", "lp_ref.npy", (2**27,), 2**30)  # 1 GiB of zeros, 1 MB deflated
        cases["npy header declaring (10^11,) with 64 bytes"] = cell_outcome(header)
        cases[f"zip bomb: {(bomb / 'match.npz').stat().st_size:,} bytes inflating to 1 GiB"] = cell_outcome(bomb)
        cases["billion laughs config (9^9 leaves)"] = lambda: load_config(laughs)
        cases["config nested 1,000,000 deep"] = lambda: load_config(deep)
        print(f"{platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}")
        print()
        print("| case | seconds | peak MiB | outcome |")
        print("| --- | ---: | ---: | --- |")
        for name, fn in cases.items():
            seconds, peak, outcome = measure(fn)
            print(f"| {name} | {seconds:.3f} | {peak:.1f} | {outcome} |")
    print()
    comment_table()


if __name__ == "__main__":
    main()
