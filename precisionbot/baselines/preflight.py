"""Preflight: the store verified before any engine work, so a store error costs no GPU minute.

``check`` (when golden or the main-noise rule reads the store) and ``baseline record`` used to reach the store
only after the engine had run: missing credentials, a wrong bucket or a corrupt baseline then threw the whole
run away. :func:`preflight_read` lists the store (credentials, bucket, prefix, ``s3:ListBucket``) and reads
the newest good run's ``meta.json`` (``s3:GetObject``) of the model when it is known (else of the store),
verifying its files' sha256 when they are small (a corrupt one is warned about here, and skipped later, as
``catalog`` does). :func:`preflight_write` writes one small probe object where a recorder will write,
``.precisionbot-probe/<time>-<hex>.json``: a create-only policy allows it (it is a new key), nothing reads it,
and ``baseline publish`` ignores it in a staging store. Probes are never deleted (the policy forbids it); an
S3 lifecycle rule on ``<prefix>/.precisionbot-probe/`` can expire them.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from precisionbot.baselines.catalog import load_arrays, runs
from precisionbot.baselines.record import META_NAME, RunMeta, model_key
from precisionbot.baselines.skips import warn_skipped
from precisionbot.baselines.store import CorruptObject, Store

PROBE_DIR = ".precisionbot-probe"

VERIFY_BYTES = 16 * 1024 * 1024
"""The newest run's files are verified up front when they add up to at most this (a few seconds of S3)."""


def preflight_read(store: Store, model: str | None) -> RunMeta | None:
    """The newest good run of ``model`` (any model when None), its meta read and, when small, its files
    verified; None in an empty store. ``StoreError`` when the store cannot be listed or read."""
    prefix = "" if model is None else model_key(model) + "/"
    newest = next((m for m in runs(store, prefix) if m.label != "failed"), None)
    if newest is None:
        return None
    size = sum(int(info.get("bytes") or 0) for info in newest.files.values())
    if size <= VERIFY_BYTES:
        for filename in newest.files:
            try:
                load_arrays(store, newest, filename.removesuffix(".npz"))
            except CorruptObject as exc:
                warn_skipped(store, newest.prefix + META_NAME, str(exc))
                break
    return newest


def preflight_write(store: Store, when: datetime, purpose: str) -> str:
    """Write a new probe object (create-only, as every write) and return its key: the store takes writes."""
    key = f"{PROBE_DIR}/{when.strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:8]}.json"
    body = {"probe": purpose, "at": when.isoformat()}
    store.put_bytes(key, (json.dumps(body, sort_keys=True) + "\n").encode())
    return key
