"""SGLang's ``/generate`` request and response shapes: parsing with field-naming errors, and
building the answer from finished requests. Pure: no I/O, no threads.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Any

from precisionbot.builtin.request import LogprobEntry, LogprobParams, Request, SamplingParams
from precisionbot.builtin.tokenizer import Vocab


class BadRequest(ValueError):
    """A client error: HTTP 400 with this message."""


GENERATE_FIELDS = {
    "text", "input_ids", "sampling_params", "return_logprob", "logprob_start_len", "top_logprobs_num",
    "token_ids_logprob", "return_text_in_logprobs", "stream", "rid", "return_routed_experts",
}  # fmt: skip
IGNORED_FIELDS = {
    "image_data", "audio_data", "video_data", "input_embeds", "lora_path", "session_params", "modalities",
    "custom_logit_processor", "return_hidden_states", "log_metrics", "data_parallel_rank", "priority",
    "bootstrap_host", "bootstrap_port", "bootstrap_room", "no_logs", "stream_output",
}  # fmt: skip
"""SGLang fields we accept only when unset (null/false/empty): they ask for things this engine lacks."""
SAMPLING_FIELDS = {
    "max_new_tokens", "temperature", "top_p", "top_k", "min_p", "ignore_eos", "stop", "stop_token_ids",
    "sampling_seed", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim", "n",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "json_schema", "regex",
    "ebnf", "logit_bias", "custom_params",
}  # fmt: skip
_NEUTRAL = {"n": 1, "frequency_penalty": 0, "presence_penalty": 0, "repetition_penalty": 1, "min_new_tokens": 0}


@dataclass(frozen=True)
class GenerateCall:
    requests: list[Request]
    batch: bool
    stream: bool
    text_in_logprobs: bool


def int_field(value: Any, name: str, low: int | None = None, high: int | None = None) -> int:
    """A request field that must be an integer in ``[low, high]`` (``BadRequest`` naming it otherwise); the
    OpenAI-shaped API reads its fields with the same rule."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer (got {value!r})")
    if low is not None and value < low:
        raise BadRequest(f"{name} must be >= {low} (got {value})")
    if high is not None and value > high:
        raise BadRequest(f"{name} must be <= {high} (got {value})")
    return value


def _float(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise BadRequest(f"{name} must be a number (got {value!r})")
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high} (got {value})")
    return float(value)


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false (got {value!r})")
    return value


def _ids(value: Any, name: str, size: int) -> list[int]:
    if not isinstance(value, list):
        raise BadRequest(f"{name} must be a list of token ids")
    return [int_field(v, f"{name}[{i}]", 0, size - 1) for i, v in enumerate(value)]


def _per_item(value: Any, n: int, name: str, batch: bool) -> list[Any]:
    if batch and isinstance(value, list):
        if len(value) != n:
            raise BadRequest(f"{name} is a list of {len(value)} but the batch has {n} prompts")
        return value
    return [value] * n


