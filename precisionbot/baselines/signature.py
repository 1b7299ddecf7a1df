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
        unknown = set(parts) - set(SIGNATURE_KEYS)
        if unknown:
            raise ValueError(f"unknown signature parts: {sorted(unknown)}")
        return cls({k: _json_native(parts.get(k)) for k in SIGNATURE_KEYS})


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
        if isinstance(now, dict) and isinstance(was, dict):
            for sub in sorted(set(now) | set(was)):
                if now.get(sub) != was.get(sub):
                    out.append(f"{key}.{sub}: baseline {_show(was.get(sub))}, now {_show(now.get(sub))}")
        else:
            out.append(f"{key}: baseline {_show(was)}, now {_show(now)}")
    return out


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
