"""Records in the JSONL format of SGLang's comparator (``python -m sglang.srt.debug_utils.comparator
--output-format json``), so that its tooling reads a localization's report: one ``comparison_tensor`` per
tensor, a ``log`` record with the finding, a ``summary``. Pure: tensors in, JSON-ready dicts out.

The fields are the comparator's: ``baseline``/``target`` ``{shape, dtype, stats{mean, abs_mean, std, min, max,
percentiles}}``, ``diff{rel_diff, max_abs_diff, mean_abs_diff, max_diff_coord, baseline_at_max,
target_at_max, predicate, passed}``. Our tensors are a module's rows at the aligned positions, stacked (the
comparator's own records compare one step's tensor; ``location.step`` is then left out).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from precisionbot.localize.core import PASS_REL_DIFF, tensor_diff

PREDICATE = f"rel <= {PASS_REL_DIFF:g}"


def _stats(t: torch.Tensor) -> dict[str, Any]:
    x = t.float()
    if x.numel() == 0:
        return {"mean": 0.0, "abs_mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "percentiles": {}}
    std = float(torch.std(x)) if x.numel() > 1 else 0.0
    return {
        "mean": float(x.mean()),
        "abs_mean": float(x.abs().mean()),
        "std": std,
        "min": float(x.min()),
        "max": float(x.max()),
        "percentiles": {},
    }


def _info(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype), "stats": _stats(t)}


def tensor_record(name: str, baseline: torch.Tensor, target: torch.Tensor, step: int | None = None) -> dict[str, Any]:
    """A ``comparison_tensor`` record for ``name``."""
    mismatch = tuple(baseline.shape) != tuple(target.shape)
    record: dict[str, Any] = {
        "type": "comparison_tensor",
        "name": name,
        "baseline": _info(baseline),
        "target": _info(target),
        "unified_shape": list(baseline.shape),
        "shape_mismatch": mismatch,
        "diff": None,
        "location": {"step": step},
    }
    if not mismatch:
        d = tensor_diff(baseline, target)
        record["diff"] = {
            "rel_diff": d.rel_diff,
            "max_abs_diff": d.max_abs_diff,
            "mean_abs_diff": d.mean_abs_diff,
            "max_diff_coord": list(d.max_diff_coord),
            "baseline_at_max": d.baseline_at_max,
            "target_at_max": d.target_at_max,
            "predicate": PREDICATE,
            "passed": d.passed,
        }
    return record


def passed(record: dict[str, Any]) -> bool:
    """The comparator's category for a tensor record: passed only with a diff that passes."""
    diff = record.get("diff")
    return bool(diff and diff.get("passed"))


def log_record(message: str, category: str = "localization") -> dict[str, Any]:
    return {"type": "log", "errors": [], "infos": [{"category": category, "message": message, "kind": "info"}]}


def summary_record(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    tensors = [r for r in records if r.get("type") == "comparison_tensor"]
    ok = sum(1 for r in tensors if passed(r))
    return {"type": "summary", "total": len(tensors), "passed": ok, "failed": len(tensors) - ok, "skipped": 0}


def render(records: Iterable[dict[str, Any]]) -> str:
    """JSONL text: one record per line."""
    return "".join(json.dumps(r, allow_nan=True) + "\n" for r in records)
