"""The baseline signature: a hash of everything that must match for a comparison to mean anything.

Model and revision, tp, dtype/quantisation, GPU name, driver, CUDA, torch, the engine's launch arguments
without ports/hosts, the corpus hash and the check parameters. Not the engine commit: that is what changes
between a baseline and a candidate. Pure: the caller gathers the parts (``precisionbot.baselines.host``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SIGNATURE_KEYS = (
    "model",
    "revision",
    "tp",
    "dtype",
    "quantization",
    "gpu",
    "driver",
    "cuda",
    "torch",
    "engine_args",
    "corpus",
    "check_params",
)
"""The parts, in display order. Missing parts are ``None`` (hashed as such)."""

DETAILS_KEY = "details"
"""``signature_parts``' key for the readable inputs of the hashed parts: ``{"corpus": [document names],
"check_params": {...}}``. Not hashed; runs recorded before it have none (their mismatch shows the digests)."""

PARAM_WORDS = {
    "top_k": "golden top-k",
    "context_depths": "golden depths",
    "decode_steps": "golden decode steps",
    "docs_per_kind": "golden documents per kind",
    "format": "golden plan format",
}
"""What golden's ``check_params`` are called in a mismatch."""

# Flags whose value changes between otherwise identical launches and says nothing about the numbers
# (matched by whole words so that ``--logits-processor-chunk-size`` stays in).
_VOLATILE_WORDS = frozenset({"port", "host", "addr", "address", "url", "timeout"})
_FLAG = re.compile(r"^--?[A-Za-z][\w-]*$")


def _volatile(flag: str) -> bool:
    if not _FLAG.match(flag):
        return False
    words = flag.lstrip("-").replace("_", "-").split("-")
    return words[0] == "log" or bool(_VOLATILE_WORDS.intersection(words))


@dataclass(frozen=True)
class Signature:
    parts: Mapping[str, Any]
    """``SIGNATURE_KEYS`` → JSON-native values (strings, numbers, lists, ``None``)."""

    @property
    def digest(self) -> str:
        """First 16 hex digits of sha256 over the canonical JSON of the parts."""
        canonical = json.dumps({k: self.parts.get(k) for k in SIGNATURE_KEYS}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @classmethod
    def build(cls, **parts: Any) -> Signature:
        """``details=``: what a hashed part (``corpus``, ``check_params``) was made of, readable, kept next to
        the digests under :data:`DETAILS_KEY` (not hashed) so that a mismatch can say what differs in words."""
        details = parts.pop(DETAILS_KEY, None)
        unknown = set(parts) - set(SIGNATURE_KEYS)
        if unknown:
            raise ValueError(f"unknown signature parts: {sorted(unknown)}")
        out = {k: _json_native(parts.get(k)) for k in SIGNATURE_KEYS}
        if details:
            out[DETAILS_KEY] = _json_native(dict(details))
        return cls(out)


def normalize_engine_args(args: str | Iterable[str] | None) -> list[str]:
    """Launch arguments without ports, hosts, addresses and log options (``--port 1``, ``--host=0.0.0.0``)."""
    if args is None:
        return []
    tokens = shlex.split(args) if isinstance(args, str) else list(args)
    out: list[str] = []
    skip_value = False
    for tok in tokens:
        if skip_value:
            skip_value = False
            if not tok.startswith("-"):
                continue
        flag, eq, _value = tok.partition("=")
        if _volatile(flag):
            skip_value = not eq
            continue
        out.append(tok)
    return out


def hash_params(params: Mapping[str, Any]) -> str:
    """A short stable hash of a parameter mapping (corpus descriptions, check parameters)."""
    canonical = json.dumps(_json_native(dict(params)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def describe_mismatch(expected: Mapping[str, Any], found: Mapping[str, Any]) -> list[str]:
    """One phrase per differing part, ``"tp: baseline 2, now 1"``; mappings name only their differing keys
    (``"engine_args.page_size: baseline 16, now 32"``)."""
    out = []
    for key in SIGNATURE_KEYS:
        now, was = _json_native(expected.get(key)), _json_native(found.get(key))
        if now == was:
            continue
        words = _in_words(key, expected.get(DETAILS_KEY), found.get(DETAILS_KEY))
        if words:
            out.extend(words)
        elif isinstance(now, dict) and isinstance(was, dict):
            for sub in sorted(set(now) | set(was)):
                if now.get(sub) != was.get(sub):
                    out.append(f"{key}.{sub}: baseline {_show(was.get(sub))}, now {_show(now.get(sub))}")
        else:
            out.append(f"{key}: baseline {_show(was)}, now {_show(now)}")
    return out


def _in_words(key: str, now_details: Any, was_details: Any) -> list[str]:
    """A hashed part's difference from both sides' details (``golden depths differ: [512] vs [512, 2048]``);
    empty when either side has none (a run recorded before details were kept: the digests are shown)."""
    if not isinstance(now_details, Mapping) or not isinstance(was_details, Mapping):
        return []
    now, was = _json_native(now_details.get(key)), _json_native(was_details.get(key))
    if now is None or was is None:
        return []
    if isinstance(now, dict) and isinstance(was, dict):
        return [
            f"{PARAM_WORDS.get(sub, f'{key}.{sub}')} differ: {_detail(was.get(sub))} (baseline) vs "
            f"{_detail(now.get(sub))} (now)"
            for sub in sorted(set(now) | set(was))
            if now.get(sub) != was.get(sub)
        ] or [f"{key}: same settings, another digest (a format change)"]
    if now == was:
        return [f"{key}: same documents {_detail(now)}, other text or tokens (an edited corpus)"]
    return [f"{key} documents differ: {_detail(was)} (baseline) vs {_detail(now)} (now)"]


def _detail(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return _show(value)


def _show(value: Any) -> str:
    if isinstance(value, list):
        return shlex.join(str(v) for v in value) or "(none)"
    return "(unknown)" if value is None else str(value)


def _json_native(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_native(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_json_native(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
