"""The builtin reference engine: a small seeded transformer behind an SGLang-compatible HTTP server, with a
real paged KV pool, radix prefix cache, chunked prefill, batched decode and a catalogue of numeric faults.

``EngineOptions``, ``parse_fault`` and ``FAULT_NAMES`` import without torch (config validation and the CLI
use them on hosts without it); ``BuiltinServer`` imports torch on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from precisionbot.builtin.options import FAULT_NAMES, EngineOptions, Fault, parse_fault

if TYPE_CHECKING:
    from precisionbot.builtin.server import BuiltinServer

__all__ = ["FAULT_NAMES", "BuiltinServer", "EngineOptions", "Fault", "parse_fault"]


def __getattr__(name: str) -> Any:
    if name == "BuiltinServer":
        from precisionbot.builtin.server import BuiltinServer  # noqa: PLC0415 (torch only on first use)

        return BuiltinServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