def sampling_params(raw: Any, name: str, vocab: Vocab) -> SamplingParams:
    """A request's ``sampling_params`` (SGLang's names), validated; the OpenAI-shaped API maps onto the same."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise BadRequest(f"{name} must be an object")
    raw = {k: v for k, v in raw.items() if v is not None}  # null means "the default", as in SGLang
    for key, value in raw.items():
        if key not in SAMPLING_FIELDS:
            raise BadRequest(f"{name}.{key} is not a sampling parameter")
        if key in _NEUTRAL and value is not None and value != _NEUTRAL[key]:
            raise BadRequest(f"{name}.{key}={value!r} is not supported by the builtin engine")
        if key in {"json_schema", "regex", "ebnf", "logit_bias", "custom_params"} and value:
            raise BadRequest(f"{name}.{key} is not supported by the builtin engine")
    stop = raw.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest(f"{name}.stop must be a string or a list of non-empty strings")
    top_k = int_field(raw.get("top_k", -1), f"{name}.top_k", -1, None)
    if top_k == 0:
        raise BadRequest(f"{name}.top_k must be -1 (off) or >= 1 (got 0)")
    seed = raw.get("sampling_seed")
    return SamplingParams(
        max_new_tokens=int_field(raw.get("max_new_tokens", 128), f"{name}.max_new_tokens", 0),
        temperature=_float(raw.get("temperature", 1.0), f"{name}.temperature", 0.0, 100.0),
        top_p=_float(raw.get("top_p", 1.0), f"{name}.top_p", 1e-9, 1.0),
        top_k=top_k,
        min_p=_float(raw.get("min_p", 0.0), f"{name}.min_p", 0.0, 1.0),
        ignore_eos=_bool(raw.get("ignore_eos", False), f"{name}.ignore_eos"),
        stop=tuple(stop),
        stop_token_ids=tuple(_ids(raw.get("stop_token_ids") or [], f"{name}.stop_token_ids", vocab.size)),
        sampling_seed=None if seed is None else int_field(seed, f"{name}.sampling_seed"),
    )


def parse_generate(body: Any, max_context_tokens: int, vocab: Vocab) -> GenerateCall:
    """Validates a ``/generate`` body (``text`` tokenized with ``vocab``); raises ``BadRequest`` naming the field."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    for key, value in body.items():
        if key in IGNORED_FIELDS and value not in (None, False, [], {}, ""):
            raise BadRequest(f"{key} is not supported by the builtin engine")
        if key not in GENERATE_FIELDS and key not in IGNORED_FIELDS:
            raise BadRequest(f"unknown field {key!r} in the /generate request")
    body = {k: v for k, v in body.items() if v is not None}
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise BadRequest("give exactly one of text or input_ids")
    prompts: list[list[int]]
    if text is not None:
        batch = isinstance(text, list)
        texts = text if batch else [text]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise BadRequest("text must be a string or a non-empty list of strings")
        prompts = [vocab.encode(t) for t in texts]
    else:
        if not isinstance(ids, list) or not ids:
            raise BadRequest("input_ids must be a non-empty list of token ids (or a list of such lists)")
        batch = isinstance(ids[0], list)
        prompts = (
            [_ids(p, f"input_ids[{i}]", vocab.size) for i, p in enumerate(ids)]
            if batch
            else [_ids(ids, "input_ids", vocab.size)]
        )
    n = len(prompts)
    sps = _per_item(body.get("sampling_params"), n, "sampling_params", batch)
    ret = _per_item(body.get("return_logprob", False), n, "return_logprob", batch)
    starts = _per_item(body.get("logprob_start_len", -1), n, "logprob_start_len", batch)
    tops = _per_item(body.get("top_logprobs_num", 0), n, "top_logprobs_num", batch)
    tid = body.get("token_ids_logprob")
    tids = tid if batch and isinstance(tid, list) and tid and isinstance(tid[0], list) else [tid] * n
    if len(tids) != n:
        raise BadRequest(f"token_ids_logprob is a list of {len(tids)} but the batch has {n} prompts")
    stream = _bool(body.get("stream", False), "stream")
    text_in = _bool(body.get("return_text_in_logprobs", False), "return_text_in_logprobs")
    routed = _bool(body.get("return_routed_experts", False), "return_routed_experts")
    rid = body.get("rid")
    requests = []
    for i, prompt in enumerate(prompts):
        where = f"[{i}]" if batch else ""
        if not prompt:
            raise BadRequest(f"prompt{where} is empty")
        sampling = sampling_params(sps[i], f"sampling_params{where}", vocab)
        if len(prompt) + sampling.max_new_tokens > max_context_tokens:
            raise BadRequest(
                f"prompt{where} ({len(prompt)} tokens) + max_new_tokens ({sampling.max_new_tokens}) exceeds "
                f"the context length {max_context_tokens}"
            )
        start = int_field(starts[i], f"logprob_start_len{where}", -1, len(prompt) - 1)
        lp = LogprobParams(
            return_logprob=_bool(ret[i], f"return_logprob{where}"),
            logprob_start_len=len(prompt) - 1 if start == -1 else start,
            top_logprobs_num=int_field(tops[i], f"top_logprobs_num{where}", 0, vocab.size),
            token_ids_logprob=tuple(_ids(tids[i] or [], f"token_ids_logprob{where}", vocab.size)),
        )
        item_rid = rid[i] if batch and isinstance(rid, list) else rid
        name = str(item_rid) if isinstance(item_rid, (str, int)) else uuid.uuid4().hex
        requests.append(Request(name, prompt, sampling, lp, stream=stream, return_routed_experts=routed))
    return GenerateCall(requests, batch, stream, text_in)


def _entries(items: list[LogprobEntry], text: Vocab | None) -> list[list[Any]]:
    return [[lp, tid, text.token_text(tid) if text is not None else None] for lp, tid in items]


def output_text(req: Request, vocab: Vocab) -> str:
    text = vocab.decode(req.output_ids)
    reason = req.finish_reason or {}
    matched = reason.get("matched")
    if isinstance(matched, str) and matched in text:
        text = text[: text.index(matched)]
    return text


def response(req: Request, text_in_logprobs: bool, now: float, vocab: Vocab) -> dict[str, Any]:
    """The answer for one request (also each streamed chunk, with what is known so far)."""
    texts = vocab if text_in_logprobs else None
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": req.finish_reason,
        "prompt_tokens": len(req.input_ids),
        "completion_tokens": len(req.output_ids),
        "cached_tokens": req.cached_tokens,
        "e2e_latency": (req.finished_at or now) - req.created,
    }
    if req.logprob.return_logprob:
        n_out = len(req.output_ids)
        meta["input_token_logprobs"] = _entries(req.input_logprobs, texts)
        meta["output_token_logprobs"] = _entries(req.output_logprobs[:n_out], texts)
        meta["input_top_logprobs"] = [None if top is None else _entries(top, texts) for top in req.input_top]
        meta["output_top_logprobs"] = [_entries(top, texts) for top in req.output_top[:n_out]]
        if req.logprob.token_ids_logprob:
            meta["input_token_ids_logprob"] = [None if c is None else _entries(c, texts) for c in req.input_ids_lp]
            meta["output_token_ids_logprob"] = [_entries(c, texts) for c in req.output_ids_lp[:n_out]]
    if req.spec_counts is not None:
        # SGLang's per-request speculative counters (its accept length counts every output token per verify).
        verify, drafts, accepted = req.spec_counts
        meta["spec_verify_ct"] = verify
        meta["spec_draft_token_num"] = drafts
        meta["spec_accept_token_num"] = accepted
        meta["spec_accept_length"] = len(req.output_ids) / verify if verify else 0.0
    if req.routed_experts is not None:
        # SGLang's encoding: base64 of the int32 ids, flattened from [seqlen - 1, layers, top_k].
        meta["routed_experts"] = base64.b64encode(req.routed_experts.numpy().astype("<i4").tobytes()).decode("ascii")
    return {"text": output_text(req, vocab), "output_ids": list(req.output_ids), "meta_info": meta}
