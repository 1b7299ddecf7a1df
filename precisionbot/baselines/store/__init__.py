"""The baseline store: ``open_store(uri)`` turns a URI into a ``Store``.

::

    base.py   the ``Store`` protocol (immutable objects under keys) and the key rules
    local.py  ``LocalStore``: a directory (create-only writes through ``os.link``)
    s3.py     ``S3Store``: an S3 prefix through boto3 (``If-None-Match: *``), MinIO and moto included

The commands open the store once and hand the object to whatever needs it; nothing below them takes a URI.
"""

from __future__ import annotations

from precisionbot.baselines.store.base import CorruptObject, ObjectNotFound, Store, check_key
from precisionbot.baselines.store.local import LocalStore
from precisionbot.config.fields import store_uri_problem
from precisionbot.config.settings import DEFAULT_STORE_URI
from precisionbot.errors import StoreError

__all__ = [
    "DEFAULT_STORE_URI",
    "CorruptObject",
    "LocalStore",
    "ObjectNotFound",
    "Store",
    "check_key",
    "open_store",
]


def open_store(uri: str | None) -> Store:
    """A ``Store`` for ``s3://bucket/prefix``, ``file:///path`` or a plain directory path (default
    ``.precisionbot/baselines``). S3 uses boto3's own credential and endpoint chain (``AWS_ENDPOINT_URL``)."""
    text = (uri or DEFAULT_STORE_URI).strip()
    problem = store_uri_problem(text)
    if problem is not None:
        raise StoreError(f"the baseline store {problem[0]}; {problem[1]}")
    if text.startswith("s3://"):
        from precisionbot.baselines.store.s3 import S3Store  # botocore: only when S3 is asked for

        return S3Store.from_uri(text)
    return LocalStore.from_uri(text)
