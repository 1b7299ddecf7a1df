"""One generation request inside the engine: its parameters (validated by sglang_api.py) and its progress."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import torch

from precisionbot.builtin.kvcache import Node
from precisionbot.builtin.recurrent import RecurrentState

LogprobEntry = tuple[float | None, int]
"""(logprob, token id); sglang_api.py adds the text."""


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    sampling_seed: int | None = None


@dataclass(frozen=True)
class LogprobParams:
    return_logprob: bool = False
    logprob_start_len: int = -1
    """Already resolved: -1 became ``len(input_ids) - 1``."""
    top_logprobs_num: int = 0
    token_ids_logprob: tuple[int, ...] = ()


@dataclass(eq=False)
class Request:
    rid: str
    input_ids: list[int]
    sampling: SamplingParams
    logprob: LogprobParams
    stream: bool = False
    return_routed_experts: bool = False
    """SGLang's request field: answer with the experts each token was routed to (MoE presets only)."""
    created: float = field(default_factory=time.perf_counter)
    # --- progress, written by the scheduler thread only -------------------------------------------------
    output_ids: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)
    slots: torch.Tensor | None = None
    """int64 KV slot of every position this request may use (from ``pages``)."""
    prefix_path: list[Node] = field(default_factory=list)
    cached_tokens: int = 0
    computed: int = 0
    """Positions whose KV is in the pool."""
    first_computed: int = 0
    """The first position this request computed itself (after the cache hit)."""
    rstate: RecurrentState | None = None
    """Hybrid models: the recurrent and conv state after ``computed`` tokens, and its checkpoints."""
    swa_pages: list[int] = field(default_factory=list)
    """SWA pool page of each page of positions (0: none; the tree's below ``swa_own_from``), swa_cache.py."""
    swa_own_from: int = 0
    """Index of the first page whose SWA page the request allocates itself (after its prefix hit)."""
    swa_evicted: int = 0
    """Positions below this have no SWA page any more (SGLang's ``swa_evicted_seqlen``)."""
    swa_reserved: int = 0
    """SWA pages reserved at admission: the most it will own at once."""
    swa_held: int = 0
    """SWA pages it owns now."""
    input_logprobs: list[LogprobEntry] = field(default_factory=list)
    input_top: list[list[LogprobEntry] | None] = field(default_factory=list)
    input_ids_lp: list[list[LogprobEntry] | None] = field(default_factory=list)
    output_logprobs: list[LogprobEntry] = field(default_factory=list)
    output_top: list[list[LogprobEntry]] = field(default_factory=list)
    output_ids_lp: list[list[LogprobEntry]] = field(default_factory=list)
    finish_reason: dict[str, object] | None = None
    routed_experts: torch.Tensor | None = None
    """Set when the request ends, if it asked: int16 ``[seqlen - 1, layers, TOP_K]`` expert ids of positions
    ``[0, seqlen - 1)`` (the last output token is never forwarded), as SGLang returns them."""
    spec_counts: list[int] | None = None
    """Speculative decoding: this request's verify steps, drafted and accepted tokens (SGLang's per-request
    ``spec_verify_ct``, ``spec_draft_token_num``, ``spec_accept_token_num``); None on an engine without it."""
    error: str | None = None
    generator: torch.Generator | None = None
    noise: torch.Generator | None = None
    finished_at: float | None = None
    done: threading.Event = field(default_factory=threading.Event)
    events: queue.Queue[int] = field(default_factory=queue.Queue)
    """Streaming: the scheduler puts the number of output tokens after each step (and -1 when done)."""

    @property
    def seq(self) -> list[int]:
        return self.input_ids + self.output_ids

    @property
    def prefilling(self) -> bool:
        return self.computed < len(self.input_ids)
