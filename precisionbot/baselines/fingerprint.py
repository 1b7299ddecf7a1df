"""The environment fingerprint: what the machine and its software were when a run or a baseline was made.

The signature (``signature.py``) decides *whether* two runs may be compared at all; the fingerprint records
the rest of the environment that can move the numbers without being the change under test: the GPU model and
count, driver, CUDA, torch and engine versions, a hash of the installed packages (what ``pip freeze`` lists),
the engine arguments and precisionbot's own version. A golden run that fails against a baseline made under
another fingerprint may be failing because the runner changed, not the PR; the comment then shows the
difference and suggests an A/B run on one runner (``baselines.mode: merge-base``). Pure: the caller gathers
the facts (``precisionbot.baselines.host.gather_fingerprint``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from precisionbot.baselines.signature import normalize_engine_args

FINGERPRINT_KEYS = (
    "gpu_model",
    "gpu_count",
    "driver",
    "cuda",
    "torch",
    "engine_version",
    "engine_args",
    "packages_sha256",
    "precisionbot",
)
"""The parts, in display order; a part nobody could tell is ``None``."""


def packages_digest(distributions: Iterable[str]) -> str:
    """sha256 (16 hex digits) over ``name==version`` lines, sorted and lower-cased: the same for the same
    ``pip freeze`` whatever order the environment lists them in."""
    lines = sorted({d.strip().lower() for d in distributions if d.strip()})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def build_fingerprint(**parts: Any) -> dict[str, Any]:
    """A fingerprint object (JSON-native, every key present) from the named parts."""
    unknown = set(parts) - set(FINGERPRINT_KEYS)
    if unknown:
        raise ValueError(f"unknown fingerprint parts: {sorted(unknown)}")
    return {k: _native(parts.get(k)) for k in FINGERPRINT_KEYS}


def fingerprint_diff(baseline: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """One phrase per part that differs, ``"driver: baseline 550.54, now 560.28"``. A part either side has no
    key for (a baseline recorded before fingerprints) is not a difference: nothing is known about it; a part
    recorded as unknown (``None``, no ``nvidia-smi`` there) against a known one is."""
    out = []
    for key in FINGERPRINT_KEYS:
        if key not in baseline or key not in now:
            continue
        was, cur = _native(baseline.get(key)), _native(now.get(key))
        if was == cur:
            continue
        out.append(f"{key}: baseline {_show(was)}, now {_show(cur)}")
    return out


def _show(value: Any) -> str:
    if value is None:
        return "(unknown)"
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "(none)"
    return str(value)


def _native(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_native(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def gpu_minutes(wall_s: float, gpu_count: int | None) -> float:
    """What a run cost: its wall time times the GPUs it held (at least one: a CPU run is costed as one)."""
    return max(0.0, wall_s) * max(1, gpu_count or 1) / 60.0


def engine_arg_list(args: str | Sequence[str] | None) -> list[str]:
    """The engine arguments as recorded (ports and hosts left out, as in the signature)."""
    return normalize_engine_args(args)
