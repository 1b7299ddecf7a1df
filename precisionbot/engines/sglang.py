"""SGLang's native HTTP API (``/generate``, ``/flush_cache``, ``/server_info``, ``/health_generate``).

Facts of SGLang's API: batches are sent as 2-D ``input_ids`` with per-request ``sampling_params``; the answer
is a list in request order; ``/flush_cache`` answers 400 while requests are running or waiting;
``/server_info`` is ``/get_server_info`` on older builds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any

import httpx

from precisionbot.engines.base import GenerateRequest, Generation, Progress, ServerInfo
from precisionbot.engines.http import HttpClient, error_message
from precisionbot.engines.sglang_parse import parse_batch
from precisionbot.errors import EngineError


def generate_body(requests: Sequence[GenerateRequest]) -> dict[str, Any]:
    """The ``/generate`` body for a batch, as SGLang's KL helpers send it (temperature always explicit)."""
    return {
        "input_ids": [list(r.input_ids) for r in requests],
        "sampling_params": [_sampling_params(r) for r in requests],
        "return_logprob": True,
        "logprob_start_len": [r.logprob_start_len for r in requests],
        "top_logprobs_num": [r.top_logprobs_num for r in requests],
        "return_text_in_logprobs": any(r.return_text for r in requests),
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
        if not requests:
            return []
        starts = list(range(0, len(requests), self.batch_size))
        if len(starts) == 1 or self.concurrency == 1:
            out: list[Generation] = []
            for s in starts:
                out.extend(self._batch(requests[s : s + self.batch_size], s))
                if progress is not None:
                    progress(min(self.batch_size, len(requests) - s))
            return out
        results: list[list[Generation] | None] = [None] * len(starts)
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(starts))) as pool:
            pending: dict[Future[list[Generation]], int] = {
                pool.submit(self._batch, requests[s : s + self.batch_size], s): i for i, s in enumerate(starts)
            }
            while pending:
                done, _ = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in done:
                    i = pending.pop(fut)
                    exc = fut.exception()
                    if exc is not None:
                        for other in pending:
                            other.cancel()
                        raise exc
                    results[i] = fut.result()
                    if progress is not None:
                        progress(len(results[i] or ()))
        return [g for batch in results for g in (batch or ())]

    def _batch(self, chunk: Sequence[GenerateRequest], first_index: int) -> list[Generation]:
        what = f"/generate for requests {first_index}..{first_index + len(chunk) - 1}"
        answer = self.http.json_call("POST", "/generate", json=generate_body(chunk), what=what)
        gens = parse_batch(answer, chunk, first_index)
        latencies = [g.e2e_latency_s for g in gens if g.e2e_latency_s is not None]
        # Accumulated from worker threads: float += under the GIL is not atomic in theory, but these are
        # diagnostics for the benchmark, not results.
        self.engine_time_s += max(latencies) if latencies else 0.0
        return gens

    def tokenize(self, texts: Sequence[str]) -> list[tuple[int, ...]]:
        """The engine's own tokenisation: a pure prefill of each text with input logprobs from position 0.

        This fills the prefix cache; every helper flushes before it generates.
        """
        out: list[tuple[int, ...]] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            body = {
                "text": chunk,
                "sampling_params": [{"temperature": 0.0, "max_new_tokens": 0} for _ in chunk],
                "return_logprob": True,
                "logprob_start_len": 0,
            }
            answer = self.http.json_call("POST", "/generate", json=body, what="/generate (tokenize corpus text)")
            latencies = (
                [
                    a["meta_info"].get("e2e_latency")
                    for a in answer
                    if isinstance(a, dict) and isinstance(a.get("meta_info"), dict)
                ]
                if isinstance(answer, list)
                else []
            )
            self.engine_time_s += max((x for x in latencies if isinstance(x, (int, float))), default=0.0)
            if not isinstance(answer, list) or len(answer) != len(chunk):
                raise EngineError("tokenize: /generate did not answer one result per text")
            for i, item in enumerate(answer):
                meta = item.get("meta_info") if isinstance(item, dict) else None
                entries = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
                if not isinstance(entries, list) or not entries:
                    raise EngineError(f"tokenize: answer {start + i} has no meta_info.input_token_logprobs")
                try:
                    ids = tuple(int(e[1]) for e in entries)
                except (TypeError, ValueError, IndexError) as exc:
                    raise EngineError(f"tokenize: answer {start + i} has malformed input_token_logprobs") from exc
                if meta is not None and meta.get("prompt_tokens") not in (None, len(ids)):
                    raise EngineError(f"tokenize: answer {start + i}: prompt_tokens disagrees with the token list")
                out.append(ids)
        return out

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
