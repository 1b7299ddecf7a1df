"""OpenAI-compatible ``/v1/completions`` (vLLM), with vLLM's ``prompt_logprobs`` for the replay.

Prompts are sent as token ids and tokens come back as ids (vLLM's ``return_tokens_as_token_ids``), so no
tokenizer is needed and colliding token strings cannot collapse. ``match``, ``golden`` and ``batch_invariance``
run here (top-k from ``top_logprobs`` and ``prompt_logprobs``); the cache-hit helpers do not: there is no
standard cache flush and ``cached_tokens`` is optional. They report INCONCLUSIVE with that reason
(``cache_unsupported_reason``), which names engine kind ``vllm`` when the server is vLLM (``engines.vllm``
arranges the hits there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from precisionbot.engines.base import GenerateRequest, Generation, Progress, ServerInfo, TopLogprobs
from precisionbot.engines.http import HttpClient
from precisionbot.engines.logprobs import logprob
from precisionbot.errors import EngineError

CACHE_REASON = (
    "OpenAI-compatible engines cannot provide a prefix-cache hit with logprobs (no cache flush endpoint; vLLM "
    "bypasses its prefix cache for prompt-logprob requests); use the SGLang native API for the cache helpers"
)
VLLM_REASON = (
    "this is a vLLM server: engine kind openai does not arrange its cache hits; use --engine-kind vllm (engine.kind: "
    "vllm), with the server started with VLLM_SERVER_DEV_MODE=1 and --enable-prompt-tokens-details"
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


LLAMA_HINT = (
    " (llama-server drops the entry of a token that ends in an incomplete UTF-8 character: use engine kind "
    "llamacpp there)"
)


def _content_shape(logprobs: Any) -> bool:
    return isinstance(logprobs, Mapping) and isinstance(logprobs.get("content"), list)


def output_logprobs(logprobs: Any, index: int) -> tuple[tuple[int, ...], np.ndarray[Any, Any]]:
    """Generated token ids and logprobs from either shape of ``choices[0].logprobs``: the legacy
    ``{tokens, token_logprobs}`` (vLLM; ids as ``token_id:N``) or ``{content: [{id, token, logprob, ...}]}``
    (llama-server; an ``id`` field, else the token as ``token_id:N``)."""
    where = f"engine answer to request {index}"
    if not isinstance(logprobs, Mapping):
        raise EngineError(
            f"{where}: choices[0].logprobs is {type(logprobs).__name__}, expected an object with tokens and "
            "token_logprobs (legacy) or content[] (was 'logprobs' ignored by the server?)"
        )
    if _content_shape(logprobs):
        ids: list[int] = []
        lps: list[float] = []
        for k, entry in enumerate(logprobs["content"]):
            if not isinstance(entry, Mapping):
                raise EngineError(f"{where}: logprobs.content[{k}] is not an object")
            tid = entry.get("id")
            if isinstance(tid, bool) or not isinstance(tid, int) or tid < 0:
                tid = _token_id(entry.get("token"), index, f"logprobs.content[{k}].token")
            ids.append(tid)
            lps.append(logprob(entry.get("logprob"), index, f"logprobs.content[{k}].logprob"))
        return tuple(ids), np.array(lps, dtype=np.float64)
    tokens, token_lps = logprobs.get("tokens"), logprobs.get("token_logprobs")
    if not isinstance(tokens, list) or not isinstance(token_lps, list):
        raise EngineError(
            f"{where}: choices[0].logprobs has neither tokens + token_logprobs (legacy shape) nor content[] "
            f"(found keys: {', '.join(sorted(map(str, logprobs))) or 'none'})"
        )
    if len(tokens) != len(token_lps):
        raise EngineError(
            f"{where}: logprobs.tokens ({len(tokens)}) and token_logprobs ({len(token_lps)}) disagree in length"
        )
    out_ids = tuple(_token_id(t, index, f"logprobs.tokens[{k}]") for k, t in enumerate(tokens))
    out_lp = np.array([logprob(v, index, f"logprobs.token_logprobs[{k}]") for k, v in enumerate(token_lps)])
    return out_ids, out_lp


def _top_row(pairs: list[tuple[int, float]], k: int) -> tuple[list[int], list[float]]:
    """The ``k`` most likely of one position's (id, logprob) pairs; a short row is padded (-1, NaN)."""
    pairs.sort(key=lambda p: -p[1])
    ids = [p[0] for p in pairs[:k]] + [-1] * max(0, k - len(pairs))
    lps = [p[1] for p in pairs[:k]] + [float("nan")] * max(0, k - len(pairs))
    return ids, lps


