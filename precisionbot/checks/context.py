"""What a check function receives: the engine, the suite, the thresholds, the prompts (built once, lazily)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from precisionbot import corpus
from precisionbot.baselines.store import Store
from precisionbot.config import Config, ModelConfig, SuiteConfig, ThresholdSet
from precisionbot.engines.base import Engine
from precisionbot.errors import ConfigError
from precisionbot.results import CheckOutput


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
    store: Store | None = None
    """The baseline store (golden baselines, main's helper reruns), opened by the command; None: no store."""
    progress: ProgressSink = field(default_factory=NullProgress)
    record_hint: str | None = None
    """The ``baseline record`` flags that reach this engine with this config and suite (for "no baseline")."""
    spec_engine: Engine | None = None
    """The same build served with speculative decoding (``engine.spec_url``), the ``spec_decode`` check's spec
    arm; ``engine`` is its plain arm. None: the builtin engine starts its own arms, other engines have one."""
    _documents: list[corpus.Document] | None = None
    _prompts: list[tuple[int, ...]] | None = None
    _separator: tuple[int, ...] | None = None
    _runs: dict[tuple[int, int, int, int], list[tuple[int, ...]]] = field(default_factory=dict)

    def use_suite(self, suite: SuiteConfig) -> None:
        """Run with ``suite`` instead (its sizes rounded to the engine's cache, ``checks.cache_sizes``); the
        prompts are drawn again when it draws others (another range, count or seed)."""
        drawn = (self.suite.samples, self.suite.prompt_tokens, self.suite.seed, self.suite.corpus)
        if (suite.samples, suite.prompt_tokens, suite.seed, suite.corpus) != drawn:
            self._prompts = None
        self.suite = suite

    def documents(self) -> list[corpus.Document]:
        if self._documents is None:
            self._documents = corpus.suite_documents(self.suite.corpus)
        return self._documents

    def prompts(self) -> list[tuple[int, ...]]:
        """The suite's ``samples`` prompts, tokenised by the engine (deterministic for a seed)."""
        if self._prompts is None:
            self.progress.phase("tokenize")
            tokenize: corpus.Tokenize = self.engine.tokenize
            if self.config.engine.tokenizer is not None:
                tokenize = local_tokenizer(self.config.engine.tokenizer)
            self._prompts = corpus.build_prompts(
                tokenize, self.documents(), self.suite.samples, self.suite.prompt_tokens, self.suite.seed
            )
        return self._prompts

    def separator_ids(self) -> tuple[int, ...]:
        """The token(s) of ``","`` (SGLang's turn separator in decode_cache_hit).

        ``separator: upstream`` (the default) keeps what the tokenizer gives, BOS included, as kl_test_utils'
        ``tokenizer.encode(",")``; ``strip-bos`` drops a BOS the engine adds.
        """
        if self._separator is None:
            comma, probe = self.engine.tokenize([",", "x"])
            if self.suite.separator == "strip-bos" and len(comma) > 1 and probe and comma[0] == probe[0]:
                comma = comma[1:]  # a shared first token is a BOS, not part of the text
            self._separator = tuple(comma)
        return self._separator

    def _tokenize(self) -> corpus.Tokenize:
        if self.config.engine.tokenizer is not None:
            return local_tokenizer(self.config.engine.tokenizer)
        return self.engine.tokenize

    def token_runs(self, n: int, tokens: tuple[int, int], stream: int) -> list[tuple[int, ...]]:
        """``n`` corpus snippets of ``tokens`` length (no BOS), for turn and branch suffixes.

        ``stream`` keeps the draws of different uses apart; all are deterministic for the suite's seed.
        """
        key = (n, *tokens, stream)
        if key not in self._runs:
            tokenize = self._tokenize()
            first, probe = tokenize(["x", "y"])
            bos = len(first) > 1 and bool(probe) and first[0] == probe[0]
            lo, hi = tokens
            seed = self.suite.seed * 7919 + 101 * stream + 1
            runs = corpus.build_prompts(tokenize, self.documents(), n, (lo + bos, hi + bos), seed)
            self._runs[key] = [r[1:] if bos and len(r) > 1 and r[0] == first[0] else r for r in runs]
        return self._runs[key]


CheckFn = Callable[[CheckContext], CheckOutput]
"""A check: runs against ``ctx.engine`` and returns its result (raising ``EngineError`` makes it INCONCLUSIVE)."""


def local_tokenizer(name: str) -> corpus.Tokenize:
    """``engine.tokenizer``: a Hugging Face tokenizer (local path or hub name), when ``transformers`` is there."""
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ConfigError(
            f"engine.tokenizer {name!r} needs the 'transformers' package; install it or remove engine.tokenizer "
            "(the engine then tokenizes the corpus itself)"
        ) from exc
    try:
        tok = AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # transformers raises many kinds (OSError, ValueError, HTTP errors)
        raise ConfigError(f"engine.tokenizer {name!r} could not be loaded: {exc}") from exc

    def tokenize(texts: Sequence[str]) -> list[tuple[int, ...]]:
        return [tuple(int(t) for t in tok(text)["input_ids"]) for text in texts]

    return tokenize
