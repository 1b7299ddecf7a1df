"""Typed, validated reads from a parsed YAML mapping, for ``precisionbot.config`` (pure).

Every error is a ``ConfigError`` of the form ``<file>: key '<dotted.key>' <problem>; <fix>``.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from precisionbot.errors import ConfigError

V = TypeVar("V")


def freeze_mapping(data: Mapping[str, V]) -> Mapping[str, V]:
    """A read-only view, so frozen dataclasses stay frozen all the way down."""
    return MappingProxyType(dict(data))


MAX_INT = 2**53
"""Integers beyond this are refused (no setting needs them; JSON and YAML tools disagree past it)."""
MAX_NUMBER = 1e15
"""Numbers beyond this (in magnitude) are refused: a timeout of 1e300 s overflows at run time."""


def _show(value: Any) -> str:
    """A short description of a config value, in bounded time: a YAML alias bomb ("billion laughs") expands to
    shared containers whose ``repr`` would be gigabytes, and ``repr`` of a 5,000-digit int raises."""
    if isinstance(value, Mapping):
        return f"a mapping of {len(value)} key(s)"
    if isinstance(value, (list, tuple, set)):
        return f"a list of {len(value)} item(s)"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_INT:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, str) and len(value) > 60:
        value = value[:60]
    if not isinstance(value, (str, int, float, bool, type(None))):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Reader:
    """One mapping of the config at a dotted ``prefix``; ``present`` is False when the key was absent."""

    def __init__(self, data: Any, source: str, prefix: str, present: bool = True) -> None:
        self.source = source
        self.prefix = prefix
        self.present = present and data is not None
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            where = f"key '{prefix}'" if prefix else "the top level"
            raise ConfigError(
                f"{source}: {where} must be a mapping (got {type(data).__name__} {_show(data)}); "
                "write it as 'key: value' lines"
            )
        for key in data:
            if not isinstance(key, str):
                raise ConfigError(f"{source}: key {_show(key)} under '{prefix or '<top>'}' is not a string; quote it")
        self.data: Mapping[str, Any] = data

    def path(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, problem: str, fix: str) -> ConfigError:
        return ConfigError(f"{self.source}: key '{self.path(key)}' {problem}; {fix}")

    def names(self) -> list[str]:
        return list(self.data)

    def only(self, allowed: Iterable[str]) -> Reader:
        valid = sorted(allowed)
        for key in self.data:
            if key not in valid:
                close = difflib.get_close_matches(key, valid, n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"valid keys here: {', '.join(valid)}"
                raise ConfigError(f"{self.source}: unknown key '{self.path(key)}'; {hint}")
        return self

    def section(self, key: str) -> Reader:
        return Reader(self.data.get(key), self.source, self.path(key), present=key in self.data)

    def list_of_sections(self, key: str) -> list[Reader]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"must be a list (got {type(value).__name__})", "write one '- name: ...' per item")
        return [Reader(item, self.source, f"{self.path(key)}[{i}]") for i, item in enumerate(value)]

    # --- scalars ---

    def _get(self, key: str, default: Any) -> Any:
        value = self.data.get(key, default)
        return default if value is None and key in self.data and default is not None else value

    def string(self, key: str, default: str) -> str:
        value = self._get(key, default)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # YAML reads `revision: 1234` or `dtype: 16` as numbers
        if not isinstance(value, str):
            raise self.error(key, f"must be a string (got {_show(value)})", "quote the value")
        if "\0" in value:
            raise self.error(key, "contains a NUL character", "remove it")
        return value

    def opt_string(self, key: str, default: str | None) -> str | None:
        if self.data.get(key, default) is None:
            return None
        value = self.string(key, default or "")
        return value or None

    def required_string(self, key: str) -> str:
        if key not in self.data or self.data[key] in (None, ""):
            raise self.error(key, "is required", f"add '{key}: ...' to this entry")
        return self.string(key, "")

    def choice(self, key: str, default: str, choices: Iterable[str]) -> str:
        options = tuple(choices)
        value = self.string(key, default)
        if value not in options:
            raise self.error(
                key,
                f"must be one of {', '.join(options)} (got {_show(value)})",
                did_you_mean(value, options) or f"set it to one of {', '.join(options)}",
            )
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false (got {_show(value)})", "write true or false")
        return value

    def integer(self, key: str, default: int) -> int:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"must be an integer (got {_show(value)})", "write a whole number")
        if abs(value) >= MAX_INT:
            raise self.error(key, f"is out of range (got {_show(value)})", f"use a number below {MAX_INT:.0e}")
        return value

    def positive_int(self, key: str, default: int) -> int:
        value = self.integer(key, default)
        if value <= 0:
            raise self.error(key, f"must be a positive integer (got {value})", "use a number >= 1")
        return value

    def nonneg_int(self, key: str, default: int) -> int:
        value = self.integer(key, default)
        if value < 0:
            raise self.error(key, f"must be >= 0 (got {value})", "use 0 or a positive number")
        return value

    def number(self, key: str, default: float) -> float:
        value = self._get(key, default)
        # PyYAML reads `1e-9` (no dot) as a string: accept numeric strings, since thresholds are written so.
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(key, f"must be a finite number (got {_show(value)})", "write e.g. 0.0025 or 1.0e-9")
        if abs(value) > MAX_NUMBER:
            raise self.error(key, f"is out of range (got {_show(value)})", f"use a number below {MAX_NUMBER:.0e}")
        return float(value)

    def positive_float(self, key: str, default: float, maximum: float | None = None) -> float:
        value = self.number(key, default)
        if value <= 0:
            raise self.error(key, f"must be > 0 (got {value})", "use a positive number")
        if maximum is not None and value > maximum:
            raise self.error(key, f"must be at most {maximum:g} (got {value:g})", f"use a number up to {maximum:g}")
        return value

    def nonneg_float(self, key: str, default: float) -> float:
        value = self.number(key, default)
        if value < 0:
            raise self.error(key, f"must be >= 0 (got {value})", "use 0 or a positive number")
        return value

    def opt_positive_float(self, key: str, default: float | None) -> float | None:
        if key in self.data and self.data[key] is None:
            return None
        if default is None and key not in self.data:
            return None
        return self.positive_float(key, default if default is not None else 0.0)

    def fraction(self, key: str, default: float) -> float:
        value = self.number(key, default)
        if not 0.0 <= value <= 1.0:
            raise self.error(key, f"must be a fraction between 0 and 1 (got {value})", "e.g. 0.02 for 2 %")
        return value

    # --- lists ---

    def strings(self, key: str, default: tuple[str, ...], *, single: bool = True) -> tuple[str, ...]:
        """A list of strings; with ``single``, one string is read as a list of one (``labels: gpu``). Without
        it a string is an error: ``paths: "csrc/**"`` reads as a list to YAML's eye but is easy to mistake
        for a comma-separated or space-separated list, so such keys must be written as lists."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, str) and not single:
            raise self.error(key, f"must be a list of strings (got the string {_show(value)})", f"write [{value}]")
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(key, f"must be a list of strings (got {_show(value)})", "write [a, b] or '- a' lines")
        return tuple(value)

    def positive_ints(self, key: str, default: tuple[int, ...]) -> tuple[int, ...]:
        value = self.data.get(key)
        if value is None:
            return default
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
        ):
            raise self.error(
                key,
                f"must be a non-empty list of positive integers (got {_show(value)})",
                "write e.g. [512, 2048]",
            )
        return tuple(value)

    def int_range(self, key: str, default: tuple[int, int]) -> tuple[int, int]:
        """``N``, ``[lo, hi]``, ``"lo..hi"`` or ``{min, max}``: an inclusive range of positive integers."""
        value = self.data.get(key)
        if value is None:
            return default
        try:
            return parse_int_range(value)
        except ValueError as exc:
            raise self.error(key, f"{exc} (got {_show(value)})", "write N, [lo, hi] or 'lo..hi'") from exc


