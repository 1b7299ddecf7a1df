"""Benchmark of the report (issue 6): render time and size of the comment and the job summary. Not a test.

    .venv/bin/python -m benchmarks.bench_report [--repeat 3]     (from the repository root)

Cases use the hand-built results of tests/report/scenarios.py: one typical failing run (with per-position
arrays for the heat strips), an 8-configuration matrix, and an oversized matrix that forces the comment to
trim itself (40 configurations × 2,000 worst positions each).
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

from precisionbot.report import render_comment, render_json, render_summary
from precisionbot.report.section import ReportSection
from tests.report import scenarios


def best_of(fn: Callable[[], str], repeat: int) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cases: dict[str, list[ReportSection]] = {
        "one failing run (4 checks, strips)": scenarios.prefill_restore(),
        "matrix of 8 configurations": scenarios.oversized(n_sections=8, n_worst=20),
        "oversized: 40 configurations × 2,000 worst": scenarios.oversized(n_sections=40, n_worst=2000),
    }
    print(f"{platform.machine()}, Python {platform.python_version()}, best of {args.repeat}")
    print()
    print("| case | comment ms | comment chars | summary ms | summary bytes | json ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, sections in cases.items():
        tc, comment = best_of(lambda s=sections: render_comment(s), args.repeat)  # type: ignore[misc]
        ts, summary = best_of(lambda s=sections: render_summary(s), args.repeat)  # type: ignore[misc]
        tj, _ = best_of(lambda s=sections: render_json(s), args.repeat)  # type: ignore[misc]
        print(
            f"| {name} | {1e3 * tc:.0f} | {len(comment):,} | {1e3 * ts:.0f} | {len(summary.encode()):,} "
            f"| {1e3 * tj:.0f} |"
        )


if __name__ == "__main__":
    main()
