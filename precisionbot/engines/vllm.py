"""vLLM's OpenAI-compatible server with its prefix cache: every helper, golden and batch_invariance.

The plain ``openai`` client cannot arrange a cache hit; against vLLM the pieces exist (measured on vLLM 0.32.0):

* ``usage.prompt_tokens_details.cached_tokens`` on every ``/v1/completions`` answer, but only when the server
  runs with ``--enable-prompt-tokens-details``: without it a hit cannot be counted, so that is a setup error;
* ``POST /reset_prefix_cache`` empties the prefix cache, but only with ``VLLM_SERVER_DEV_MODE=1`` in the
  server's environment (404 otherwise): the helpers need a flush before the warm-up and before each replay;
* a request that asks for ``prompt_logprobs`` never reads the prefix cache (``cached_tokens`` 0): that is the
  no-cache replay, one request per sequence, with the top-k of every position (up to ``--max-logprobs``).

vLLM caches whole blocks of ``block_size`` tokens (the last prompt token is always computed, so a repeat of an
N-token prompt hits ``(N - 1) // block_size`` blocks); ``/metrics`` says the block size and whether prefix
caching is on (``vllm:cache_config_info``), and ``server_info`` passes them to the multi-turn rules.

A hybrid model (gated delta-net / mamba layers) runs in ``mamba_cache_mode`` ``align``: vLLM keeps a layer's
recurrent state only at block boundaries, so a hit lands on a multiple of the scheduler block (the least common
multiple of ``block_size`` and ``mamba_block_size``). That step is passed as ``mamba_track_interval`` too, the
name SGLang gives a hybrid cache's checkpoint step, so the ``recurrent_state`` diagnosis reads it as it does on
SGLang. Which of those states survive is ``prefix_cache_retention_interval``: 0 (vLLM's default) keeps only the
state at each prompt's last block, so no later turn can reuse decoded tokens (``scoring.cache_rules``).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from typing import Any

from precisionbot.engines import jsoncodec
from precisionbot.engines.base import ServerInfo
from precisionbot.engines.http import error_message
from precisionbot.engines.openai import OpenAIEngine
from precisionbot.errors import EngineError

DEV_MODE_FIX = (
    "start vLLM with VLLM_SERVER_DEV_MODE=1 in its environment so precisionbot can flush its prefix cache "
    "(POST /reset_prefix_cache answered 404)"
)
DETAILS_FIX = (
    "start vLLM with --enable-prompt-tokens-details so its answers carry usage.prompt_tokens_details.cached_tokens "
    "(the count of prefix-cache hits)"
)
FLUSH_DEADLINE_S = 60.0
"""How long a flush is retried while vLLM refuses it (it cannot reset while requests hold cached blocks)."""
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def cache_config(metrics: str) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` in a Prometheus ``/metrics`` text (empty when absent)."""
    for line in metrics.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return dict(_LABEL.findall(line[: line.rindex("}") + 1]))
    return {}


SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)
"""vLLM's speculative-decoding counters: verify steps that had drafts, drafted tokens, accepted drafted tokens
(its mean accepted length is ``1 + accepted / drafts``)."""


def spec_counters(metrics: str) -> tuple[int, int, int] | None:
    """``SPEC_COUNTERS`` summed over engines from a Prometheus ``/metrics`` text; None when vLLM reports none (a
    server started without ``--speculative-config``)."""
    sums = dict.fromkeys(SPEC_COUNTERS, 0.0)
    seen = False
    for line in metrics.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            try:
                sums[name] += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
            seen = True
    return tuple(int(sums[n]) for n in SPEC_COUNTERS) if seen else None  # type: ignore[return-value]


def _positive(value: str | None) -> int | None:
    return int(value) if value is not None and value.isascii() and value.isdigit() and int(value) > 0 else None


