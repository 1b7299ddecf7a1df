"""The ``layers`` check: hidden-state dumps of the candidate against baseline dumps (SGLang's nightly comparator).

Per tensor name ``rel_diff = 1 − 2Σxy / Σ(x² + y²)`` in float64, pass iff ``<= 1e-3``. Tensors are ordered by
the layer number in their name, so the report can say where the divergence starts: the last layer whose input
still matches and the first whose input differs bracket the layer that broke. **Zero tensors compared is a
FAIL** (a baseline/target name mismatch), checked before anything else — never an empty pass.

``compare_dumps`` is pure; ``load_dump_dir`` reads ``.npy``, ``.npz`` and (with torch installed) ``.pt`` files.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionbot.checks.context import CheckContext
from precisionbot.errors import DataError
from precisionbot.metrics import rel_diff
from precisionbot.results import CheckOutput, CheckResult, Verdict

REL_DIFF_THRESHOLD = 1e-3
"""SGLang's ``SGLANG_PRECISION_DIFF_THRESHOLD`` default."""

_NUMBER = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[Any, ...]:
    """``layer_10`` after ``layer_9``: digits compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in _NUMBER.split(name))


@dataclass(frozen=True)
class LayerRow:
    name: str
    rel_diff: float | None
    """None when the shapes differ (then the row fails)."""
    shape_ref: tuple[int, ...]
    shape_test: tuple[int, ...]
    passed: bool


def compare_dumps(
    reference: Mapping[str, npt.NDArray[Any]],
    candidate: Mapping[str, npt.NDArray[Any]],
    threshold: float = REL_DIFF_THRESHOLD,
) -> CheckResult:
    """Compare two dumps by tensor name; see the module docstring for the rules."""
    common = sorted(set(reference) & set(candidate), key=natural_key)
    if not common:
        ref_names = ", ".join(sorted(reference, key=natural_key)[:3]) or "none"
        test_names = ", ".join(sorted(candidate, key=natural_key)[:3]) or "none"
        return CheckResult(
            name="layers",
            verdict=Verdict.FAIL,
            reasons=(
                f"0 layers compared: no tensor name is in both dumps (baseline: {ref_names}; candidate: "
                f"{test_names}); a baseline/target name mismatch, not a pass",
            ),
            stats={"positions": 0, "layers_compared": 0},
        )
    rows = []
    for name in common:
        a, b = np.asarray(reference[name]), np.asarray(candidate[name])
        if a.shape != b.shape:
            rows.append(LayerRow(name, None, a.shape, b.shape, False))
            continue
        value = rel_diff(a, b)
        rows.append(LayerRow(name, value, a.shape, b.shape, bool(np.isfinite(value) and value <= threshold)))
    failed = [r for r in rows if not r.passed]
    diffs = [r.rel_diff for r in rows if r.rel_diff is not None and np.isfinite(r.rel_diff)]
    reasons: list[str] = []
    if failed:
        first = failed[0]
        index = rows.index(first)
        what = (
            f"shape {first.shape_test} vs baseline {first.shape_ref}"
            if first.rel_diff is None
            else f"rel_diff {first.rel_diff:.3g} > {threshold:g}"
        )
        before = f"; {rows[index - 1].name} still matches" if index > 0 else "; it is the first tensor compared"
        reasons.append(f"{len(failed)} of {len(rows)} tensors differ; first: {first.name} ({what}){before}")
    only_ref = sorted(set(reference) - set(candidate), key=natural_key)
    if only_ref:
        reasons.append(f"{len(only_ref)} baseline tensors have no candidate counterpart (first: {only_ref[0]})")
    return CheckResult(
        name="layers",
        verdict=Verdict.FAIL if failed else Verdict.PASS,
        reasons=tuple(reasons),
        stats={
            "positions": len(rows),
            "layers_compared": len(rows),
            "max": max(diffs) if diffs else None,
            "first_divergent": failed[0].name if failed else None,
        },
        extra={
            "layers": [
                {"name": r.name, "rel_diff": r.rel_diff, "passed": r.passed, "shape": list(r.shape_test)} for r in rows
            ]
        },
    )


def load_dump_dir(directory: str | Path) -> dict[str, npt.NDArray[np.float64]]:
    """Every tensor in a dump directory by name (file stem; ``stem/key`` for archives with several arrays)."""
    root = Path(directory)
    if not root.is_dir():
        raise DataError(f"layer dump directory {root} does not exist; pass the directory the dumper wrote")
    out: dict[str, npt.NDArray[np.float64]] = {}
    for path in sorted(root.iterdir()):
        try:
            if path.suffix == ".npy":
                out[path.stem] = np.load(path, allow_pickle=False).astype(np.float64)
            elif path.suffix == ".npz":
                with np.load(path, allow_pickle=False) as data:
                    for key in data.files:
                        out[path.stem if len(data.files) == 1 else f"{path.stem}/{key}"] = data[key].astype(np.float64)
            elif path.suffix == ".pt":
                out.update(_load_pt(path))
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise DataError(f"{path} is not a readable tensor file: {exc}") from exc
    return out


def _load_pt(path: Path) -> dict[str, npt.NDArray[np.float64]]:
    try:
        import torch
    except ImportError:
        raise DataError(f"{path} is a torch file: install precisionbot[engine] (torch) to read it") from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a bad file (pickle, zip, runtime)
        raise DataError(f"{path} is not a readable torch tensor file: {exc}") from exc
    items = obj.items() if isinstance(obj, dict) else [("", obj)]
    out = {}
    for key, value in items:
        if isinstance(value, torch.Tensor):
            name = path.stem if not key else f"{path.stem}/{key}"
            out[name] = value.detach().to(torch.float64).numpy()
    return out


def check_layers(ctx: CheckContext) -> CheckOutput:
    """The registry entry: compares ``suite.layers.dump_dir`` with ``suite.layers.baseline_dir``."""
    opts = ctx.suite.layers
    if not opts.dump_dir or not opts.baseline_dir:
        return CheckOutput(
            CheckResult.inconclusive(
                "layers",
                "no hidden-state dumps to compare: set the suite's layers.dump_dir and layers.baseline_dir "
                "(or pass --layers-dump DIR --layers-baseline DIR)",
            )
        )
    ctx.progress.phase("layers")
    result = compare_dumps(
        load_dump_dir(opts.baseline_dir), load_dump_dir(opts.dump_dir), ctx.thresholds.layers_rel_diff
    )
    return CheckOutput(result)
