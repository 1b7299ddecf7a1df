"""The baseline-store option, one definition for every command that takes a store."""

from __future__ import annotations

from typing import Any

STORE_FLAGS = ("--store", "--baseline-store")
"""One option under two names: ``baseline record`` has always said ``--store``, ``check`` ``--baseline-store``;
either spelling works on every command."""


def add_store_option(parser: Any, *, dest: str = "store", help: str | None = None) -> None:
    """Adds ``--store`` / ``--baseline-store`` (a URI: s3://bucket/prefix, file:///dir or a directory)."""
    first, second = STORE_FLAGS if dest == "store" else STORE_FLAGS[::-1]
    parser.add_argument(first, second, dest=dest, metavar="URI", help=help)
