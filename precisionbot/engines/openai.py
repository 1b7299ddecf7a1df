"""OpenAI-compatible ``/v1/completions`` (vLLM), with vLLM's ``prompt_logprobs`` for the replay.

Prompts are sent as token ids and tokens come back as ids (vLLM's ``return_tokens_as_token_ids``), so no
tokenizer is needed and colliding token strings cannot collapse. ``match`` runs here; the cache-hit helpers do
not: there is no standard cache flush, ``cached_tokens`` is optional, and vLLM bypasses its prefix cache for
requests that ask for prompt logprobs, so a cache hit with logprobs cannot be arranged. They report
INCONCLUSIVE with that reason (``cache_unsupported_reason``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from precisionbot.engines.base import GenerateRequest, Generation, Progress, ServerInfo
from precisionbot.engines.http import HttpClient
from precisionbot.engines.validate import logprob
from precisionbot.errors import EngineError

CACHE_REASON = (
    "OpenAI-compatible engines cannot provide a prefix-cache hit with logprobs (no cache flush endpoint; vLLM "
    "bypasses its prefix cache for prompt-logprob requests); use the SGLang native API for the cache helpers"
)


def _token_id(token: Any, index: int, field: str) -> int:
    digits = token[9:] if isinstance(token, str) and token.startswith("token_id:") else ""
    # ASCII only ("²".isdigit() is true and int() refuses it) and within int32 (the arrays' dtype).
    if 0 < len(digits) <= 10 and digits.isascii() and digits.isdigit() and int(digits) < 2**31:
        return int(digits)
    raise EngineError(
        f"engine answer to request {index}: {field} {str(token)[:30]!r} is not 'token_id:N'; the server must "
        "support return_tokens_as_token_ids (vLLM), or use engine kind sglang"
    )


class OpenAIEngine:
    kind = "openai"

    def __init__(
        self,
        url: str,
        *,
        batch_size: int = 8,
        concurrency: int = 4,
        request_timeout_s: float = 600.0,
        model: str | None = None,
        retries: int = 4,
        backoff_s: float = 0.25,
    ) -> None:
        self.url = url.rstrip("/")
        self.concurrency = max(1, concurrency * batch_size)  # one prompt per call; the engine batches them
        self.http = HttpClient(
            self.url, timeout_s=request_timeout_s, pool_size=self.concurrency, retries=retries, backoff_s=backoff_s
        )
        self._model = model

    def model_name(self) -> str:
        if self._model is None:
            data = self.http.json_call("GET", "/v1/models", what="/v1/models")
            try:
                self._model = str(data["data"][0]["id"])
            except (KeyError, IndexError, TypeError) as exc:
                raise EngineError("/v1/models lists no model") from exc
        return self._model

    def generate(self, requests: Sequence[GenerateRequest], progress: Progress | None = None) -> list[Generation]:
        model = self.model_name()

        def one(i: int) -> Generation:
            gen = self._one(model, requests[i], i)
            if progress is not None:
                progress(1)
            return gen

        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(requests)))) as pool:
            return list(pool.map(one, range(len(requests))))

    def _one(self, model: str, r: GenerateRequest, index: int) -> Generation:
        body: dict[str, Any] = {
            "model": model,
            "prompt": list(r.input_ids),
            # A pure prefill is one token with the prompt's logprobs; the token is dropped.
            "max_tokens": max(1, r.max_new_tokens),
            "temperature": r.temperature,
            "ignore_eos": r.ignore_eos,
            "logprobs": max(1, r.top_logprobs_num),
            "return_tokens_as_token_ids": True,
        }
        if r.sampling_seed is not None:
            body["seed"] = r.sampling_seed
        if r.logprob_start_len >= 0:
            body["prompt_logprobs"] = max(1, r.top_logprobs_num)
        data = self.http.json_call("POST", "/v1/completions", json=body, what=f"/v1/completions request {index}")
        try:
            choice = data["choices"][0]
            logprobs = choice["logprobs"]
            tokens, token_lps = logprobs["tokens"], logprobs["token_logprobs"]
        except (KeyError, IndexError, TypeError) as exc:
            raise EngineError(f"engine answer to request {index}: choices[0].logprobs is missing") from exc
        n = r.max_new_tokens
        if not isinstance(tokens, list) or not isinstance(token_lps, list) or len(tokens) != len(token_lps):
            raise EngineError(f"engine answer to request {index}: logprobs.tokens and token_logprobs disagree")
        if len(tokens) < n or (r.ignore_eos and n and len(tokens) != n):
            raise EngineError(f"engine answer to request {index}: {len(tokens)} output tokens, expected {n}")
        out_ids = tuple(_token_id(t, index, f"logprobs.tokens[{k}]") for k, t in enumerate(tokens[:n]))
        out_lp = np.array([logprob(v, index, f"logprobs.token_logprobs[{k}]") for k, v in enumerate(token_lps[:n])])
        in_ids = np.empty(0, dtype=np.int32)
        in_lp = np.empty(0)
        if r.logprob_start_len >= 0:
            in_lp = self._prompt_logprobs(choice.get("prompt_logprobs"), r, index)
            in_ids = np.asarray(r.input_ids[r.logprob_start_len :], dtype=np.int32)
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        return Generation(
            input_ids=r.input_ids,
            output_ids=out_ids,
            prompt_tokens=len(r.input_ids),
            cached_tokens=cached if isinstance(cached, int) and not isinstance(cached, bool) else 0,
            input_token_ids=in_ids,
            input_logprobs=in_lp,
            output_logprobs=out_lp,
            input_token_text=(None,) * len(in_ids) if r.return_text else (),
            output_token_text=(None,) * len(out_ids) if r.return_text else (),
        )

    @staticmethod
    def _prompt_logprobs(raw: Any, r: GenerateRequest, index: int) -> np.ndarray[Any, Any]:
        """vLLM: ``[None, {"<id>": {"logprob": x, ...}, ...}, ...]``, one entry per prompt token."""
        if not isinstance(raw, list) or len(raw) != len(r.input_ids):
            raise EngineError(
                f"engine answer to request {index}: prompt_logprobs must have {len(r.input_ids)} entries "
                "(is this vLLM with prompt_logprobs support?)"
            )
        out = np.full(len(raw), np.nan)
        for pos in range(max(1, r.logprob_start_len), len(raw)):
            entry = raw[pos]
            key = str(r.input_ids[pos])
            if not isinstance(entry, Mapping) or key not in entry:
                raise EngineError(f"engine answer to request {index}: prompt_logprobs[{pos}] lacks token {key}")
            value = entry[key]
            value = value.get("logprob") if isinstance(value, Mapping) else value
            out[pos] = logprob(value, index, f"prompt_logprobs[{pos}]")
        return out[r.logprob_start_len :]

    def flush_cache(self) -> None:
        # vLLM's /reset_prefix_cache exists only in dev mode; the replay bypasses the prefix cache anyway.
        response = self.http.request("POST", "/reset_prefix_cache", what="/reset_prefix_cache")
        if response.status_code not in (200, 404, 405):
            raise EngineError(f"/reset_prefix_cache answered HTTP {response.status_code}")

    def server_info(self) -> ServerInfo:
        return ServerInfo(raw={"model": self.model_name()}, model_path=self.model_name())

    def health(self) -> bool:
        try:
            return self.http.request("GET", "/health", what="/health", retry=False).status_code == 200
        except EngineError:
            return False

    def tokenize(self, texts: Sequence[str]) -> list[tuple[int, ...]]:
        model = self.model_name()
        out = []
        for i, text in enumerate(texts):
            data = self.http.json_call(
                "POST", "/tokenize", json={"model": model, "prompt": text}, what=f"/tokenize text {i}"
            )
            tokens = data.get("tokens") if isinstance(data, Mapping) else None
            if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
                raise EngineError(f"/tokenize answer {i} has no token list")
            out.append(tuple(tokens))
        return out

    def cache_unsupported_reason(self) -> str | None:
        return CACHE_REASON

    def close(self) -> None:
        self.http.close()
