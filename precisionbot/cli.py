"""The composition root: parses arguments, builds the real adapters, runs a command, maps errors to exit codes.

Each subcommand lives in ``precisionbot/commands/<name>.py`` and exposes ``register(subparsers)``, which adds
its parser and sets ``handler`` (a callable ``(argparse.Namespace) -> int``). Command modules import heavy
dependencies (torch, boto3, PyGithub) inside their handlers so that ``precisionbot github plan`` starts fast
on a small hosted runner without torch installed.

Exit codes (stable, docs/architecture.md): 0 pass, 1 fail, 2 inconclusive, 3 our own setup error. Nothing
else calls ``sys.exit``.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from precisionbot import __version__
from precisionbot.commands import (
    baseline,
    bisect,
    buildkite,
    calibrate,
    check,
    config,
    demo,
    doctor,
    github,
    init,
    localize,
    report,
    runner,
    serve,
    thresholds,
)
from precisionbot.errors import PrecisionbotError
from precisionbot.gh.workflow import log_text

EXIT_SETUP_ERROR = 3

COMMANDS = (
    serve, check, localize, baseline, report, demo, init, doctor, github, runner, calibrate, thresholds, bisect, config,
    buildkite,
)  # fmt: skip
"""The subcommand modules, in ``--help`` order. Imported here, not looked up by name, so the composition
root's arrows are in the import graph that tests/test_architecture.py checks."""


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which our contract reads as INCONCLUSIVE: a typo'd flag in a
    workflow must not pass for an inconclusive check. Subparsers inherit this class."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_SETUP_ERROR, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="precisionbot",
        description="Tells you, on every kernel PR, whether it changed the model's numbers, how much, where and why.",
    )
    parser.add_argument("--version", action="version", version=f"precisionbot {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMANDS:
        module.register(sub)
    return parser


def _pop_debug(argv: Sequence[str]) -> tuple[list[str], bool]:
    """Take ``--debug`` out of ``argv`` wherever it is (``precisionbot report DIR --debug`` is the natural
    thing to type after an error): argparse accepts a top-level flag only before the subcommand. Tokens after
    a ``--`` separator are left alone."""
    args = list(argv)
    end = args.index("--") if "--" in args else len(args)
    kept = [a for a in args[:end] if a != "--debug"]
    return kept + args[end:], len(kept) != end


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv, debug = _pop_debug(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help and --version (0), usage errors (3): argparse exits by itself
        return exc.code if isinstance(exc.code, int) else EXIT_SETUP_ERROR
    args.debug = args.debug or debug
    try:
        code: int = args.handler(args)
        return code
    except PrecisionbotError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"precisionbot: error: {log_text(str(exc))}", file=sys.stderr)
        return EXIT_SETUP_ERROR
    except KeyboardInterrupt:
        print("precisionbot: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        # A bug of ours, not a verdict: one line (no traceback unless --debug), exit 3, never 0-2.
        if args.debug:
            traceback.print_exc()
        print(
            f"precisionbot: internal error: {type(exc).__name__}: {log_text(str(exc)[:500])} "
            "(a bug in precisionbot: rerun with --debug for the traceback and report it)",
            file=sys.stderr,
        )
        return EXIT_SETUP_ERROR
