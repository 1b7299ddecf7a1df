"""``precisionbot report DIR...``: render result directories as the PR comment, the job summary, JSON, or HTML.

Several directories (a matrix of models or configurations) make one report with a section each. The exit
code is 0 once the report is written (rendering is not judging); ``--verdict-exit`` makes it the combined
verdict instead (0 pass, 1 fail, 2 inconclusive), for scripts that want both in one step.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from precisionbot.errors import ConfigError, DataError

FORMATS = ("markdown", "summary", "json", "html")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="render result directories as the PR comment (markdown), job summary, JSON or HTML",
        description="Renders one or more result directories (several = a matrix run, one section each). "
        "markdown: the PR comment (under 65,536 characters); summary: the job summary (more detail, under "
        "1 MiB); json: the results with the diagnosis; html: one self-contained page with the charts (needs the "
        "report extra: pip install 'precisionbot[report]').",
    )
    p.add_argument("dirs", nargs="+", metavar="DIR", help="result directories written by `precisionbot check`")
    p.add_argument("--format", choices=FORMATS, default="markdown", help="output format (default markdown)")
    p.add_argument(
        "--previous",
        action="append",
        default=[],
        metavar="DIR",
        help="the previous run of the i-th DIR (repeat in DIR order), for 'since the previous run'",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="the trusted config whose thresholds re-derive every verdict (default: .github/precision.yml when "
        "present, else the built-in defaults)",
    )
    p.add_argument("--label", action="append", default=[], metavar="TEXT", help="section title of the i-th DIR")
    p.add_argument("--suite", metavar="NAME", help="suite name for the hidden comment marker (one comment per suite)")
    p.add_argument("--max-chars", type=int, metavar="N", help="size limit of the comment (default 65,536)")
    p.add_argument("--output", "--out", "-o", metavar="FILE", help="write here instead of stdout")
    p.add_argument("--verdict-exit", action="store_true", help="exit with the combined verdict's code")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from precisionbot.report import comment_marker, render_comment, render_json, render_summary
    from precisionbot.report.load import links_from_env, load_sections
    from precisionbot.results import Verdict

    if args.max_chars is not None and args.max_chars < 1_000:
        raise ConfigError(f"--max-chars must be at least 1000 (got {args.max_chars})")
    from precisionbot.config import load_config_or_default

    config = load_config_or_default(args.config)
    sections = load_sections(args.dirs, previous=args.previous, labels=args.label, thresholds=config.thresholds)
    links = links_from_env(os.environ)
    if args.format == "json":
        text = render_json(sections)
    elif args.format == "html":
        from precisionbot.report.html import render_html

        text = render_html(sections, links=links)
    elif args.format == "summary":
        text = render_summary(sections, links=links)
    else:
        text = render_comment(
            sections,
            links=links,
            marker=comment_marker(args.suite),
            max_chars=args.max_chars or 65_536,
        )
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise DataError(f"cannot write {args.output}: {exc.strerror or exc}; check --output") from exc
    else:
        sys.stdout.write(text)
    verdict = Verdict.combine(s.run.verdict for s in sections)
    return verdict.exit_code if args.verdict_exit else 0
