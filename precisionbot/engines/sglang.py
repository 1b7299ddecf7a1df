"""SGLang's native HTTP API (``/generate``, ``/flush_cache``, ``/server_info``, ``/health_generate``).

Facts of SGLang's API: batches are sent as 2-D ``input_ids`` with per-request ``sampling_params``; the answer
is a list in request order; ``/flush_cache`` answers 400 while requests are running or waiting;
``/server_info`` is ``/get_server_info`` on older builds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from functools import partial
from typing import Any, TypeVar

import httpx

from precisionbot.engines import jsoncodec
from precisionbot.engines.base import GenerateRequest, Generation, Progress, ServerInfo
from precisionbot.engines.http import HttpClient, error_message
from precisionbot.engines.sglang_parse import decode_answer, parse_batch_bytes, parse_token_ids
from precisionbot.errors import EngineError

T = TypeVar("T")


def generate_body(requests: Sequence[GenerateRequest]) -> dict[str, Any]:
    """The ``/generate`` body for a batch, as SGLang's KL helpers send it (temperature always explicit)."""
    return {
        "input_ids": [list(r.input_ids) for r in requests],
        "sampling_params": [_sampling_params(r) for r in requests],
        "return_logprob": True,
        "logprob_start_len": [r.logprob_start_len for r in requests],
        "top_logprobs_num": [r.top_logprobs_num for r in requests],
        "return_text_in_logprobs": any(r.return_text for r in requests),
        **({"return_routed_experts": True} if any(r.return_routed_experts for r in requests) else {}),
    }


def _sampling_params(r: GenerateRequest) -> dict[str, Any]:
    sp: dict[str, Any] = {"temperature": r.temperature, "max_new_tokens": r.max_new_tokens, "ignore_eos": r.ignore_eos}
    if r.sampling_seed is not None:
        sp["sampling_seed"] = r.sampling_seed  # SGLang's per-request seed (needs a deterministic sampling backend)
    return sp


