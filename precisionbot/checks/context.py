"""What a check function receives: the engine, the suite, the thresholds, the prompts (built once, lazily)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from precisionbot import corpus
from precisionbot.checks.compare import CheckOutput
from precisionbot.config import Config, ModelConfig, SuiteConfig, ThresholdSet
from precisionbot.engines.base import Engine


class ProgressSink(Protocol):
    """Where checks report progress (a terminal bar, or nothing)."""

    def start(self, total: int) -> None:
        """The run's planned units (``CheckSpec.units`` summed), before the first check."""
        ...

    def phase(self, label: str) -> None: ...

    def advance(self, n: int) -> None: ...


class NullProgress:
    def start(self, total: int) -> None:
        pass

    def phase(self, label: str) -> None:
        pass

    def advance(self, n: int) -> None:
        pass


@dataclass
class CheckContext:
    """Shared state of one run. Not frozen: prompts and documents are computed on first use and cached."""

    engine: Engine
    config: Config
    suite: SuiteConfig
    thresholds: ThresholdSet
    profile: str = "default"
    model: ModelConfig | None = None
    baseline_store: str | None = None
    progress: ProgressSink = field(default_factory=NullProgress)
    _documents: list[corpus.Document] | None = None
    _prompts: list[tuple[int, ...]] | None = None
    _separator: tuple[int, ...] | None = None

    def documents(self) -> list[corpus.Document]:
        if self._documents is None:
            path = self.suite.corpus
            self._documents = corpus.builtin_documents() if path is None else corpus.load_jsonl(path)
        return self._documents

    def prompts(self) -> list[tuple[int, ...]]:
        """The suite's ``samples`` prompts, tokenised by the engine (deterministic for a seed)."""
        if self._prompts is None:
            self.progress.phase("tokenize")
            self._prompts = corpus.build_prompts(
                self.engine.tokenize, self.documents(), self.suite.samples, self.suite.prompt_tokens, self.suite.seed
            )
        return self._prompts

    def separator_ids(self) -> tuple[int, ...]:
        """The token(s) of ``","`` (SGLang's turn separator in decode_cache_hit), without a BOS the engine adds."""
        if self._separator is None:
            comma, probe = self.engine.tokenize([",", "x"])
            if len(comma) > 1 and probe and comma[0] == probe[0]:
                comma = comma[1:]  # a shared first token is a BOS, not part of the text
            self._separator = tuple(comma)
        return self._separator


CheckFn = Callable[[CheckContext], CheckOutput]
"""A check: runs against ``ctx.engine`` and returns its result (raising ``EngineError`` makes it INCONCLUSIVE)."""
