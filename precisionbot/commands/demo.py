"""``precisionbot demo`` (being built; see issue 6)."""

from __future__ import annotations

import argparse
from typing import Any

from precisionbot.errors import ConfigError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("demo", help="the embedded default end to end (builtin engine, fault, comment)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    raise ConfigError("precisionbot demo is not built yet")
