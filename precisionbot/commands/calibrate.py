"""``precisionbot calibrate``: where each threshold separates known-good from known-bad variants."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="run known-good and known-bad builtin engine variants and show where each threshold separates them",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from precisionbot.errors import ConfigError

    raise ConfigError("calibrate is not built yet")
