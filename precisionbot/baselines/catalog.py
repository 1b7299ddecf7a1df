"""Writing, listing, selecting and loading run records. Listing the store's keys builds the view.

Selection (as SGLang's nightly store, minus its racy manifest): among runs of the same model and signature,
the newest whose label is not ``failed``. Failed runs are kept as evidence and listed, never selected.
"Newest" is the time parsed from the run id (``record.run_id_time``), never the id as a string; a key whose
run id is not canonical was not written by precisionbot (``write_run`` and ``baseline publish`` refuse one)
and is neither listed nor selected, like a run without ``meta.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy.typing as npt

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
from precisionbot.baselines.store import Store
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


def _newest_first(keys: list[str]) -> list[str]:
    """``<model>/<signature>/<date>/<run-id>/meta.json`` keys of canonical run ids, newest first by the time
    parsed from the id (then the id, for a stable order between runs of the same microsecond)."""
    dated = []
    for key in keys:
        run_id = key.split("/")[3]
        try:
            dated.append((run_id_time(run_id), run_id, key))
        except StoreError:
            continue  # not a run precisionbot wrote (see the module docstring)
    return [key for *_, key in sorted(dated, reverse=True)]


def list_runs(store: Store, model: str | None = None, signature: str | None = None) -> list[RunMeta]:
    """Every complete run (newest first), optionally of one model and signature."""
    prefix = ""
    if model is not None:
        prefix = model_key(model) + "/"
        if signature is not None:
            prefix += signature + "/"
    return [decode_meta(store.get_bytes(k), k) for k in _newest_first(_meta_keys(store, prefix))]


def select_baseline(store: Store, model: str, signature: str) -> RunMeta | None:
    """The newest run of ``model`` with ``signature`` whose label is not ``failed``; ``None`` if none."""
    for key in _newest_first(_meta_keys(store, f"{model_key(model)}/{signature}/")):
        meta = decode_meta(store.get_bytes(key), key)
        if meta.label != "failed":
            return meta
    return None


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
    for key in _newest_first(_meta_keys(store, model_key(model) + "/")):
        if key.split("/")[1] == signature:
            continue
        meta = decode_meta(store.get_bytes(key), key)
        if meta.label != "failed":
            return meta
    return None


def newest_run(store: Store) -> RunMeta | None:
    """The newest good run of any model (to say what the store holds when a model has no baseline at all)."""
    for key in _newest_first(_meta_keys(store, "")):
        meta = decode_meta(store.get_bytes(key), key)
        if meta.label != "failed":
            return meta
    return None


def find_run(store: Store, run_id: str) -> RunMeta:
    """A run by id (or a unique prefix of it, or its key prefix)."""
    wanted = run_id.strip("/").split("/")[-1] if "/" in run_id else run_id
    if wanted.endswith(META_NAME):
        wanted = run_id.strip("/").split("/")[-2]
    matches = [k for k in _meta_keys(store, "") if k.split("/")[3].startswith(wanted)]
    if not matches:
        raise StoreError(f"no run {run_id!r} in baseline store {store.uri}; see `precisionbot baseline list`")
    if len(matches) > 1:
        raise StoreError(f"run {run_id!r} is ambiguous in {store.uri} ({len(matches)} runs); give more of its id")
    return decode_meta(store.get_bytes(matches[0]), matches[0])


def load_arrays(store: Store, meta: RunMeta, name: str) -> dict[str, npt.NDArray[Any]]:
    """The arrays of ``<name>.npz``, verified against the sha256 in ``meta.json``."""
    filename = f"{name}.npz"
    key = meta.prefix + filename
    info = meta.files.get(filename)
    if info is None:
        raise StoreError(f"run {meta.run_id} has no {filename} (has: {', '.join(meta.files) or 'nothing'})")
    data = store.get_bytes(key)
    if sha256_hex(data) != info.get("sha256"):
        raise StoreError(
            f"baseline object {key} in {store.uri} fails its sha256 check ({len(data)} bytes, "
            f"{info.get('bytes')} recorded): corrupt or truncated; re-record the baseline"
        )
    return decode_arrays(data, key)


def load_golden(store: Store, meta: RunMeta) -> GoldenRecord:
    """A golden run's per-position record (``StoreError`` naming the run when it is not a golden run)."""
    golden = meta.extra.get("golden")
    if not isinstance(golden, dict) or "samples" not in golden:
        raise StoreError(f"run {meta.run_id} in {store.uri} is not a golden run (its meta.json has no golden layout)")
    return GoldenRecord.from_arrays(golden["samples"], load_arrays(store, meta, GOLDEN_ARRAYS))
