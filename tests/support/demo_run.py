"""One run of ``precisionbot demo`` (small sizes), shared by the demo command's test, the README excerpt test,
the comment-shape test and the browser test of its report."""

from __future__ import annotations

import argparse
import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from precisionbot.commands import demo

SMALL = [
    "--samples",
    "4",
    "--max-new-tokens",
    "72",  # past the hybrid preset's first 64-token checkpoint: decode_cache_hit needs its hits
    "--prompt-tokens",
    "64..128",
    "--golden-depths",
    "128,256",
    "--quiet",
]


def run_demo(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    demo.register(parser.add_subparsers())
    args = parser.parse_args(["demo", *argv])
    code: int = args.handler(args)
    return code


@dataclass(frozen=True)
class DemoRun:
    code: int
    printed: str
    out: Path


def demo_once(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo run at :data:`SMALL` sizes (``tests/conftest.py`` makes it the session fixture ``demo_run``)."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = run_demo([*SMALL, "--out", str(out)])
    return DemoRun(code=code, printed=printed.getvalue(), out=out)
