"""Quarantine markers: how a run is taken out of listing and selection in a store nobody may delete from.

The recommended IAM policy is create-only (``s3:PutObject`` with ``If-None-Match``, no ``s3:DeleteObject``),
so a corrupt or wrong run cannot be removed. ``precisionbot baseline quarantine RUN --reason TEXT`` writes
``quarantine/<run id>.json`` (reason, who, when, the run's key) instead, itself create-only: after it the run
is skipped without a warning and ``baseline list`` shows it as quarantined. A quarantine is undone only by an
operator deleting the marker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from precisionbot.baselines.store import ObjectNotFound, Store
from precisionbot.errors import ConfigError, StoreError

QUARANTINE_DIR = "quarantine"
"""The markers' folder under the store's root (a run's keys have four ``/``; a marker's one)."""

MAX_REASON = 500


@dataclass(frozen=True)
class Marker:
    run_id: str
    key: str
    """The quarantined run's ``meta.json`` key."""
    reason: str
    by: str
    at: str
    """ISO-8601 UTC time the marker was written."""


def marker_key(run_id: str) -> str:
    return f"{QUARANTINE_DIR}/{run_id}.json"


def quarantined_ids(store: Store) -> frozenset[str]:
    """The run ids with a marker (one listing, no reads)."""
    prefix = QUARANTINE_DIR + "/"
    return frozenset(
        k[len(prefix) : -len(".json")] for k in store.list_keys(prefix) if k.count("/") == 1 and k.endswith(".json")
    )


def write_marker(store: Store, key: str, *, reason: str, by: str, when: datetime) -> Marker:
    """Quarantine the run whose ``meta.json`` is ``key`` (create-only: a second quarantine is refused)."""
    reason = " ".join(reason.split())
    if not reason or len(reason) > MAX_REASON:
        raise ConfigError(f"--reason must say why in 1 to {MAX_REASON} characters")
    run_id = key.split("/")[3]
    marker = Marker(run_id=run_id, key=key, reason=reason, by=by, at=when.isoformat())
    data = (json.dumps(marker.__dict__, indent=2, sort_keys=True) + "\n").encode()
    target = marker_key(run_id)
    if target in store.list_keys(target):
        raise StoreError(f"run {run_id} is already quarantined in {store.uri} ({target})")
    store.put_bytes(target, data)
    return marker


def read_markers(store: Store) -> list[Marker]:
    """Every marker, oldest run first; an unreadable marker still quarantines its run and reads as such."""
    out = []
    for run_id in sorted(quarantined_ids(store)):
        try:
            raw: Any = json.loads(store.get_bytes(marker_key(run_id)).decode())
        except (ObjectNotFound, UnicodeDecodeError, ValueError):
            raw = {}
        info: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        out.append(
            Marker(
                run_id=run_id,
                key=str(info.get("key", "?")),
                reason=str(info.get("reason", "(unreadable marker)")),
                by=str(info.get("by", "?")),
                at=str(info.get("at", "?")),
            )
        )
    return out