def did_you_mean(value: str, options: Iterable[str]) -> str | None:
    """``did you mean 'golden'?`` for a near miss among ``options``; None when nothing is close."""
    close = difflib.get_close_matches(value, list(options), n=1)
    return f"did you mean {close[0]!r}?" if close else None


STORE_SCHEMES = ("s3://", "file://")


def store_uri_problem(uri: str) -> tuple[str, str] | None:
    """What is wrong with a baseline store URI (``s3://bucket/prefix``, ``file:///dir`` or a directory path) and
    the fix; None when it is usable. ``s3:/bucket`` (one slash) or ``s3:bucket`` would otherwise be a relative
    directory named ``s3:`` that silently fills up on the runner's disk while CI reads an empty bucket."""
    text = uri.strip()
    usable = "write s3://bucket/prefix, file:///dir or a directory path"
    if not text:
        return "is empty", usable
    if text.startswith(STORE_SCHEMES):
        if text.startswith("s3://") and not text[5:].split("/", 1)[0]:
            return f"{_show(uri)} names no bucket", "write s3://bucket/prefix"
        return None
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):(/*)(.*)", text)
    if match is None:
        return None
    scheme, slashes, rest = match.groups()
    if scheme.lower() in ("s3", "file"):
        fixed = f"{scheme.lower()}://{'/' if scheme.lower() == 'file' and slashes else ''}{rest}"
        return f"{_show(uri)} is not a URI ({scheme}: takes two slashes)", f"did you mean {fixed!r}?"
    if slashes.startswith("//"):
        return f"{_show(uri)} is an unsupported baseline store URI (scheme {scheme}://)", usable
    return None


def parse_int_range(value: Any) -> tuple[int, int]:
    """Parse ``N`` / ``"N"`` / ``"lo..hi"`` / ``[lo, hi]`` / ``{min: lo, max: hi}`` into ``(lo, hi)``."""
    lo: Any
    hi: Any
    if isinstance(value, Mapping) and set(value) == {"min", "max"}:
        lo, hi = value["min"], value["max"]
    elif isinstance(value, list) and len(value) == 2:
        lo, hi = value
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*(\.\.|-)\s*\d+\s*", value):
        lo, hi = (int(p) for p in re.split(r"\.\.|-", value))
    elif isinstance(value, str) and value.strip().isdigit():
        lo = hi = int(value)
    else:
        lo = hi = value
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (lo, hi)):
        raise ValueError("must be a positive integer or a range of them")
    if lo <= 0 or hi < lo:
        raise ValueError("must be a positive range with lo <= hi")
    return int(lo), int(hi)
