"""The baseline-store option, one definition for every command that takes a store, and the rule that a named
local store must exist."""

from __future__ import annotations

from typing import Any

STORE_FLAGS = ("--store", "--baseline-store")
"""One option under two names: ``baseline record`` has always said ``--store``, ``check`` ``--baseline-store``;
either spelling works on every command."""


def add_store_option(parser: Any, *, dest: str = "store", help: str | None = None) -> None:
    """Adds ``--store`` / ``--baseline-store`` (a URI: s3://bucket/prefix, file:///dir or a directory)."""
    first, second = STORE_FLAGS if dest == "store" else STORE_FLAGS[::-1]
    parser.add_argument(first, second, dest=dest, metavar="URI", help=help)


def require_existing_store(store: Any, flag: str) -> None:
    """A local store directory that does not exist is a typo or a store never recorded into: a setup error
    (exit 3) in every command that reads baselines, so ``check`` and ``baseline list`` agree."""
    from precisionbot.baselines.store.local import LocalStore
    from precisionbot.errors import StoreError

    if isinstance(store, LocalStore) and not store.root.exists():
        raise StoreError(
            f"baseline store {store.uri} does not exist; check {flag} "
            "(or baselines.store in the config; `precisionbot baseline record` creates it)"
        )
