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
import re
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

MIG_KEY = "gpu_mig"
"""The MIG slice the run's GPU was (``3g.71gb``; several joined with ``+``). Written only on a MIG slice, so a
whole-GPU fingerprint keeps exactly :data:`FINGERPRINT_KEYS`; compared with absent read as "no slice": a
baseline from a whole H200 and a run on a 3g.71gb slice of one differ, though ``nvidia-smi`` names both GPUs
"NVIDIA H200"."""

_GPU_LINE = re.compile(r"^GPU (?P<index>\d+): .*\(UUID: (?P<uuid>GPU-[0-9A-Fa-f-]+)\)\s*$")
_MIG_LINE = re.compile(
    r"^\s+MIG (?P<profile>\d+g\.\d+gb(?:\+\w+)*)\s+Device\s+\d+: \(UUID: (?P<uuid>MIG-[^)\s]+)\)\s*$"
)


def mig_profile(listing: str, visible_devices: str | None) -> str | None:
    """The MIG profile(s) a process uses, from ``nvidia-smi -L`` and ``CUDA_VISIBLE_DEVICES``; None on whole GPUs.

    ``nvidia-smi -L`` on a MIG-enabled H200 prints ``GPU 0: NVIDIA H200 (UUID: GPU-...)`` and under it one
    ``  MIG 3g.71gb     Device  0: (UUID: MIG-...)`` line per slice. ``CUDA_VISIBLE_DEVICES`` naming
    ``MIG-<uuid>`` entries picks those slices; ``MIG-GPU-<uuid>/<gi>/<ci>`` (the older spelling) or a GPU's
    ``GPU-<uuid>`` or index picks that GPU's slices; unset, or naming none of the listed devices, every slice
    listed counts (a container given one slice lists only it). Profiles sorted, joined with ``+``."""
    gpus: dict[str, list[tuple[str, str]]] = {}
    index_of: dict[str, str] = {}
    current: str | None = None
    for line in listing.splitlines():
        gpu = _GPU_LINE.match(line)
        if gpu:
            current = gpu["uuid"]
            gpus[current] = []
            index_of[gpu["index"]] = current
            continue
        mig = _MIG_LINE.match(line)
        if mig and current is not None:
            gpus[current].append((mig["profile"], mig["uuid"]))
    slices = [s for found in gpus.values() for s in found]
    if not slices:
        return None
    wanted = [t.strip() for t in (visible_devices or "").split(",") if t.strip()]
    chosen = [profile for profile, uuid in slices if uuid in wanted]
    for token in wanted:
        gpu_uuid = token[4:].split("/", 1)[0] if token.startswith("MIG-GPU-") else index_of.get(token, token)
        chosen += [profile for profile, _ in gpus.get(gpu_uuid, [])]
    return "+".join(sorted(chosen or [profile for profile, _ in slices]))


def packages_digest(distributions: Iterable[str]) -> str:
    """sha256 (16 hex digits) over ``name==version`` lines, sorted and lower-cased: the same for the same
    ``pip freeze`` whatever order the environment lists them in."""
    lines = sorted({d.strip().lower() for d in distributions if d.strip()})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def build_fingerprint(**parts: Any) -> dict[str, Any]:
    """A fingerprint object (JSON-native, every key present) from the named parts; ``gpu_mig`` only when set."""
    unknown = set(parts) - set(FINGERPRINT_KEYS) - {MIG_KEY}
    if unknown:
        raise ValueError(f"unknown fingerprint parts: {sorted(unknown)}")
    out = {k: _native(parts.get(k)) for k in FINGERPRINT_KEYS}
    if parts.get(MIG_KEY) is not None:
        out[MIG_KEY] = _native(parts[MIG_KEY])
    return out


def fingerprint_diff(baseline: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """One phrase per part that differs, ``"driver: baseline 550.54, now 560.28"``. A part either side has no
    key for (a baseline recorded before fingerprints) is not a difference: nothing is known about it; a part
    recorded as unknown (``None``, no ``nvidia-smi`` there) against a known one is. ``gpu_mig`` absent reads
    as no MIG slice (it is written only on one), when both sides are fingerprints at all."""
    out = []
    for key in (*FINGERPRINT_KEYS[:2], MIG_KEY, *FINGERPRINT_KEYS[2:]):
        if key == MIG_KEY:
            if not (set(FINGERPRINT_KEYS) & set(baseline) and set(FINGERPRINT_KEYS) & set(now)):
                continue
            was, cur = _native(baseline.get(key)), _native(now.get(key))
            if was != cur:
                out.append(f"{key}: baseline {was or '(whole GPU)'}, now {cur or '(whole GPU)'}")
            continue
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
