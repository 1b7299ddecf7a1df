"""Writing, listing, selecting and loading run records. Listing the store's keys builds the view.

Selection (as SGLang's nightly store, minus its racy manifest): among runs of the same model and signature,
the newest whose label is not ``failed``. Failed runs are kept as evidence and listed, never selected.
"Newest" is the time parsed from the run id (``record.run_id_time``), never the id as a string.

One bad run never breaks the store: the recommended IAM policy is create-only, so a truncated ``meta.json``
or an array failing its sha256 cannot be deleted, and an error for the whole store would last for good. A
run that is corrupt (``CorruptObject``: its meta does not parse, a file fails its sha256 or is missing) or
foreign (a run id that is not canonical, a ``meta.json`` that describes another key: not a run precisionbot
wrote) is skipped by listing and selection with one warning line naming its key (``skips``); the next good
run is served. ``baseline quarantine`` writes an append-only marker (``quarantine.py``) after which the run is
skipped silently. A store that cannot be reached or refuses a call is still an error (``StoreError``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import numpy.typing as npt

from precisionbot.baselines.quarantine import quarantined_ids
from precisionbot.baselines.record import (
    LABELS,
    META_NAME,
    Arrays,
    RunMeta,
    decode_arrays,
    decode_meta,
    encode_arrays,
    encode_meta,
    model_key,
    run_id_time,
    sha256_hex,
)
from precisionbot.baselines.skips import warn_skipped
from precisionbot.baselines.store import CorruptObject, ObjectNotFound, Store
from precisionbot.errors import StoreError
from precisionbot.results.golden_record import GOLDEN_ARRAYS, GoldenRecord


def write_run(store: Store, meta: RunMeta, arrays: Mapping[str, Arrays]) -> RunMeta:
    """Write each ``name → arrays`` as ``<name>.npz``, then ``meta.json`` with their sha256. Returns the meta
    as stored. Nothing existing is touched: every key is new (create-only)."""
    run_id_time(meta.run_id)
    if meta.label not in LABELS:
        raise StoreError(f"run label {meta.label!r} is not one of {', '.join(LABELS)}")
    files: dict[str, Mapping[str, Any]] = {}
    for name, group in arrays.items():
        data = encode_arrays(group)
        filename = f"{name}.npz"
        store.put_bytes(meta.prefix + filename, data)
        files[filename] = {"sha256": sha256_hex(data), "bytes": len(data)}
    data = encode_meta(replace(meta, files=files))
    store.put_bytes(meta.prefix + META_NAME, data)
    return decode_meta(data, meta.prefix + META_NAME)


def _meta_keys(store: Store, prefix: str) -> list[str]:
    return [k for k in store.list_keys(prefix) if k.endswith("/" + META_NAME) and k.count("/") == 4]


def _newest_first(store: Store, keys: list[str]) -> list[str]:
    """``<model>/<signature>/<date>/<run-id>/meta.json`` keys of canonical run ids, newest first by the time
    parsed from the id (then the id, for a stable order between runs of the same microsecond). A key whose id
    is not canonical is skipped with a warning (not a run precisionbot wrote: see the module docstring)."""
    dated = []
    for key in keys:
        run_id = key.split("/")[3]
        try:
            dated.append((run_id_time(run_id), run_id, key))
        except StoreError as exc:
            warn_skipped(store, key, f"foreign: {exc}")
    return [key for *_, key in sorted(dated, reverse=True)]


def runs(store: Store, prefix: str) -> Iterator[RunMeta]:
    """The readable, unquarantined runs under ``prefix`` (newest first), read lazily: a corrupt or foreign
    one is skipped with its warning, a quarantined one silently."""
    keys = _newest_first(store, _meta_keys(store, prefix))
    if not keys:
        return
    hidden = quarantined_ids(store)
    for key in keys:
        if key.split("/")[3] in hidden:
            continue
        meta = read_meta(store, key)
        if meta is not None:
            yield meta


def read_meta(store: Store, key: str) -> RunMeta | None:
    """The run whose ``meta.json`` is ``key``; None (and its warning) when it is corrupt or foreign."""
    try:
        meta = decode_meta(store.get_bytes(key), key)
    except CorruptObject as exc:
        warn_skipped(store, key, str(exc))
        return None
    if meta.prefix + META_NAME != key:
        warn_skipped(store, key, f"foreign: its meta.json describes {meta.prefix + META_NAME}, not this key")
        return None
    return meta


def _prefix(model: str | None, signature: str | None = None) -> str:
    if model is None:
        return ""
    return model_key(model) + "/" + ("" if signature is None else signature + "/")


def list_runs(store: Store, model: str | None = None, signature: str | None = None) -> list[RunMeta]:
    """Every complete run (newest first), optionally of one model and signature; corrupt, foreign and
    quarantined runs are left out (see the module docstring)."""
    return list(runs(store, _prefix(model, signature)))


def select_baseline(store: Store, model: str, signature: str) -> RunMeta | None:
    """The newest run of ``model`` with ``signature`` whose label is not ``failed``; ``None`` if none."""
    return next((m for m in runs(store, _prefix(model, signature)) if m.label != "failed"), None)


def band_runs(store: Store, baseline: RunMeta) -> list[RunMeta]:
    """The baseline's producers: good runs of the same model, signature and engine commit (the baseline
    first). Their pairwise differences are the noise band."""
    runs = [
        r
        for r in list_runs(store, baseline.model, baseline.signature)
        if r.label != "failed" and r.engine_commit == baseline.engine_commit and r.run_id != baseline.run_id
    ]
    return [baseline, *runs]


def nearest_other_signature(store: Store, model: str, signature: str) -> RunMeta | None:
    """The newest good run of ``model`` under any other signature (to show which parts differ)."""
    return next((m for m in runs(store, _prefix(model)) if m.signature != signature and m.label != "failed"), None)


def newest_run(store: Store) -> RunMeta | None:
    """The newest good run of any model (to say what the store holds when a model has no baseline at all)."""
    return next((m for m in runs(store, "") if m.label != "failed"), None)


def find_run(store: Store, run_id: str) -> RunMeta:
    """A run by id (or a unique prefix of it, or its key prefix); quarantined runs too."""
    key = find_run_key(store, run_id)
    return decode_meta(store.get_bytes(key), key)


def find_run_key(store: Store, run_id: str) -> str:
    """The ``meta.json`` key of a run by id (or a unique prefix of it, or its key prefix), without reading it:
    a corrupt run is found as well (``baseline quarantine``)."""
    wanted = run_id.strip("/").split("/")[-1] if "/" in run_id else run_id
    if wanted.endswith(META_NAME):
        wanted = run_id.strip("/").split("/")[-2]
    matches = [k for k in _meta_keys(store, "") if k.split("/")[3].startswith(wanted)]
    if not matches:
        raise StoreError(f"no run {run_id!r} in baseline store {store.uri}; see `precisionbot baseline list`")
    if len(matches) > 1:
        raise StoreError(f"run {run_id!r} is ambiguous in {store.uri} ({len(matches)} runs); give more of its id")
    return matches[0]


def load_arrays(store: Store, meta: RunMeta, name: str) -> dict[str, npt.NDArray[Any]]:
    """The arrays of ``<name>.npz``, verified against the sha256 in ``meta.json``."""
    filename = f"{name}.npz"
    key = meta.prefix + filename
    info = meta.files.get(filename)
    if info is None:
        raise CorruptObject(f"run {meta.run_id} has no {filename} (has: {', '.join(meta.files) or 'nothing'})")
    try:
        data = store.get_bytes(key)
    except ObjectNotFound as exc:
        raise CorruptObject(f"run {meta.run_id} lists {filename} but {key} is missing from {store.uri}") from exc
    if sha256_hex(data) != info.get("sha256"):
        raise CorruptObject(
            f"baseline object {key} in {store.uri} fails its sha256 check ({len(data)} bytes, "
            f"{info.get('bytes')} recorded): corrupt or truncated"
        )
    return decode_arrays(data, key)


def load_golden(store: Store, meta: RunMeta) -> GoldenRecord:
    """A golden run's per-position record (``StoreError`` naming the run when it is not a golden run)."""
    golden = meta.extra.get("golden")
    if not isinstance(golden, dict) or "samples" not in golden:
        raise CorruptObject(
            f"run {meta.run_id} in {store.uri} is not a golden run (its meta.json has no golden layout)"
        )
    arrays = load_arrays(store, meta, GOLDEN_ARRAYS)
    try:
        return GoldenRecord.from_arrays(golden["samples"], arrays)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptObject(
            f"run {meta.run_id} in {store.uri}: its golden layout does not fit its arrays ({exc})"
        ) from exc


