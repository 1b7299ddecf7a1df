"""Benchmark of the HTML report (issue 15): render time and file size. Not a test.

    .venv/bin/python -m benchmarks.bench_report_html [--repeat 2]     (from the repository root)

Hand-built results (``tests/report/html_scenarios.py``) with per-position arrays of the sizes a real run has:
the demo's (3 helpers × 8 samples × 64 tokens, golden 16 × 1,030 positions), SGLang CI's default suite
(3 helpers × 32 × 512, golden 16 × 4,096 = 65,536 positions) and a matrix of four default-suite cells.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import replace

import numpy as np

from precisionbot.report.html import render_html
from precisionbot.report.section import ReportSection
from precisionbot.results import PositionRecord
from tests.report import html_scenarios, scenarios


def helper_record(n_samples: int, n_pos: int) -> PositionRecord:
    rng = np.random.default_rng(n_samples * n_pos)
    n = n_samples * n_pos
    lp_test = -np.abs(rng.normal(0.0, 1.0, n))
    return PositionRecord(
        sample=np.repeat(np.arange(n_samples), n_pos).astype(np.int32),
        position=np.tile(np.arange(n_pos) + 2048, n_samples).astype(np.int32),
        token_id=np.zeros(n, dtype=np.int32),
        lp_ref=lp_test + rng.normal(0.0, 0.05, n),
        lp_test=lp_test,
    )


def section(helpers: tuple[int, int], golden: tuple[int, int], label: str) -> ReportSection:
    (base,) = html_scenarios.charts()
    records = {name: helper_record(*helpers) for name in ("match", "prefill_cache_hit", "decode_cache_hit")}
    records["golden"] = html_scenarios.golden_record(n_samples=golden[0], n_pos=golden[1], k=20)
    golden_check = base.run.check("golden")
    assert golden_check is not None
    kinds = ["prose", "code"] * (golden[0] // 2)
    checks = tuple(
        replace(c, extra={**c.extra, "sample_kinds": kinds}) if c.name == "golden" else c for c in base.run.checks
    )
    return replace(base, label=label, run=replace(base.run, checks=checks), records=records)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    default = section((32, 512), (16, 4096), "default suite")
    cases: dict[str, list[ReportSection]] = {
        "demo size (helpers 3 × 8 × 64, golden 16,480)": [section((8, 64), (16, 1030), "demo")],
        "default suite (helpers 3 × 32 × 512, golden 65,536)": [default],
        "matrix of 4 default-suite cells": [replace(default, label=f"cell {i}") for i in range(4)],
        "no per-position arrays (comment data only)": scenarios.prefill_restore()[:1],
    }
    t0 = time.perf_counter()
    render_html(scenarios.all_pass())
    first = time.perf_counter() - t0
    print(f"{platform.machine()}, Python {platform.python_version()}, best of {args.repeat}")
    print(f"first render in the process (imports matplotlib): {first:.2f} s")
    print()
    print("| case | charts | render s | HTML bytes |")
    print("| --- | ---: | ---: | ---: |")
    for name, sections in cases.items():
        best, page = float("inf"), ""
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            page = render_html(sections)
            best = min(best, time.perf_counter() - t0)
        print(f"| {name} | {page.count('<figure')} | {best:.2f} | {len(page.encode()):,} |")


if __name__ == "__main__":
    main()
