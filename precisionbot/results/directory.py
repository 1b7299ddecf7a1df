"""A result directory on disk: ``DIR/result.json`` (schema 1) plus ``DIR/<check>.npz`` per-position arrays.

The only file I/O of results; ``precisionbot.results`` stays pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from precisionbot.errors import DataError
from precisionbot.results.arrays import read_arrays
from precisionbot.results.run import PositionRecord, RunResult
from precisionbot.untrusted import TooLarge, read_capped

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


RESULT_MAX_BYTES = 32 * 1024 * 1024
"""Largest result.json read: a real one is well under 1 MiB (worst positions and per-sample rows only)."""


def read_result(directory: str | Path) -> RunResult:
    """Read ``DIR/result.json`` (or a path to the file itself) into a ``RunResult``.

    The file may come from a job that ran untrusted code: it is read up to ``RESULT_MAX_BYTES``, and any
    malformation (encoding, nesting, types, numbers out of range) is a ``DataError`` naming the file."""
    path = Path(directory)
    if path.is_dir():
        path = path / RESULT_FILE
    invalid = f"{path} is not a valid precisionbot result (schema 1)"
    try:
        data = read_capped(path, RESULT_MAX_BYTES)
    except TooLarge:
        raise DataError(f"{invalid}: larger than {RESULT_MAX_BYTES // 2**20} MiB") from None
    except FileNotFoundError:
        raise DataError(f"{path} not found: pass a directory written by `precisionbot check --out DIR`") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
        problem = shape_problem(json.loads(text))
        if problem is not None:
            raise DataError(f"{invalid}: {problem}")
        return RunResult.from_json(text)
    except UnicodeDecodeError as exc:
        raise DataError(f"{invalid}: not UTF-8 text (byte {exc.start})") from exc
    except RecursionError:
        raise DataError(f"{invalid}: nested too deeply") from None
    except OverflowError as exc:
        raise DataError(f"{invalid}: a number is out of range ({exc})") from exc
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"{invalid}: {str(exc)[:200]}") from exc


_REQUIRED: Mapping[str, tuple[str, ...]] = {
    "": ("schema", "verdict", "signature", "engine", "checks"),
    "engine": ("url", "kind"),
    "checks": ("name", "verdict"),
    "worst": ("sample", "position", "token_id", "token_text", "lp_ref", "lp_test", "delta", "k3"),
    "samples": ("sample", "prompt_tokens", "positions", "mean_k3", "max_k3", "contiguous_from_first"),
    "cache": ("kept", "total"),
    "diagnosis": ("code", "text"),
}


def _missing(obj: object, kind: str, where: str) -> str | None:
    if not isinstance(obj, dict):
        return f"{where or 'the top level'} is a JSON {_json_type(obj)}, expected an object"
    for key in _REQUIRED[kind]:
        if key not in obj:
            return f"missing key {key!r} in {where or 'the top level'}"
    return None


def _json_type(obj: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if obj is None else names.get(type(obj), type(obj).__name__)


def shape_problem(data: object) -> str | None:
    """What is structurally wrong with a parsed result.json (a wrong type or a missing key, with where), or None.

    ``RunResult.from_dict`` would fail on these too, but with a bare ``'verdict'`` or an ``AttributeError``
    that names neither the key's place nor the fix."""
    problem = _missing(data, "", "")
    if problem is not None or not isinstance(data, dict):
        return problem
    if (problem := _missing(data["engine"], "engine", "engine")) is not None:
        return problem
    for key in ("checks", "diagnosis"):
        if not isinstance(data.get(key, []), list):
            return f"{key} is a JSON {_json_type(data[key])}, expected an array"
    for i, check in enumerate(data["checks"]):
        if (problem := _missing(check, "checks", f"checks[{i}]")) is not None:
            return problem
        if (problem := _stats_problem(check.get("stats", {}), f"checks[{i}].stats")) is not None:
            return problem
        if check.get("cache") is not None and (problem := _missing(check["cache"], "cache", f"checks[{i}].cache")):
            return problem
        for key in ("worst", "samples"):
            rows = check.get(key, [])
            if not isinstance(rows, list):
                return f"checks[{i}].{key} is a JSON {_json_type(rows)}, expected an array"
            for j, row in enumerate(rows):
                if (problem := _missing(row, key, f"checks[{i}].{key}[{j}]")) is not None:
                    return problem
    for i, finding in enumerate(data.get("diagnosis", [])):
        if (problem := _missing(finding, "diagnosis", f"diagnosis[{i}]")) is not None:
            return problem
    return None


_NUMBER_STATS = ("positions", "samples", "mean_k3", "p50", "p99", "p999", "max", "kl_p50", "kl_p99", "kl_max")


def _stats_problem(stats: object, where: str) -> str | None:
    """The report formats these keys as numbers: anything else (a string, an object, 10**400) is damage."""
    if not isinstance(stats, dict):
        return f"{where} is a JSON {_json_type(stats)}, expected an object"
    for key in _NUMBER_STATS:
        if key in stats and not _is_number(stats[key]):
            return f"{where}.{key} is a JSON {_json_type(stats[key])}, expected a number or null"
    frac = stats.get("frac_over", {})
    if not isinstance(frac, dict) or not all(_is_number(v) for v in frac.values()):
        return f"{where}.frac_over is not an object of numbers"
    return None


def _is_number(value: object) -> bool:
    if value is None or (isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity")):
        return True
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) < 2**63
    return isinstance(value, float)


def read_records(directory: str | Path) -> dict[str, PositionRecord]:
    """Every ``<check>.npz`` in a result directory, by check name (sizes capped: ``precisionbot.untrusted``)."""
    out: dict[str, PositionRecord] = {}
    for path in sorted(Path(directory).glob("*.npz")):
        out[path.stem] = PositionRecord.from_arrays(read_arrays(path))
    return out
