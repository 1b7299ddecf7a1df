"""Module tensors stored with a golden baseline, so that a golden failure in the job is localized without the
baseline build running: ``baseline record`` dumps the baseline build prefilling a few golden samples and keeps
their module rows at chosen positions (``modules.npz`` in the same run, under the same signature); the job dumps
the PR build prefilling the same tokens and localizes against them. Pure (arrays and captures in and out).

Which rows: the first ``HEAD`` positions (a kernel changed everywhere shows at once) and ``WIDTH`` positions
from every multiple of ``stride``. The default stride, 128, is a multiple of every usual page size (16, 32, 64)
and chunked-prefill size (512 to 8192), so the first positions of each page and chunk past a boundary are kept,
and a bug that fires only past a boundary is found there. Everything between is left out: localization needs
one row where an output first differs, not every row, and a full dump of a long sequence costs tens of MB even
on the builtin engine's small model.

Bit identity across two engine processes holds for one request prefilled alone from an empty cache with the
same chunking: both sides are captured that way (``session.capture_golden``'s shape).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from precisionbot.localize.core import Capture, LocalizationError, StepDump

MODULES_ARRAYS = "modules"
"""The arrays' name in the run record (``modules.npz`` beside ``golden.npz``)."""
FORMAT = 1
HEAD = 16
WIDTH = 4
DEFAULT_STRIDE = 128

_INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16}
_DTYPES = {str(d).removeprefix("torch."): d for d in (torch.bfloat16, torch.float16, torch.float32, torch.float64,
                                                     torch.int64, torch.int32)}  # fmt: skip


def kept_positions(length: int, stride: int = DEFAULT_STRIDE) -> tuple[int, ...]:
    """The positions of a ``length``-token sequence whose rows are stored.

    >>> kept_positions(300, 128)[-8:]
    (128, 129, 130, 131, 256, 257, 258, 259)
    """
    keep = set(range(min(HEAD, length)))
    for start in range(stride, length, stride):
        keep.update(range(start, min(start + WIDTH, length)))
    return tuple(sorted(keep))


def tokens_digest(tokens: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(tokens, dtype=np.int64).tobytes()).hexdigest()[:16]


@dataclass(frozen=True)
class StoredSample:
    sample: int
    """The golden sample's index in the baseline record."""
    tokens: int
    """How many of its tokens were prefilled."""
    digest: str
    """``tokens_digest`` of them."""
    positions: tuple[int, ...]


def _rows(capture: Capture, positions: Sequence[int]) -> StepDump:
    """One step holding ``capture``'s rows at ``positions`` (the capture's forwards may be several chunks)."""
    where = {}
    for s, step in enumerate(capture.steps):
        for r, pos in enumerate(step.positions):
            where[pos] = (s, r)
    missing = [p for p in positions if p not in where]
    if missing:
        raise LocalizationError(
            f"the baseline build's capture has no rows for {len(missing)} positions (first {missing[0]}): the dumper "
            "did not run for those forwards"
        )
    tensors: dict[str, torch.Tensor] = {}
    order: dict[str, int] = {}
    for step in capture.steps:
        for name, index in step.order.items():
            order.setdefault(name, index)
    for name in order:
        rows = []
        for pos in positions:
            s, r = where[pos]
            step = capture.steps[s]
            t = step.tensors.get(name)
            if t is None or t.dim() == 0 or t.shape[0] != len(step.positions):
                break  # not one row per position (a root writing only the last row): not comparable by row
            rows.append(t[r])
        else:
            tensors[name] = torch.stack(rows)
    input_ids = tuple(capture.steps[where[p][0]].input_ids[where[p][1]] for p in positions)
    return StepDump(0, tuple(positions), input_ids, tensors, {n: order[n] for n in tensors})


