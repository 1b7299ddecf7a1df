"""Reading a dump folder written by SGLang's dumper (or the builtin engine's, which writes the same files).

A file is ``step=S___rank=R___dump_index=I___name=N___...___layer_id=L.pt`` holding
``{"value": tensor, "meta": {...}}``. Module tensors are named ``non_intrusive__<module>.inputs.<i>`` /
``.output``; the forward batch's ``positions`` and ``input_ids`` give each row's place in its sequence,
``seq_lens`` each request's length after the forward.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from precisionbot.localize.core import Capture, LocalizationError, StepDump, split_name

NAME_PREFIX = "non_intrusive__"


def parse_filename(name: str) -> dict[str, str]:
    """The ``key=value`` tags of a dump file name (``.pt`` dropped)."""
    stem = name[:-3] if name.endswith(".pt") else name
    tags = {}
    for part in stem.split("___"):
        key, sep, value = part.partition("=")
        if sep:
            tags[key] = value
    return tags


def _load(path: Path) -> Any:
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: say which
        raise LocalizationError(f"cannot read dump file {path}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, dict) or "value" not in data:
        raise LocalizationError(f"{path} is not a dumper file (no 'value' key); is {path.parent} a dump folder?")
    return data["value"]


def read_capture(folder: Path, label: str) -> Capture:
    """Every forward dumped in ``folder`` (one experiment), in step order; rank 0 only."""
    files: dict[int, list[tuple[int, str, Path]]] = defaultdict(list)
    if folder.is_dir():
        for path in folder.iterdir():
            tags = parse_filename(path.name)
            if path.suffix != ".pt" or "name" not in tags or tags.get("rank", "0") != "0":
                continue
            try:
                step, index = int(tags["step"]), int(tags["dump_index"])
            except (KeyError, ValueError):
                continue
            files[step].append((index, tags["name"], path))
    steps = []
    for step in sorted(files):
        positions: tuple[int, ...] | None = None
        input_ids: tuple[int, ...] = ()
        seq_lens: tuple[int, ...] = ()
        tensors: dict[str, torch.Tensor] = {}
        order: dict[str, int] = {}
        for index, name, path in sorted(files[step]):
            if name == "positions":
                positions = tuple(int(v) for v in _load(path).reshape(-1).tolist())
            elif name == "input_ids":
                input_ids = tuple(int(v) for v in _load(path).reshape(-1).tolist())
            elif name == "seq_lens":
                value = _load(path)
                if isinstance(value, torch.Tensor):
                    seq_lens = tuple(int(v) for v in value.reshape(-1).tolist())
            elif name.startswith(NAME_PREFIX):
                short = name[len(NAME_PREFIX) :]
                try:
                    split_name(short)
                except ValueError:
                    continue  # not a module's inputs.<i> or output: nothing to line up
                value = _load(path)
                if isinstance(value, torch.Tensor):
                    tensors[short], order[short] = value, index
        if positions is not None:
            steps.append(StepDump(step, positions, input_ids, tensors, order, seq_lens))
    return Capture(label, tuple(steps))


def dump_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (what a capture cost on disk)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0