class VLLMEngine(OpenAIEngine):
    """Client of a vLLM server started with ``--enable-prompt-tokens-details`` and ``VLLM_SERVER_DEV_MODE=1``."""

    kind = "vllm"

    def __init__(self, url: str, *, flush_deadline_s: float = FLUSH_DEADLINE_S, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.flush_deadline_s = flush_deadline_s
        self._info: ServerInfo | None = None

    # --- server facts ---

    def spec_counters(self) -> tuple[int, int, int]:
        """vLLM's cumulative speculative-decoding counters (``SPEC_COUNTERS``), read fresh from ``/metrics``."""
        response = self.http.request("GET", "/metrics", what="/metrics (speculative-decoding counters)")
        counters = spec_counters(response.text) if response.status_code == 200 else None
        if counters is None:
            raise EngineError(
                f"{self.url}/metrics reports no vllm:spec_decode_* counters: this vLLM server runs without "
                "speculative decoding; start the spec arm with --speculative-config (docs/check.md, spec_decode)"
            )
        return counters

    def server_info(self) -> ServerInfo:
        """The model, vLLM's version and cache configuration; the first call also checks the set-up the checks
        need (the flush and the cached-token counts) and raises ``EngineError`` naming the fix."""
        if self._info is None:
            model = self.model_name()
            version = self.http.json_call("GET", "/version", what="/version")
            response = self.http.request("GET", "/metrics", what="/metrics")
            labels = cache_config(response.text) if response.status_code == 200 else {}
            block = _positive(labels.get("block_size"))
            raw: dict[str, Any] = {
                "model": model,
                "version": version.get("version") if isinstance(version, Mapping) else None,
                "prefix_cache_rules": "vllm",
            }
            if block is not None:
                raw["block_size"] = raw["page_size"] = block
            mamba = _positive(labels.get("mamba_block_size"))
            if mamba is not None and labels.get("mamba_cache_mode") == "align":
                raw["mamba_block_size"] = mamba
                if block is not None:
                    raw["mamba_track_interval"] = math.lcm(block, mamba)
            for key in (
                "enable_prefix_caching",
                "cache_dtype",
                "mamba_cache_mode",
                "sliding_window",
                "prefix_cache_retention_interval",
            ):
                if labels.get(key) not in (None, "None", ""):
                    raw[key] = labels[key]
            caching = labels.get("enable_prefix_caching")
            self._check_setup()
            self._info = ServerInfo(
                raw=raw,
                disable_radix_cache=None if caching is None else caching != "True",
                version=None if raw["version"] is None else str(raw["version"]),
                model_path=model,
            )
        return self._info

    def _check_setup(self) -> None:
        self.flush_cache()
        body = {"model": self.model_name(), "prompt": [0], "max_tokens": 1, "temperature": 0.0}
        what = "/v1/completions (set-up probe)"
        content = self.http.content_call("POST", "/v1/completions", json=body, what=what)
        try:
            data = jsoncodec.decode(content, what)
        except EngineError:
            data = None
        if not isinstance(data, Mapping):
            # A malformed answer is the engine answering badly, not a set-up it lacks: the checks' own requests
            # meet it and are INCONCLUSIVE naming it (exit 2), as on every engine kind, not a setup error here.
            return
        usage = data.get("usage")
        details = usage.get("prompt_tokens_details") if isinstance(usage, Mapping) else None
        if not isinstance(details, Mapping) or "cached_tokens" not in details:
            raise EngineError(f"vLLM answers without usage.prompt_tokens_details; {DETAILS_FIX}")

    def _cached_tokens(self, usage: Any, index: int) -> int:
        details = usage.get("prompt_tokens_details") if isinstance(usage, Mapping) else None
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        if isinstance(cached, bool) or not isinstance(cached, int) or cached < 0:
            raise EngineError(
                f"engine answer to request {index}: usage.prompt_tokens_details.cached_tokens is missing or not a "
                f"count (got {str(cached)[:30]!r}); {DETAILS_FIX}"
            )
        return cached

    # --- cache ---

    def flush_cache(self) -> None:
        """``POST /reset_prefix_cache``; retried while vLLM answers that it could not reset (blocks in use)."""
        deadline = time.monotonic() + self.flush_deadline_s
        delay = 0.05
        while True:
            response = self.http.request("POST", "/reset_prefix_cache", what="/reset_prefix_cache")
            if response.status_code == 404:
                raise EngineError(f"vLLM cannot be flushed; {DEV_MODE_FIX}")
            problem = f"HTTP {response.status_code}: {error_message(response)}"
            if response.status_code == 200:
                try:
                    body = response.json()
                except ValueError:
                    body = None
                if not isinstance(body, Mapping) or body.get("success") is not False:
                    return
                problem = "success: false (blocks still in use)"
            if time.monotonic() > deadline:
                raise EngineError(
                    f"/reset_prefix_cache did not empty vLLM's prefix cache within {self.flush_deadline_s:g} s "
                    f"({problem}); is another client sending requests?"
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def cache_unsupported_reason(self) -> str | None:
        self.server_info()  # raises with the fix when the server is not set up for the helpers
        return None