def encode(captures: Sequence[tuple[int, Sequence[int], Capture]], stride: int = DEFAULT_STRIDE
           ) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, Any]]:  # fmt: skip
    """``(sample index, tokens prefilled, capture)`` per stored sample -> the arrays and their manifest (the run
    meta's ``extra.modules``)."""
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    samples = []
    dtypes: dict[str, str] = {}
    order: dict[str, int] = {}
    for sample, tokens, capture in captures:
        step = _rows(capture, kept_positions(len(tokens), stride))
        prefix = f"s{sample}."
        arrays[prefix + "positions"] = np.asarray(step.positions, dtype=np.int32)
        arrays[prefix + "input_ids"] = np.asarray(step.input_ids, dtype=np.int64)
        for name, t in step.tensors.items():
            view = _INT_VIEW.get(t.dtype)
            arrays[prefix + name] = (t.contiguous().view(view) if view else t).cpu().numpy()
            dtypes[name] = str(t.dtype).removeprefix("torch.")
            order.setdefault(name, step.order[name])
        samples.append(
            {"sample": sample, "tokens": len(tokens), "digest": tokens_digest(tokens), "positions": len(step.positions)}
        )
    manifest = {"format": FORMAT, "stride": stride, "samples": samples, "dtypes": dtypes, "order": order}
    return arrays, manifest


def stored_samples(manifest: Any) -> list[StoredSample]:
    """The samples a manifest lists (``LocalizationError`` naming what is wrong with a foreign one)."""
    if not isinstance(manifest, Mapping) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, Mapping) else type(manifest).__name__
        raise LocalizationError(f"the stored module tensors have format {got!r}, not {FORMAT}: re-record the baseline")
    out = []
    stride = int(manifest.get("stride", DEFAULT_STRIDE))
    for s in manifest.get("samples") or []:
        n = int(s["tokens"])
        out.append(StoredSample(int(s["sample"]), n, str(s["digest"]), kept_positions(n, stride)))
    return out


def decode(arrays: Mapping[str, np.ndarray[Any, Any]], manifest: Mapping[str, Any], sample: StoredSample) -> Capture:
    """The stored capture of one sample, checked against its manifest (a refusal names what does not match)."""
    prefix = f"s{sample.sample}."
    try:
        positions = tuple(int(p) for p in arrays[prefix + "positions"].tolist())
        input_ids = tuple(int(t) for t in arrays[prefix + "input_ids"].tolist())
    except KeyError:
        raise LocalizationError(f"the stored module tensors have no rows for sample {sample.sample}") from None
    if positions != sample.positions:
        raise LocalizationError(
            f"the stored rows of sample {sample.sample} are at {len(positions)} positions, its manifest lists "
            f"{len(sample.positions)}: the tensor set is corrupt; re-record the baseline"
        )
    tensors: dict[str, torch.Tensor] = {}
    dtypes: Mapping[str, str] = manifest.get("dtypes") or {}
    for key, value in arrays.items():
        if not key.startswith(prefix) or key in (prefix + "positions", prefix + "input_ids"):
            continue
        name = key[len(prefix) :]
        dtype = _DTYPES.get(str(dtypes.get(name)))
        if dtype is None:
            raise LocalizationError(
                f"the stored tensor {name} has dtype {dtypes.get(name)!r}: the tensor set is corrupt; re-record it"
            )
        t = torch.from_numpy(np.ascontiguousarray(value))
        t = t.view(dtype) if dtype in _INT_VIEW else t.to(dtype)
        if t.shape[0] != len(positions):
            raise LocalizationError(f"the stored tensor {name} has {t.shape[0]} rows for {len(positions)} positions")
        tensors[name] = t
    order = {n: int(i) for n, i in (manifest.get("order") or {}).items() if n in tensors}
    return Capture("baseline build (stored)", (StepDump(0, positions, input_ids, tensors, order),), sparse=True)


def encoded_bytes(arrays: Mapping[str, np.ndarray[Any, Any]]) -> int:
    return sum(int(a.nbytes) for a in arrays.values())
