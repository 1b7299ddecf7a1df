"""``precisionbot demo``: the embedded default end to end, on a laptop with no GPU and no network.

1. start the clean builtin engine and record a golden baseline into a local store;
2. start the builtin engine with a fault — by default ``restore-layer0-only``, a "PR" that breaks the
   prefix-cache restore (a cache hit restores only layer 0's state: the cache bug of docs/background.md);
3. run the PR suite (``match``, ``prefill_cache_hit``, ``decode_cache_hit``, ``golden``) against it;
4. print the PR comment and write ``comment.md``, ``summary.md``, ``report.html`` (the charts) and the result
   directory to ``--out``.

The exit code is the faulty run's verdict, like ``precisionbot check``: a demo of a bug exits **1** (the
bot caught it), ``--fault none`` exits 0, and an inconclusive run 2. Sizes default small (8 samples × 64
new tokens, prompts of 256–512 tokens) so the whole demo takes well under a few minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from precisionbot.commands.options.builtin import add_engine_flags, engine_kwargs
from precisionbot.commands.options.store import add_store_option
from precisionbot.errors import ConfigError, DataError

DEFAULT_FAULT = "restore-layer0-only"
DEFAULT_CHECKS = "match,prefill_cache_hit,decode_cache_hit,golden"
DEFAULT_OUT = "precisionbot-demo"
DEFAULT_SAMPLES = 8
DEFAULT_MAX_NEW_TOKENS = 64
DEFAULT_PROMPT_TOKENS = "256..512"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
        help="the embedded default end to end: baseline, a faulty 'PR', the PR comment (exit = its verdict)",
        description="Starts the clean builtin engine and records a golden baseline into a local store, starts a "
        "faulty one (default: a PR that breaks the prefix-cache restore), runs the PR suite against it, prints "
        "the PR comment and writes comment.md, summary.md and the result directory. Needs no GPU and no "
        "network. Exit code = the faulty run's verdict: 1 when the bug is caught.",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help=f"builtin engine fault of the 'PR' (repeatable; default {DEFAULT_FAULT}; 'none' = a clean PR)",
    )
    p.add_argument("--checks", default=DEFAULT_CHECKS, metavar="a,b", help=f"checks to run (default {DEFAULT_CHECKS})")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output directory (default {DEFAULT_OUT})")
    add_store_option(p, help="baseline store (default: DIR/baselines)")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, metavar="N")
    p.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS, metavar="N")
    p.add_argument("--prompt-tokens", default=DEFAULT_PROMPT_TOKENS, metavar="N|LO..HI")
    p.add_argument(
        "--golden-depths",
        metavar="N,N,...",
        help="context depths (tokens) the golden corpus is teacher-forced at (default: the pr suite's, 512,2048,4096)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_engine_flags(p)
    p.set_defaults(handler=run)


class Steps:
    """Numbered progress lines on stderr (kept in CI logs, unlike a redrawn bar)."""

    def __init__(self, stream: TextIO, total: int, quiet: bool) -> None:
        self.stream, self.total, self.quiet = stream, total, quiet
        self.n = 0
        self.t0 = time.monotonic()

    def step(self, text: str) -> None:
        self.n += 1
        self.note(f"[{self.n}/{self.total}] {text}")

    def note(self, text: str) -> None:
        if not self.quiet:
            print(f"{text}  ({time.monotonic() - self.t0:.0f}s)", file=self.stream, flush=True)


def _faults(values: list[str]) -> tuple[str, ...]:
    from precisionbot.builtin import parse_fault

    names = tuple(values) or (DEFAULT_FAULT,)
    if names == ("none",):
        return ()
    if "none" in names:
        raise ConfigError("--fault none means a clean PR; do not combine it with other faults")
    for name in names:
        parse_fault(name)  # a ConfigError naming the valid faults
    return names


def run(args: argparse.Namespace) -> int:
    from precisionbot import corpus
    from precisionbot.baselines import open_store
    from precisionbot.baselines.golden_recording import golden_target, record_golden
    from precisionbot.checks.progress import TerminalProgress
    from precisionbot.checks.suite import run_suite
    from precisionbot.commands.options.suite import suite_flags
    from precisionbot.config import Config
    from precisionbot.engines.builtin import BuiltinEngine
    from precisionbot.report import ReportSection, findings, render_comment, render_summary
    from precisionbot.results import EngineInfo
    from precisionbot.results.directory import write_result

    faults = _faults(args.fault)
    config = Config.default()
    suite = suite_flags(args).apply(config.suite(config.github.pr_suite))  # sizes and --golden-depths
    out = Path(args.out)
    store_uri = args.store or str(out / "baselines")
    store = open_store(store_uri)
    profile = config.thresholds.profile
    golden = "golden" in suite.checks
    steps = Steps(sys.stderr, 3 + (2 if golden else 0), args.quiet)
    pr = ", ".join(faults) or "none (a clean PR)"

    if golden:
        steps.step("starting the clean builtin engine")
        clean = BuiltinEngine(**engine_kwargs(args))
        try:
            steps.step(f"recording a golden baseline into {store_uri}")
            target = golden_target(clean, config, suite.golden, None, corpus.suite_documents(suite.corpus))
            meta = record_golden(target, store, engine_commit="clean")
            steps.note(f"      baseline {meta.run_id}: {meta.stats.get('positions', '?')} positions")
        finally:
            clean.close()

    steps.step(f"starting the builtin engine with the PR's fault: {pr}")
    faulty = BuiltinEngine(faults=faults, **engine_kwargs(args))
    try:
        steps.step(f"running the PR suite against it: {', '.join(suite.checks)}")
        progress = TerminalProgress(sys.stderr)
        progress.enabled = progress.enabled and not args.quiet
        try:
            done = run_suite(
                faulty,
                config,
                suite,
                profile=profile,
                store=store,
                progress=progress,
                engine_info=EngineInfo(url=faulty.url, kind=faulty.kind, commit=f"demo-pr ({pr})"),
            )
        finally:
            progress.close()
    finally:
        faulty.close()

    label = f"builtin engine, PR fault: {pr}"
    result = done.result.with_diagnosis(findings(ReportSection(label=label, run=done.result)))
    steps.step(f"writing the report to {out}/")
    write_result(out / "result", result, done.records)
    section = ReportSection(label=label, run=result, records=done.records, directory=str(out / "result"))
    comment = render_comment([section])
    try:
        (out / "comment.md").write_text(comment, encoding="utf-8")
        (out / "summary.md").write_text(render_summary([section]), encoding="utf-8")
    except OSError as exc:
        raise DataError(f"cannot write the report to {out}: {exc.strerror or exc}; check --out") from exc
    sys.stdout.write(comment)
    html = write_html_report(section, out / "report.html", steps)
    code = result.verdict.exit_code
    files = f"comment.md, summary.md, {html}result/"
    steps.note(f"verdict {str(result.verdict).upper()} (exit {code}); {files} are in {out}/")
    return code


def write_html_report(section: Any, path: Path, steps: Steps) -> str:
    """``report.html`` beside the comment (the charts need the ``report`` extra: without it, say so and go on)."""
    from precisionbot.report.html import render_html

    try:
        path.write_text(render_html([section]), encoding="utf-8")
    except ConfigError as exc:  # matplotlib missing: the Markdown report is still complete
        steps.note(f"no report.html: {exc}")
        return ""
    except OSError as exc:
        raise DataError(f"cannot write {path}: {exc.strerror or exc}; check --out") from exc
    return "report.html, "
