"""The baseline ``Store``: a tiny key/value protocol over a local directory or an S3 prefix.

Keys are ``/``-separated relative paths (``model/signature/2026-11-29/run-id/meta.json``). Objects are
immutable: ``put_bytes`` is create-only (S3 ``If-None-Match: *``, ``os.link`` locally), so two writers can
never overwrite each other and a reader never sees a half-written object. There is no shared manifest to
read-modify-write (SGLang's nightly store loses rows that way): listing the keys *is* the manifest.

``precisionbot.baselines.store.open_store(uri)`` is the one place a URI becomes an adapter; each
implementation lives in its own module and translates its SDK's errors into ``StoreError`` naming the key.
"""

from __future__ import annotations

import re
from typing import Protocol

from precisionbot.errors import StoreError

_KEY_PART = re.compile(r"^[A-Za-z0-9._=+-]+$")


class Store(Protocol):
    """Immutable objects under string keys."""

    @property
    def uri(self) -> str:
        """The URI this store was opened from (shown in messages)."""
        ...

    def put_bytes(self, key: str, data: bytes) -> None:
        """Create ``key`` with ``data``; raise ``StoreError`` if it already exists or the write fails."""
        ...

    def get_bytes(self, key: str) -> bytes:
        """The object's bytes; ``StoreError`` naming the key if it is missing or unreadable."""
        ...

    def list_keys(self, prefix: str) -> list[str]:
        """Every key that starts with ``prefix`` (sorted); empty when there are none."""
        ...


class ObjectNotFound(StoreError):
    """``get_bytes`` of a key the store does not hold."""


class CorruptObject(StoreError):
    """An object that was read but is not what was written: truncated, failing its sha256, not parsing, or
    listed by its run's ``meta.json`` and missing. A data problem of one run (listing and selection skip the
    run), unlike a store that cannot be reached or refuses a call (an error for the whole command)."""


def check_key(key: str) -> str:
    """Reject keys that could escape the store's root or collide after normalisation."""
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") or not _KEY_PART.match(p) for p in parts):
        raise StoreError(f"invalid store key {key!r}: use '/'-separated names of letters, digits and ._=+-")
    return key
