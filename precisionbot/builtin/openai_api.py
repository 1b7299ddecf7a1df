"""``/v1/completions`` (OpenAI legacy completions, as SGLang and vLLM serve it) on top of the same requests.

Top-logprob dicts are keyed by token text, so colliding strings collapse (REFERENCE): prefer ``/generate``.
vLLM's ``prompt_logprobs`` is accepted (a list with None at position 0, then ``{id: {logprob, rank,
decoded_token}}`` per position).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from precisionbot.builtin.request import LogprobEntry, LogprobParams, Request
from precisionbot.builtin.sglang_api import BadRequest, int_field, output_text, sampling_params
from precisionbot.builtin.tokenizer import Vocab

MODEL_NAME = "builtin"
COMPLETION_FIELDS = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "seed", "logprobs",
    "echo", "n", "stream", "prompt_logprobs", "ignore_eos", "stop_token_ids", "user", "frequency_penalty",
    "presence_penalty", "best_of", "return_tokens_as_token_ids",
}  # fmt: skip


def parse_completions(body: Any, max_context_tokens: int, vocab: Vocab) -> tuple[list[Request], bool]:
    """Returns the requests (one per prompt) and whether ``echo`` was asked."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    for key in body:
        if key not in COMPLETION_FIELDS:
            raise BadRequest(f"unknown field {key!r} in the /v1/completions request")
    if body.get("stream"):
        raise BadRequest("stream is not supported on /v1/completions by the builtin engine; use /generate")
    if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        raise BadRequest("n and best_of must be 1")
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts = [vocab.encode(prompt)]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = [vocab.encode(p) for p in prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        prompts = [[int_field(t, "prompt[]", 0, vocab.size - 1) for t in prompt]]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        prompts = [[int_field(t, "prompt[][]", 0, vocab.size - 1) for t in p] for p in prompt]
    else:
        raise BadRequest("prompt must be a string, a list of strings, or token ids")
    raw = {
        "max_new_tokens": body.get("max_tokens", 16),
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "top_k": body.get("top_k", -1),
        "min_p": body.get("min_p", 0.0),
        "stop": body.get("stop"),
        "sampling_seed": body.get("seed"),
        "ignore_eos": body.get("ignore_eos", False),
        "stop_token_ids": body.get("stop_token_ids"),
    }
    if raw["max_new_tokens"] is None:
        raw["max_new_tokens"] = 16
    sampling = sampling_params(raw, "request", vocab)
    n_top = body.get("logprobs")
    n_prompt = body.get("prompt_logprobs")
    echo = bool(body.get("echo", False))
    top = 0 if n_top is None else int_field(n_top, "logprobs", 0, 20)
    prompt_top = 0 if n_prompt is None else int_field(n_prompt, "prompt_logprobs", 0, 20)
    requests = []
    for prompt_ids in prompts:
        if not prompt_ids:
            raise BadRequest("prompt is empty")
        if len(prompt_ids) + sampling.max_new_tokens > max_context_tokens:
            raise BadRequest(f"prompt + max_tokens exceeds the context length {max_context_tokens}")
        want_prompt = n_prompt is not None or (echo and n_top is not None)
        lp = LogprobParams(
            return_logprob=n_top is not None or n_prompt is not None,
            logprob_start_len=0 if want_prompt else len(prompt_ids) - 1,
            top_logprobs_num=max(top, prompt_top),
        )
        requests.append(Request(uuid.uuid4().hex, prompt_ids, sampling, lp))
    return requests, echo


def completion_response(requests: list[Request], body: dict[str, Any], echo: bool, vocab: Vocab) -> dict[str, Any]:
    # vLLM's return_tokens_as_token_ids: tokens read "token_id:N", so colliding token strings cannot collapse.
    name = _id_name if body.get("return_tokens_as_token_ids") else vocab.token_text
    choices = []
    for index, req in enumerate(requests):
        text = output_text(req, vocab)
        choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None}
        if body.get("logprobs") is not None:
            n_top = int(body["logprobs"])
            entries: list[tuple[LogprobEntry, list[LogprobEntry] | None]] = []
            if echo:
                entries.extend(zip(req.input_logprobs, req.input_top, strict=True))
            entries.extend(zip(req.output_logprobs, req.output_top, strict=True))
            tokens, lps, tops, offsets, pos = [], [], [], [], 0
            for (lp, tid), top in entries:
                tokens.append(name(tid))
                lps.append(lp)
                tops.append(None if top is None else {name(t): v for v, t in top[:n_top]})
                offsets.append(pos)
                pos += len(vocab.token_text(tid))
            choice["logprobs"] = {
                "tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets
            }  # fmt: skip
        if body.get("prompt_logprobs") is not None:
            n_prompt = int(body["prompt_logprobs"])
            plist: list[dict[str, Any] | None] = [None]
            for (lp, tid), maybe_top in zip(req.input_logprobs[1:], req.input_top[1:], strict=True):
                top = maybe_top or []
                item: dict[str, dict[str, Any]] = {str(tid): {"logprob": lp, "rank": None, "decoded_token": name(tid)}}
                for rank, (v, t) in enumerate(top[:n_prompt], start=1):
                    item.setdefault(str(t), {"logprob": v, "rank": rank, "decoded_token": name(t)})
                    if t == tid:
                        item[str(t)]["rank"] = rank
                plist.append(item)
            choice["prompt_logprobs"] = plist
        reason = req.finish_reason or {}
        choice["finish_reason"] = "stop" if reason.get("type") == "stop" else "length"
        choices.append(choice)
    prompt_tokens = sum(len(r.input_ids) for r in requests)
    completion_tokens = sum(len(r.output_ids) for r in requests)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _id_name(token_id: int) -> str:
    return f"token_id:{token_id}"


def _model_field(body: Any, path: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    for key in body:
        if key not in allowed:
            raise BadRequest(f"unknown field {key!r} in the {path} request")
    model = body.get("model")
    if model is not None and model != MODEL_NAME:
        raise BadRequest(f"model {model!r} is not served here; use {MODEL_NAME!r} (or leave model out)")
    return body


def tokenize_response(body: Any, max_context_tokens: int, vocab: Vocab) -> dict[str, Any]:
    """vLLM's ``POST /tokenize``: ``{"prompt": str}`` (``model``, ``add_special_tokens``, ``return_token_strs``
    optional) answers ``{"count", "max_model_len", "tokens", "token_strs"}``; the OpenAI client tokenizes here."""
    body = _model_field(body, "/tokenize", {"model", "prompt", "add_special_tokens", "return_token_strs"})
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string")
    special = body.get("add_special_tokens", True)
    if not isinstance(special, bool):
        raise BadRequest("add_special_tokens must be true or false")
    tokens = vocab.encode(prompt, add_bos=special)
    strs = [vocab.token_text(t) for t in tokens] if body.get("return_token_strs") else None
    return {"count": len(tokens), "max_model_len": max_context_tokens, "tokens": tokens, "token_strs": strs}


def detokenize_response(body: Any, vocab: Vocab) -> dict[str, Any]:
    """vLLM's ``POST /detokenize``: ``{"tokens": [int]}`` answers ``{"prompt": str}``."""
    body = _model_field(body, "/detokenize", {"model", "tokens"})
    tokens = body.get("tokens")
    if not isinstance(tokens, list):
        raise BadRequest("tokens must be a list of token ids")
    return {"prompt": vocab.decode([int_field(t, "tokens[]", 0, vocab.size - 1) for t in tokens])}
