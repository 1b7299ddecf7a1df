"""A run record: ``meta.json`` plus compressed ``.npz`` array files, each verified by sha256.

Layout in the store: ``<model>/<signature>/<YYYY-MM-DD>/<run-id>/{<name>.npz..., meta.json}``. The arrays
are written first and ``meta.json`` last, so a run without ``meta.json`` is incomplete and never listed.
Run ids start with a UTC timestamp (microseconds) and end in random hex, so two recorders never pick the same
one. Only the canonical shape :func:`new_run_id` writes is a run id (:func:`run_id_time` parses it strictly):
the newest run is the selected baseline, so an id that a lenient parser reads as one date while it sorts as
a string after every real one (``202691T0000000Z-...``: September 2026 to ``strptime``, newer than any
``2026...`` id as text) would stay the baseline for good.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import uuid
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionbot.baselines.store.base import CorruptObject
from precisionbot.errors import StoreError

META_NAME = "meta.json"
META_FORMAT = 1
LABELS = ("passed", "failed", "baseline_established")
"""Run labels. Every label except ``failed`` may be selected as a baseline."""

Arrays = Mapping[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class RunMeta:
    """What ``meta.json`` holds."""

    run_id: str
    model: str
    signature: str
    """The signature digest (16 hex digits)."""
    signature_parts: Mapping[str, Any]
    created: str
    """ISO-8601 UTC time the run was recorded (microseconds)."""
    label: str
    producer: str
    """Who produced the numbers: ``default``, or ``--producer NAME`` (a rerun, another backend, ...)."""
    engine_commit: str | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    files: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """``<name>.npz`` → ``{"sha256": hex, "bytes": n}``."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Check-specific layout (e.g. golden's per-sample table), JSON-native."""
    fingerprint: Mapping[str, Any] = field(default_factory=dict)
    """The environment it was recorded in (``baselines/fingerprint.py``); empty for runs recorded before it."""

    @property
    def date(self) -> str:
        return self.created[:10]

    @property
    def prefix(self) -> str:
        """The run's key prefix in the store (ends with ``/``)."""
        return f"{model_key(self.model)}/{self.signature}/{self.date}/{self.run_id}/"

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": META_FORMAT,
            "run_id": self.run_id,
            "model": self.model,
            "signature": self.signature,
            "signature_parts": dict(self.signature_parts),
            "engine_commit": self.engine_commit,
            "created": self.created,
            "date": self.date,
            "label": self.label,
            "producer": self.producer,
            "stats": dict(self.stats),
            "files": {k: dict(v) for k, v in self.files.items()},
            "extra": dict(self.extra),
            "fingerprint": dict(self.fingerprint),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunMeta:
        if data.get("format") != META_FORMAT:
            raise ValueError(f"meta format {data.get('format')!r} is not supported (expected {META_FORMAT})")
        return cls(
            run_id=str(data["run_id"]),
            model=str(data["model"]),
            signature=str(data["signature"]),
            signature_parts=dict(data["signature_parts"]),
            created=str(data["created"]),
            label=str(data["label"]),
            producer=str(data["producer"]),
            engine_commit=None if data.get("engine_commit") is None else str(data["engine_commit"]),
            stats=dict(data.get("stats") or {}),
            files={str(k): dict(v) for k, v in (data.get("files") or {}).items()},
            extra=dict(data.get("extra") or {}),
            fingerprint=dict(data.get("fingerprint") or {}),
        )


_PLAIN_SEGMENT = re.compile(r"^[A-Za-z0-9._+]+(?:-[A-Za-z0-9._+]+)*$")


def model_key(model: str) -> str:
    """A model name as one key segment, injectively: two names never share a key.

    Plain names (``/``-separated parts of letters, digits, ``._+`` and single inner ``-``) keep their readable
    form, ``/`` → ``--`` (``Qwen/Qwen3-8B`` → ``Qwen--Qwen3-8B``); such a name cannot contain ``--`` or
    ``=`` itself. Any other name (``a--b``, spaces, ``=``, ...) becomes ``=`` + the hex of its UTF-8 bytes,
    which no plain name can start with."""
    parts = model.split("/")
    if all(part not in (".", "..") and _PLAIN_SEGMENT.match(part) for part in parts):
        return "--".join(parts)
    return "=" + model.encode("utf-8").hex()


def new_run_id(now: datetime, producer: str) -> str:
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{stamp}-{model_key(producer)[:24]}-{uuid.uuid4().hex[:8]}"


RUN_ID = re.compile(r"(?P<stamp>[0-9]{8}T[0-9]{12}Z)-(?P<producer>[A-Za-z0-9._+=-]{1,24})-(?P<nonce>[0-9a-f]{8})")
"""What :func:`new_run_id` writes: 20 digits of UTC time (``YYYYMMDDTHHMMSSffffffZ``), the producer's key
(at most 24 characters of a :func:`model_key`), 8 hex digits."""


def run_id_time(run_id: str) -> datetime:
    """The UTC time a canonical run id starts with; ``StoreError`` naming the id otherwise.

    The shape first (:data:`RUN_ID`, in full), then the calendar: ``strptime`` alone takes one-digit months,
    days and hours, so it dates ``202691T0000000Z`` to 2026-09-01. With exactly 8 + 12 digits every field must
    take its full width, and ``strptime`` then only checks that each is in range (month 13, February 30)."""
    match = RUN_ID.fullmatch(run_id)
    if match is None:
        raise StoreError(
            f"run id {run_id!r} is not of the form YYYYMMDDTHHMMSSffffffZ-<producer>-<8 hex> that "
            "`baseline record` writes: not a run precisionbot recorded"
        )
    try:
        return datetime.strptime(match["stamp"], "%Y%m%dT%H%M%S%fZ").replace(tzinfo=timezone.utc)
    except ValueError as exc:
        raise StoreError(f"run id {run_id!r} does not start with a valid UTC time ({exc})") from exc


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def encode_arrays(arrays: Arrays) -> bytes:
    """Arrays as one compressed ``.npz`` (no pickles)."""
    buf = io.BytesIO()
    contiguous: dict[str, Any] = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    np.savez_compressed(buf, allow_pickle=False, **contiguous)
    return buf.getvalue()


def decode_arrays(data: bytes, key: str) -> dict[str, npt.NDArray[Any]]:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise CorruptObject(f"baseline object {key} is corrupt or truncated ({exc})") from exc


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_meta(meta: RunMeta) -> bytes:
    return (json.dumps(_finite(meta.to_dict()), indent=2, sort_keys=True, allow_nan=False) + "\n").encode()


def _finite(value: Any) -> Any:
    """Strict JSON: a non-finite stat (a NaN found by a check) is kept as its string, never dropped."""
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        return _finite(value.item())
    return value


def decode_meta(data: bytes, key: str) -> RunMeta:
    try:
        return RunMeta.from_dict(json.loads(data.decode()))
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptObject(f"baseline meta {key} is corrupt or truncated ({exc})") from exc
