"""The one small interface every engine client implements, and the validated data it returns.

Clients translate every bad answer (HTTP errors, timeouts, missing fields, wrong lengths, NaN, a ``None``
where a number belongs) into an ``EngineError`` naming the request and the field; what they return has been
checked, so the checks can trust it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]
Progress = Callable[[int], None]
"""Called with the number of requests just completed."""


@dataclass(frozen=True)
class GenerateRequest:
    """One prompt for ``/generate``. Temperature is always sent explicitly (engines may default from the
    model's generation config); at temperature 0 the reported logprobs are the raw ``log_softmax``."""

    input_ids: tuple[int, ...]
    max_new_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = True
    logprob_start_len: int = -1
    """-1 = output logprobs only; 0 = every prompt position too (position 0 has none)."""
    top_logprobs_num: int = 0
    return_text: bool = False
    """Ask for token text in the logprob entries (only where we show tokens: it costs detokenisation)."""
    sampling_seed: int | None = None
    """Seed of this request's sampling (temperature > 0), where the engine honours it; None = not sent."""
    read_from: int = 0
    """The first input position whose logprobs the caller reads. Not sent: the engine still scores from
    ``logprob_start_len`` (a replay is a prefill with logprobs from position 0, as SGLang's helpers send it), but
    a client may skip reading the positions before this one (an SGLang replay's prompt: nine tenths of its
    answer). They keep their place in the ``Generation``: the ids sent, NaN logprobs, top-k ids -1, no text."""
    return_routed_experts: bool = False
    """Ask for the experts each token was routed to (SGLang's ``return_routed_experts``; MoE models on a server
    started with ``--enable-return-routed-experts``)."""

    def __post_init__(self) -> None:
        if not self.input_ids:
            raise ValueError("GenerateRequest needs at least one input token")
        if self.max_new_tokens < 0 or self.logprob_start_len < -1 or self.top_logprobs_num < 0 or self.read_from < 0:
            raise ValueError(f"GenerateRequest has invalid options: {self}")

    def unread(self, input_positions: int) -> int:
        """How many of the ``input_positions`` scored from ``logprob_start_len`` come before ``read_from``."""
        if self.logprob_start_len < 0:
            return 0
        return min(max(self.read_from - self.logprob_start_len, 0), input_positions)


@dataclass(frozen=True)
class TopLogprobs:
    """Top-k per position: ``ids[n, k]`` and ``logprobs[n, k]`` sorted by descending logprob."""

    ids: IntArray
    logprobs: FloatArray


@dataclass(frozen=True)
class Generation:
    """One validated answer. Arrays are position-aligned with the tokens they score."""

    input_ids: tuple[int, ...]
    """The prompt as sent."""
    output_ids: tuple[int, ...]
    prompt_tokens: int
    cached_tokens: int
    """Prompt tokens served from the prefix cache (0 when the engine does not report it)."""
    input_token_ids: IntArray
    """Token ids of ``input_ids[logprob_start_len:]`` (empty when input logprobs were not asked)."""
    input_logprobs: FloatArray
    """Their logprobs; entry 0 is NaN when ``logprob_start_len == 0`` (position 0 has no prediction), and so
    is every position before the request's ``read_from`` where the client skipped reading them."""
    output_logprobs: FloatArray
    """Logprob of each output token (``len(output_ids)`` entries)."""
    input_top: TopLogprobs | None = None
    output_top: TopLogprobs | None = None
    input_token_text: tuple[str | None, ...] = ()
    """Token text of ``input_token_ids`` when ``return_text`` was asked."""
    output_token_text: tuple[str | None, ...] = ()
    e2e_latency_s: float | None = None
    """The engine's own end-to-end latency for this request (the whole batch call, for SGLang)."""
    routed_experts: IntArray | None = None
    """``[seqlen - 1, layers x top_k]`` expert ids of positions ``[0, seqlen - 1)`` of prompt + output, when
    asked and returned (SGLang's flat ``[tokens, layers, top_k]``, split into tokens only: the answer does not
    say the layer count); None when not asked or the engine did not return them."""
    spec_counts: tuple[int, int, int] | None = None
    """Speculative decoding, this request's own (verify steps, drafted tokens, accepted drafted tokens) when the
    engine reports them per request (SGLang's ``meta_info``); None otherwise (vLLM keeps only server-wide
    counters)."""


@dataclass(frozen=True)
class ServerInfo:
    """What the engine says about itself (``/server_info``), with the fields the checks rely on."""

    raw: Mapping[str, Any] = field(default_factory=dict)
    disable_radix_cache: bool | None = None
    """None when the engine does not say."""
    version: str | None = None
    model_path: str | None = None
    tp_size: int | None = None

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> ServerInfo:
        drc = raw.get("disable_radix_cache")
        tp = raw.get("tp_size")
        return cls(
            raw=dict(raw),
            disable_radix_cache=drc if isinstance(drc, bool) else None,
            version=None if raw.get("version") is None else str(raw.get("version")),
            model_path=None if raw.get("model_path") is None else str(raw.get("model_path")),
            tp_size=tp if isinstance(tp, int) and not isinstance(tp, bool) else None,
        )


class Engine(Protocol):
    """An engine under test: ``SGLangEngine``, ``VLLMEngine``, ``OpenAIEngine``, ``BuiltinEngine``,
    ``LlamaCppEngine``."""

    kind: str
    """``sglang``, ``vllm``, ``openai``, ``builtin`` or ``llamacpp``."""
    url: str
    replay_per_position: bool
    """True when the engine cannot return prompt logprobs, so the helpers' no-cache replay scores each position
    with a request of its own (llama.cpp); False when one prefill returns every position's logprob."""

    def generate(self, requests: Sequence[GenerateRequest], progress: Progress | None = None) -> list[Generation]:
        """Answers in request order; batched and sent concurrently as the client is configured."""
        ...

    def flush_cache(self) -> None:
        """Empty the prefix cache (waits while the engine is busy, up to a deadline)."""
        ...

    def server_info(self) -> ServerInfo: ...

    def health(self) -> bool:
        """True when the engine can generate now."""
        ...

    def tokenize(self, texts: Sequence[str]) -> list[tuple[int, ...]]:
        """Token ids of each text as this engine tokenizes it (no tokenizer download needed)."""
        ...

    def cache_unsupported_reason(self) -> str | None:
        """Why the prefix-cache helpers cannot run here (None when they can)."""
        ...

    def close(self) -> None: ...