def output_top(logprobs: Any, index: int, n: int, k: int) -> TopLogprobs:
    """The top-``k`` of each generated token: legacy ``top_logprobs[j] = {"token_id:N": logprob}`` (vLLM) or
    ``content[j].top_logprobs = [{id|token, logprob}]`` (llama-server). vLLM adds the sampled token to a row
    when it is not among the top-k, so a row may hold ``k + 1`` entries: only the ``k`` most likely are kept."""
    where = f"engine answer to request {index}"
    rows: list[Any]
    if _content_shape(logprobs):
        rows = [e.get("top_logprobs") if isinstance(e, Mapping) else None for e in logprobs["content"]]
    else:
        raw = logprobs.get("top_logprobs") if isinstance(logprobs, Mapping) else None
        rows = raw if isinstance(raw, list) else []
    if len(rows) < n:
        raise EngineError(f"{where}: logprobs.top_logprobs has {len(rows)} rows, expected {n} (top-{k} was asked)")
    ids = np.full((n, k), -1, dtype=np.int32)
    lps = np.full((n, k), np.nan)
    for j, row in enumerate(rows[:n]):
        field = f"logprobs.top_logprobs[{j}]"
        pairs: list[tuple[int, float]] = []
        if isinstance(row, Mapping):
            pairs = [(_token_id(t, index, field), logprob(v, index, field)) for t, v in row.items()]
        elif isinstance(row, list):
            for e in row:
                if not isinstance(e, Mapping):
                    raise EngineError(f"{where}: {field} has an entry that is not an object")
                tid = e.get("id")
                if isinstance(tid, bool) or not isinstance(tid, int) or tid < 0:
                    tid = _token_id(e.get("token"), index, field)
                pairs.append((tid, logprob(e.get("logprob"), index, field)))
        else:
            raise EngineError(f"{where}: {field} is {type(row).__name__}, expected the top-{k} tokens")
        ids[j], lps[j] = _top_row(pairs, k)
    return TopLogprobs(ids=ids, logprobs=lps)


