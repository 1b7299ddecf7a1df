"""Copy recorded runs from a staging store (the GPU job's artifact) into the real store, checking each one.

The GPU job that records baselines runs the engine's code; what it hands over is data to verify, not to copy
blindly (``aws s3 cp --recursive`` would overwrite any key the artifact names). Every run must be complete and
self-consistent (its key prefix is the one its meta implies, every file's sha256 matches, nothing extra), and
dated no later than now: run ids sort by their UTC timestamp and the newest is selected, so a run dated in
the future would stay the baseline for good. Writes go through the store's create-only ``put_bytes``, files
first and ``meta.json`` last, so a half-published run is never listed. Pure over the ``Store`` protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from precisionbot.baselines.record import META_NAME, RunMeta, decode_meta, sha256_hex
from precisionbot.baselines.store import Store
from precisionbot.errors import StoreError

CLOCK_SKEW = timedelta(minutes=10)
"""How far in the future a run may be dated (the GPU host's clock may run a little ahead)."""


@dataclass(frozen=True)
class Checked:
    meta: RunMeta
    files: dict[str, bytes]
    """``meta.json`` and every file it lists, by name, as they will be written."""


def run_id_time(run_id: str) -> datetime | None:
    """The UTC timestamp a run id starts with (``20260101T120000123456Z-...``); None when it has none."""
    try:
        return datetime.strptime(run_id.split("-", 1)[0], "%Y%m%dT%H%M%S%fZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def check_staged(staging: Store, now: datetime) -> list[Checked]:
    """Every run in ``staging``, verified; a ``StoreError`` naming the first problem otherwise."""
    keys = staging.list_keys("")
    metas = [k for k in keys if k.endswith("/" + META_NAME) and k.count("/") == 4]
    if not metas:
        raise StoreError(f"no recorded run in {staging.uri}: nothing to publish (did `baseline record` run?)")
    claimed: set[str] = set()
    checked = []
    for key in metas:
        meta = decode_meta(staging.get_bytes(key), key)
        where = f"run {key.rsplit('/', 2)[0]} in {staging.uri}"
        if key != meta.prefix + META_NAME:
            raise StoreError(f"{where}: its meta.json describes {meta.prefix!r}, not this key")
        stamp = run_id_time(meta.run_id)
        if stamp is None:
            raise StoreError(f"{where}: run id {meta.run_id!r} does not start with a UTC timestamp")
        if stamp > now + CLOCK_SKEW or meta.created[:10] != stamp.strftime("%Y-%m-%d"):
            raise StoreError(
                f"{where}: run id {meta.run_id!r} is dated {stamp:%Y-%m-%dT%H:%M:%SZ}, later than now "
                f"({now:%Y-%m-%dT%H:%M:%SZ}) or not on its recorded date: a run from the future would stay the "
                "selected baseline"
            )
        files = {META_NAME: staging.get_bytes(key)}
        for name, info in meta.files.items():
            data = staging.get_bytes(meta.prefix + name)
            if sha256_hex(data) != info.get("sha256"):
                raise StoreError(f"{where}: {name} does not match the sha256 in its meta.json")
            files[name] = data
        claimed.update(meta.prefix + name for name in files)
        checked.append(Checked(meta, files))
    stray = sorted(set(keys) - claimed)
    if stray:
        raise StoreError(f"{staging.uri} holds {stray[0]!r}, which no run's meta.json lists: refusing to publish it")
    return checked


def publish(staging: Store, target: Store, now: datetime) -> list[RunMeta]:
    """Verify everything first, then write run by run (create-only; meta.json last)."""
    runs = check_staged(staging, now)
    for run in runs:
        for name, data in run.files.items():
            if name != META_NAME:
                target.put_bytes(run.meta.prefix + name, data)
        target.put_bytes(run.meta.prefix + META_NAME, run.files[META_NAME])
    return [run.meta for run in runs]