class SGLangEngine:
    """Client of an SGLang-compatible server (SGLang itself, or the builtin engine's server)."""

    replay_per_position = False

    def __init__(
        self,
        url: str,
        *,
        batch_size: int = 8,
        concurrency: int = 4,
        request_timeout_s: float = 600.0,
        flush_timeout_s: float = 120.0,
        retries: int = 4,
        backoff_s: float = 0.25,
        kind: str = "sglang",
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if batch_size < 1 or concurrency < 1:
            raise ValueError("batch_size and concurrency must be >= 1")
        self.kind = kind
        self.url = url.rstrip("/")
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.flush_timeout_s = flush_timeout_s
        self.http = HttpClient(
            self.url,
            timeout_s=request_timeout_s,
            pool_size=concurrency + 2,
            retries=retries,
            backoff_s=backoff_s,
            transport=transport,
        )
        self._info: ServerInfo | None = None
        self.engine_time_s = 0.0
        """Sum over batch calls of the engine's reported e2e latency (max over the batch's items)."""

    # --- generation ---

    def generate(self, requests: Sequence[GenerateRequest], progress: Progress | None = None) -> list[Generation]:
        starts = range(0, len(requests), self.batch_size)
        batches = self._concurrently(
            [partial(self._batch, requests[s : s + self.batch_size], s) for s in starts],
            None if progress is None else lambda batch: progress(len(batch)),
        )
        return [g for batch in batches for g in batch]

    def _concurrently(self, calls: Sequence[Callable[[], T]], done: Callable[[T], None] | None = None) -> list[T]:
        """Results in call order, up to ``concurrency`` calls in flight (so the engine batches them); the first
        error cancels what has not started and is raised."""
        if len(calls) <= 1 or self.concurrency == 1:
            out = []
            for call in calls:
                out.append(call())
                if done is not None:
                    done(out[-1])
            return out
        results: dict[int, T] = {}
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(calls))) as pool:
            pending: dict[Future[T], int] = {pool.submit(call): i for i, call in enumerate(calls)}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in finished:
                    i = pending.pop(fut)
                    exc = fut.exception()
                    if exc is not None:
                        for other in pending:
                            other.cancel()
                        raise exc
                    results[i] = fut.result()
                    if done is not None:
                        done(results[i])
        return [results[i] for i in range(len(calls))]

    def _batch(self, chunk: Sequence[GenerateRequest], first_index: int) -> list[Generation]:
        what = f"/generate for requests {first_index}..{first_index + len(chunk) - 1}"
        content = self.http.content_call("POST", "/generate", json=generate_body(chunk), what=what)
        gens = parse_batch_bytes(content, chunk, first_index, f"{what}: /generate")
        latencies = [g.e2e_latency_s for g in gens if g.e2e_latency_s is not None]
        # Accumulated from worker threads: float += under the GIL is not atomic in theory, but these are
        # diagnostics for the benchmark, not results.
        self.engine_time_s += max(latencies) if latencies else 0.0
        return gens

    def tokenize(self, texts: Sequence[str]) -> list[tuple[int, ...]]:
        """The engine's own tokenisation: a pure prefill of each text with input logprobs from position 0.

        This fills the prefix cache; every helper flushes before it generates. Batches go concurrently.
        """
        starts = range(0, len(texts), self.batch_size)
        batches = self._concurrently([partial(self._tokenize_batch, texts[s : s + self.batch_size], s) for s in starts])
        return [ids for batch in batches for ids in batch]

    def _tokenize_batch(self, chunk: Sequence[str], first_index: int) -> list[tuple[int, ...]]:
        body = {
            "text": list(chunk),
            "sampling_params": [{"temperature": 0.0, "max_new_tokens": 0} for _ in chunk],
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        what = "/generate (tokenize corpus text)"
        content = self.http.content_call("POST", "/generate", json=body, what=what)
        with jsoncodec.gc_paused():
            ids, latency = parse_token_ids(decode_answer(content, what, texts=False), len(chunk), first_index)
        self.engine_time_s += latency
        return ids

    # --- cache and info ---

    def flush_cache(self) -> None:
        deadline = time.monotonic() + self.flush_timeout_s
        delay = 0.05
        while True:
            response = self.http.request("POST", "/flush_cache", what="/flush_cache")
            if response.status_code == 200:
                return
            if response.status_code != 400:
                raise EngineError(f"/flush_cache answered HTTP {response.status_code}: {error_message(response)}")
            # 400 = requests still running or waiting: the cache cannot be flushed yet.
            if time.monotonic() + delay > deadline:
                raise EngineError(
                    f"/flush_cache still answered 400 (engine busy) after {self.flush_timeout_s:g} s; "
                    "another client may be using the engine"
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def server_info(self) -> ServerInfo:
        if self._info is None:
            response = self.http.request("GET", "/server_info", what="/server_info")
            if response.status_code == 404:
                response = self.http.request("GET", "/get_server_info", what="/get_server_info")
            if response.status_code == 404:
                raise EngineError(
                    "/server_info and /get_server_info answered HTTP 404: not an SGLang server; for llama.cpp's "
                    "llama-server use --engine-kind llamacpp, for vLLM --engine-kind openai"
                )
            if response.status_code != 200:
                raise EngineError(f"/server_info answered HTTP {response.status_code}: {error_message(response)}")
            try:
                raw = response.json()
            except (ValueError, RecursionError) as exc:
                raise EngineError("/server_info answered invalid JSON") from exc
            if not isinstance(raw, dict):
                raise EngineError("/server_info answered something other than a JSON object")
            self._info = ServerInfo.from_raw(raw)
        return self._info

    def health(self) -> bool:
        try:
            response = self.http.request("GET", "/health_generate", what="/health_generate", retry=False)
        except EngineError:
            return False
        return response.status_code == 200

    def cache_unsupported_reason(self) -> str | None:
        return None

    def close(self) -> None:
        self.http.close()