class OpenAIEngine:
    replay_per_position = False

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
        self._pieces: dict[int, str | None] = {}
        self._no_detokenize = False

    def _piece(self, token: int) -> str | None:
        if self._no_detokenize:
            return None
        body = {"model": self.model_name(), "tokens": [token]}
        response = self.http.request("POST", "/detokenize", json=body, what=f"/detokenize {token}")
        if response.status_code == 404:
            # Not vLLM (no /detokenize): the report shows the token's id instead of its text.
            self._no_detokenize = True
            return None
        try:
            data = response.json() if response.status_code == 200 else None
        except ValueError:
            data = None
        text = data.get("prompt") if isinstance(data, Mapping) else None
        return text if isinstance(text, str) and text and text != "\ufffd" else None

    def _texts_read(self, r: GenerateRequest, ids: Sequence[int]) -> tuple[str | None, ...]:
        """The text of the input positions the request reads (``read_from`` on): each distinct id is one
        ``/detokenize`` call, and a replay's prompt holds thousands that no check shows."""
        skip = r.unread(len(ids))
        return (None,) * skip + self.token_texts(ids[skip:])

    def token_texts(self, ids: Sequence[int]) -> tuple[str | None, ...]:
        """The text of each token id through vLLM's ``/detokenize``, once per distinct id: completions come back
        as ids (``return_tokens_as_token_ids``), so the report would otherwise show only ids."""
        missing = sorted({int(t) for t in ids} - self._pieces.keys())
        for token in missing:
            self._pieces[token] = self._piece(token)
        return tuple(self._pieces[int(t)] for t in ids)

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
        choices = data.get("choices") if isinstance(data, Mapping) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, Mapping):
            raise EngineError(f"engine answer to request {index}: choices[0] is missing (got {str(data)[:80]!r})")
        n = r.max_new_tokens
        out_ids, out_lp = output_logprobs(choice.get("logprobs"), index)
        if len(out_ids) < n or (r.ignore_eos and n and len(out_ids) != n):
            raise EngineError(
                f"engine answer to request {index}: {len(out_ids)} output logprob entries, expected {n}"
                + (LLAMA_HINT if _content_shape(choice.get("logprobs")) else "")
            )
        out_ids, out_lp = out_ids[:n], out_lp[:n]
        k = r.top_logprobs_num
        top_out = output_top(choice.get("logprobs"), index, n, k) if k > 0 else None
        in_ids = np.empty(0, dtype=np.int32)
        in_lp = np.empty(0)
        top_in = None
        if r.logprob_start_len >= 0:
            in_lp, top_in = self._prompt_logprobs(choice.get("prompt_logprobs"), r, index)
            in_ids = np.asarray(r.input_ids[r.logprob_start_len :], dtype=np.int32)
        return Generation(
            input_ids=r.input_ids,
            output_ids=out_ids,
            prompt_tokens=len(r.input_ids),
            cached_tokens=self._cached_tokens(data.get("usage"), index),
            input_token_ids=in_ids,
            input_logprobs=in_lp,
            output_logprobs=out_lp,
            input_top=top_in,
            output_top=top_out,
            input_token_text=self._texts_read(r, in_ids.tolist()) if r.return_text else (),
            output_token_text=self.token_texts(out_ids) if r.return_text else (),
        )

    def _cached_tokens(self, usage: Any, index: int) -> int:
        """``usage.prompt_tokens_details.cached_tokens`` where the server reports it, else 0."""
        details = usage.get("prompt_tokens_details") if isinstance(usage, Mapping) else None
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        return cached if isinstance(cached, int) and not isinstance(cached, bool) and cached >= 0 else 0

    @staticmethod
    def _prompt_logprobs(raw: Any, r: GenerateRequest, index: int) -> tuple[np.ndarray[Any, Any], TopLogprobs | None]:
        """vLLM: ``[None, {"<id>": {"logprob": x, "rank": n, ...}, ...}, ...]``, one entry per prompt token: the
        prompt token and the top-k (``k + 1`` entries when the prompt token is not among them). Position 0 has
        no prediction (NaN, and a top-k row of -1/NaN), and so have the positions before ``read_from``: they are
        counted, not read (a replay's prompt: thousands of positions, each a dict, that no check compares)."""
        if not isinstance(raw, list) or len(raw) != len(r.input_ids):
            found = f"{len(raw)} entries" if isinstance(raw, list) else ("none" if raw is None else type(raw).__name__)
            raise EngineError(
                f"engine answer to request {index}: prompt_logprobs must have {len(r.input_ids)} entries, found "
                f"{found} (vLLM supports prompt_logprobs; llama-server ignores it: use engine kind llamacpp there)"
            )
        k = r.top_logprobs_num
        out = np.full(len(raw), np.nan)
        top_ids = np.full((len(raw), k), -1, dtype=np.int32)
        top_lps = np.full((len(raw), k), np.nan)
        start = r.logprob_start_len
        for pos in range(max(1, start + r.unread(len(raw) - start)), len(raw)):
            entry = raw[pos]
            key = str(r.input_ids[pos])
            if not isinstance(entry, Mapping) or key not in entry:
                raise EngineError(f"engine answer to request {index}: prompt_logprobs[{pos}] lacks token {key}")
            value = entry[key]
            value = value.get("logprob") if isinstance(value, Mapping) else value
            out[pos] = logprob(value, index, f"prompt_logprobs[{pos}]")
            if k > 0:
                pairs = []
                for tid, v in entry.items():
                    field = f"prompt_logprobs[{pos}][{str(tid)[:12]!r}]"
                    if not (
                        isinstance(tid, str) and tid.isascii() and tid.isdigit() and len(tid) <= 10 and int(tid) < 2**31
                    ):
                        raise EngineError(f"engine answer to request {index}: {field} is not a token id")
                    lp = v.get("logprob") if isinstance(v, Mapping) else v
                    pairs.append((int(tid), logprob(lp, index, field)))
                top_ids[pos], top_lps[pos] = _top_row(pairs, k)
        top = TopLogprobs(ids=top_ids[start:], logprobs=top_lps[start:]) if k > 0 else None
        return out[start:], top

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
        """vLLM's ``{"model", "prompt"}``; llama-server answers that with no tokens, so a non-empty text that
        comes back empty is asked again in llama-server's ``{"content", "add_special"}``."""
        model = self.model_name()
        out = []
        for i, text in enumerate(texts):
            what = f"/tokenize text {i}"
            tokens = self._tokens(
                self.http.json_call("POST", "/tokenize", json={"model": model, "prompt": text}, what=what), what
            )
            if text and not tokens:
                body = {"content": text, "add_special": True}
                tokens = self._tokens(self.http.json_call("POST", "/tokenize", json=body, what=what), what)
            if text and not tokens:
                raise EngineError(
                    f"{what}: /tokenize gave no tokens for a non-empty text, asked as vLLM's {{model, prompt}} and "
                    "llama-server's {content}; set engine.tokenizer to a Hugging Face tokenizer"
                )
            out.append(tokens)
        return out

    @staticmethod
    def _tokens(data: Any, what: str) -> tuple[int, ...]:
        tokens = data.get("tokens") if isinstance(data, Mapping) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise EngineError(f"{what}: /tokenize answered no token list (got {str(data)[:80]!r})")
        return tuple(tokens)

    def cache_unsupported_reason(self) -> str | None:
        if self._is_vllm():
            return VLLM_REASON
        return CACHE_REASON

    def _is_vllm(self) -> bool:
        """vLLM answers ``GET /version`` with its version and names its metrics ``vllm:...``."""
        try:
            version = self.http.request("GET", "/version", what="/version", retry=False)
            if version.status_code != 200 or '"version"' not in version.text:
                return False
            metrics = self.http.request("GET", "/metrics", what="/metrics", retry=False)
        except EngineError:
            return False
        return metrics.status_code == 200 and "vllm:" in metrics.text

    def close(self) -> None:
        self.http.close()
