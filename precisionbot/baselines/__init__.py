"""Golden baselines: the store (local directory or S3), run records, signatures, selection and producers.

``open_store(uri)`` gives a ``Store``; ``write_run`` / ``list_runs`` / ``select_baseline`` / ``load_arrays``
work on any store. See docs/baselines.md.
"""

from __future__ import annotations

from precisionbot.baselines.catalog import (
    band_runs,
    find_run,
    list_runs,
    load_arrays,
    load_golden,
    nearest_other_signature,
    newest_run,
    select_baseline,
    select_golden,
    write_run,
)
from precisionbot.baselines.record import LABELS, RunMeta, new_run_id, now_utc
from precisionbot.baselines.signature import Signature, describe_mismatch, hash_params, normalize_engine_args
from precisionbot.baselines.store import DEFAULT_STORE_URI, Store, open_store

__all__ = [
    "DEFAULT_STORE_URI",
    "LABELS",
    "RunMeta",
    "Signature",
    "Store",
    "band_runs",
    "describe_mismatch",
    "find_run",
    "hash_params",
    "list_runs",
    "load_arrays",
    "load_golden",
    "nearest_other_signature",
    "new_run_id",
    "newest_run",
    "normalize_engine_args",
    "now_utc",
    "open_store",
    "select_baseline",
    "select_golden",
    "write_run",
]
