"""The builtin reference engine, served in-process on 127.0.0.1 and reached over real HTTP.

Going through the SGLang-compatible server (rather than calling the model directly) means the builtin engine
exercises exactly the client code path a real engine does: batching, validation, flushes, cache reporting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from precisionbot.builtin.options import EngineOptions, parse_fault
from precisionbot.engines.sglang import SGLangEngine


class BuiltinEngine(SGLangEngine):
    """Starts helper-owned ``precisionbot.builtin.BuiltinServer`` on a free port; ``close()`` stops it."""

    def __init__(
        self,
        faults: Sequence[str] = (),
        *,
        disable_radix_cache: bool = False,
        enable_deterministic_inference: bool = False,
        preset: str = "hybrid",
        vocab: str | None = None,
        options: Any = None,
        flags: Any = None,
        batch_size: int = 8,
        concurrency: int = 4,
        request_timeout_s: float = 600.0,
    ) -> None:
        from precisionbot.builtin.server import BuiltinServer  # torch: only when the builtin engine starts

        if options is None:
            options = EngineOptions(
                faults=tuple(parse_fault(f) for f in faults),
                disable_radix_cache=disable_radix_cache,
                enable_deterministic_inference=enable_deterministic_inference,
                preset=preset,
                vocab=vocab,
            )
        self.options = options
        # ``flags``: a ``builtin.dumper_config.RuntimeFlags`` (the dumper and CUDA-graph flags), for localize.
        self.server = BuiltinServer(options, host="127.0.0.1", port=0, flags=flags)
        self.server.start()
        try:
            super().__init__(
                self.server.url,
                kind="builtin",
                batch_size=batch_size,
                concurrency=concurrency,
                request_timeout_s=request_timeout_s,
            )
        except BaseException:
            self.server.stop()
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.server.stop()
