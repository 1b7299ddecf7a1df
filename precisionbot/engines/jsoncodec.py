"""JSON in and out of the engine clients, fast: orjson, with the standard library where orjson says no.

orjson refuses the ``NaN`` and ``Infinity`` that Python-based engines write (``json.dumps`` does by default);
the standard library reads them, so an answer carrying one reaches validation, which names the request and
the field, instead of failing as "invalid JSON". The fallback runs only when orjson has refused, so valid
answers pay nothing for it.
"""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from precisionbot.errors import EngineError


def encode(value: Any) -> bytes:
    """A request body (numpy scalars and arrays allowed); the standard library for what orjson cannot write."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def decode(content: bytes, what: str) -> Any:
    """Any JSON answer; ``EngineError`` naming ``what`` when it is not JSON at all."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(content)
    except RecursionError:
        raise EngineError(f"{what} answered JSON nested too deeply to be an engine answer") from None
    except ValueError as exc:
        raise EngineError(f"{what} answered invalid JSON ({content[:80]!r})") from exc


_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while an answer is decoded (nested and thread-safe; restored after).

    Decoded JSON holds no reference cycles, so nothing is lost; what is saved is the collector rescanning
    every object already decoded each time another few hundred containers have been created (measured: half
    the time of decoding a replay's answer).
    """
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()