def select_golden(store: Store, model: str, signature: str) -> tuple[list[RunMeta], list[GoldenRecord]] | None:
    """The baseline of ``model`` / ``signature`` and its band's producers (``band_runs``) with their golden
    records, the baseline first; None when the signature has no good run at all.

    A run whose record is corrupt is skipped with its warning (the newest being corrupt: the next good one is
    the baseline); when every good run is corrupt, a ``StoreError`` names them and the fix."""
    broken: list[str] = []
    for meta in runs(store, _prefix(model, signature)):
        if meta.label == "failed":
            continue
        record = golden_or_warn(store, meta)
        if record is None:
            broken.append(meta.prefix + META_NAME)
            continue
        producers, records = [meta], [record]
        for other in band_runs(store, meta)[1:]:
            found = golden_or_warn(store, other)
            if found is not None:
                producers.append(other)
                records.append(found)
        return producers, records
    if broken:
        raise StoreError(
            f"every baseline of model {model!r} with signature {signature} in {store.uri} is corrupt "
            f"({', '.join(broken)}): record a new one with `precisionbot baseline record`, and quarantine these "
            "with `precisionbot baseline quarantine RUN --reason ...` (the store's policy forbids deletes)"
        )
    return None


def golden_or_warn(store: Store, meta: RunMeta) -> GoldenRecord | None:
    """The run's golden record, or None when it is corrupt (skipped with its one warning)."""
    try:
        return load_golden(store, meta)
    except CorruptObject as exc:
        warn_skipped(store, meta.prefix + META_NAME, str(exc))
        return None
