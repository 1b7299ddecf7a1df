"""The composition root: parses arguments, builds the real adapters, runs a command, maps errors to exit codes.

Each subcommand lives in ``precisionbot/commands/<name>.py`` and exposes ``register(subparsers)``, which adds
its parser and sets ``handler`` (a callable ``(argparse.Namespace) -> int``). Command modules import heavy
dependencies (torch, boto3, PyGithub) inside their handlers so that ``precisionbot github plan`` starts fast
on a small hosted runner without torch installed.

Exit codes (CONTRACT): 0 pass, 1 fail, 2 inconclusive, 3 our own setup error. Nothing else calls ``sys.exit``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence

from precisionbot import __version__
from precisionbot.errors import PrecisionbotError

EXIT_SETUP_ERROR = 3

COMMANDS = ("serve", "check", "baseline", "report", "demo", "github", "runner", "calibrate")
"""Subcommand modules under ``precisionbot.commands``, in ``--help`` order."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="precisionbot",
        description="Tells you, on every kernel PR, whether it changed the model's numbers, how much, where and why.",
    )
    parser.add_argument("--version", action="version", version=f"precisionbot {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"precisionbot.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
        return code
    except PrecisionbotError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"precisionbot: error: {exc}", file=sys.stderr)
        return EXIT_SETUP_ERROR
    except KeyboardInterrupt:
        print("precisionbot: interrupted", file=sys.stderr)
        return 130
