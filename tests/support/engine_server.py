"""Start the builtin engine in-process for tests: ``with running_engine(faults=("attn-p-fp8",)) as url: ...``.

The server binds 127.0.0.1 on a free port, is healthy when the context is entered and stopped on exit.
Faults may be given as ``Fault`` objects or as ``"NAME[=VALUE]"`` strings.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from precisionbot.builtin import BuiltinServer, EngineOptions, Fault, parse_fault


def engine_options(**overrides: Any) -> EngineOptions:
    """``EngineOptions`` with overrides; ``faults`` may hold strings.

    Unlike ``EngineOptions()`` (the hybrid preset, the product's default), tests get the ``tiny`` preset unless
    they ask for ``preset="hybrid"``: two dense layers are several times faster, and most tests exercise the
    HTTP API, the scheduler or a check, not the hybrid layers.
    """
    overrides.setdefault("preset", "tiny")
    faults = overrides.pop("faults", ())
    if isinstance(faults, str):
        faults = (faults,)
    overrides["faults"] = tuple(f if isinstance(f, Fault) else parse_fault(f) for f in faults)
    return EngineOptions(**overrides)


@contextmanager
def running_engine(**overrides: Any) -> Iterator[str]:
    """Yields the base URL of a healthy builtin server with ``EngineOptions(**overrides)``."""
    with BuiltinServer(engine_options(**overrides)) as server:
        response = httpx.get(f"{server.url}/health", timeout=10)
        if response.status_code != 200:
            raise RuntimeError(f"builtin engine at {server.url} is not healthy: {response.status_code}")
        yield server.url
