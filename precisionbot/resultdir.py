"""A result directory on disk: ``DIR/result.json`` (schema 1) plus ``DIR/<check>.npz`` per-position arrays.

The only file I/O of results; ``precisionbot.results`` stays pure.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from precisionbot.errors import DataError
from precisionbot.results import PositionRecord, RunResult

RESULT_FILE = "result.json"


def write_result(directory: str | Path, run: RunResult, records: Mapping[str, PositionRecord] | None = None) -> Path:
    """Write ``result.json`` and one compressed ``<check>.npz`` per record; returns the result.json path."""
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, record in (records or {}).items():
            np.savez_compressed(out / f"{name}.npz", allow_pickle=False, **record.arrays())
        path = out / RESULT_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(run.to_json(), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise DataError(f"cannot write results to {out}: {exc.strerror or exc}; check the --out directory") from exc
    return path


def read_result(directory: str | Path) -> RunResult:
    """Read ``DIR/result.json`` (or a path to the file itself) into a ``RunResult``."""
    path = Path(directory)
    if path.is_dir():
        path = path / RESULT_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path} not found: pass a directory written by `precisionbot check --out DIR`") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return RunResult.from_json(text)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{path} is not a valid precisionbot result (schema 1): {exc}") from exc


def read_records(directory: str | Path) -> dict[str, PositionRecord]:
    """Every ``<check>.npz`` in a result directory, by check name."""
    out: dict[str, PositionRecord] = {}
    for path in sorted(Path(directory).glob("*.npz")):
        try:
            with np.load(path, allow_pickle=False) as data:
                out[path.stem] = PositionRecord.from_arrays({k: data[k] for k in data.files})
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise DataError(f"{path} is not a valid position-record archive: {exc}") from exc
    return out
