"""Which client speaks to an engine of each kind: one table, ``CLIENTS``, from ``engine.kind`` to the class.

Every command that opens an engine at a URL (``check``, ``baseline record``, ``thresholds``, ``bisect``, the
merge-base A/B) reaches the client through :func:`client`, so a new engine kind is one row here and one name
in ``ENGINE_KINDS`` (the config's choices; tests/engines/test_clients.py keeps the two equal).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from precisionbot.engines.llamacpp import LlamaCppEngine
from precisionbot.engines.openai import OpenAIEngine
from precisionbot.engines.sglang import SGLangEngine
from precisionbot.engines.vllm import VLLMEngine

CLIENTS: Mapping[str, Callable[..., Any]] = {
    "sglang": SGLangEngine,
    # The builtin engine served over HTTP (``precisionbot serve``) speaks SGLang's API; the kind is what the
    # report names.
    "builtin": functools.partial(SGLangEngine, kind="builtin"),
    "vllm": VLLMEngine,
    "openai": OpenAIEngine,
    "llamacpp": LlamaCppEngine,
}
"""Engine kind → the client class (called as ``CLIENTS[kind](url, batch_size=..., concurrency=...,
request_timeout_s=...)``)."""


def client(kind: str, url: str, **options: Any) -> Any:
    """A client of the engine of ``kind`` at ``url``; ``options`` are the ``engine:`` client settings."""
    try:
        make = CLIENTS[kind]
    except KeyError:
        raise ValueError(f"unknown engine kind {kind!r}; one of {', '.join(CLIENTS)}") from None
    return make(url, **options)
