"""Strict validation of SGLang ``/generate`` answers into ``Generation`` (pure).

Every problem is an ``EngineError`` naming the request index and the field, e.g.
``request 5: meta_info.output_token_logprobs has 31 entries, expected 32 (completion_tokens)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from precisionbot.engines.base import GenerateRequest, Generation, TopLogprobs
from precisionbot.errors import EngineError


def _fail(index: int, field: str, problem: str) -> EngineError:
    return EngineError(f"engine answer to request {index}: {field} {problem}")


MAX_INT = 2**53
"""Counts and ids beyond this are not what an engine sends (and overflow NumPy's fixed-width integers)."""


def _int(value: Any, index: int, field: str, minimum: int = 0, maximum: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        shown = f"an integer of {value.bit_length()} bits" if isinstance(value, int) else repr(str(value)[:40])
        raise _fail(index, field, f"must be an integer >= {minimum} and <= {maximum} (got {shown})")
    return value


def logprob(value: Any, index: int, field: str, allow_none: bool = False) -> float:
    """One logprob from an engine answer, checked: a number <= 0 (1e-3 of rounding allowed), not NaN or inf."""
    if value is None:
        if allow_none:
            return math.nan
        raise _fail(index, field, "is null where a logprob belongs")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(index, field, f"is not a number (got {str(value)[:40]!r})")
    try:
        f = float(value)
    except OverflowError:
        raise _fail(index, field, "is not a valid logprob (a number out of range)") from None
    # A logprob is <= 0; allow float rounding just above it (log_softmax of a dominant logit).
    if math.isnan(f) or f > 1e-3 or f == math.inf:
        raise _fail(index, field, f"is not a valid logprob (got {f!r})")
    return f


def _entries(
    raw: Any, index: int, field: str, expected: int, first_may_be_none: bool
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], tuple[str | None, ...]]:
    """``[[logprob, token_id, text|null], ...]`` → (logprobs, ids, texts), checked entry by entry."""
    if not isinstance(raw, list):
        raise _fail(index, field, f"is missing or not a list (got {type(raw).__name__})")
    if len(raw) != expected:
        raise _fail(index, field, f"has {len(raw)} entries, expected {expected}")
    fast = _entries_fast(raw, first_may_be_none)
    if fast is not None:
        return fast
    # Something is wrong (or unusual): the slow path names the entry and the problem.
    lps = np.empty(expected, dtype=np.float64)
    ids = np.empty(expected, dtype=np.int32)
    texts: list[str | None] = []
    for j, entry in enumerate(raw):
        where = f"{field}[{j}]"
        if not isinstance(entry, (list, tuple)) or len(entry) < 2:
            raise _fail(index, where, f"is not a [logprob, token_id, text] entry (got {str(entry)[:40]!r})")
        lps[j] = logprob(entry[0], index, where, allow_none=first_may_be_none and j == 0)
        ids[j] = _int(entry[1], index, f"{where} token id", maximum=_INT32_MAX)
        text = entry[2] if len(entry) > 2 else None
        texts.append(text if isinstance(text, str) else None)
    return lps, ids, tuple(texts)


_NUMBER_TYPES = frozenset({float, int})
_INT32_MAX = int(np.iinfo(np.int32).max)


def _entries_fast(
    raw: list[Any], first_may_be_none: bool
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], tuple[str | None, ...]] | None:
    """Vectorised validation of well-formed entries (replays carry thousands); None = use the slow path."""
    try:
        lps = [e[0] for e in raw]
        ids = [e[1] for e in raw]
        texts = tuple(e[2] if len(e) > 2 and isinstance(e[2], str) else None for e in raw)
    except (TypeError, IndexError, KeyError):
        return None
    head = 1 if first_may_be_none and lps and lps[0] is None else 0
    if {type(x) for x in lps[head:]} - _NUMBER_TYPES or {type(x) for x in ids} - {int}:
        return None
    try:
        lp = np.array([math.nan] * head + lps[head:], dtype=np.float64)
        tok = np.array(ids, dtype=np.int64)
    except OverflowError:
        return None
    body = lp[head:]
    if np.isnan(body).any() or (body > 1e-3).any() or (tok < 0).any() or (tok > _INT32_MAX).any():
        return None
    return lp, tok.astype(np.int32), texts


def _empty_top_row(row: Any) -> bool:
    """Position 0 has no prediction: its top-k row is null or entries with null logprobs."""
    return row is None or (isinstance(row, list) and all(isinstance(e, list) and e and e[0] is None for e in row))


def _top(raw: Any, index: int, field: str, expected: int, k: int, first_may_be_none: bool) -> TopLogprobs:
    if not isinstance(raw, list) or len(raw) != expected:
        got = f"{len(raw)} rows" if isinstance(raw, list) else type(raw).__name__
        raise _fail(index, field, f"must have {expected} rows (got {got})")
    ids = np.full((expected, k), -1, dtype=np.int32)
    lps = np.full((expected, k), np.nan, dtype=np.float64)
    head = 1 if first_may_be_none and raw and _empty_top_row(raw[0]) else 0
    rows = raw[head:]
    if all(type(row) is list and len(row) == k for row in rows):
        fast = _entries_fast([e for row in rows for e in row], False)
        if fast is not None:
            flat_lp, flat_ids = fast[0].reshape(-1, k), fast[1].reshape(-1, k)
            order = np.argsort(-flat_lp, axis=1, kind="stable")
            ids[head:] = np.take_along_axis(flat_ids, order, axis=1)
            lps[head:] = np.take_along_axis(flat_lp, order, axis=1)
            return TopLogprobs(ids=ids, logprobs=lps)
    for j, row in enumerate(raw):
        if row is None and first_may_be_none and j == 0:
            continue
        if not isinstance(row, list) or len(row) != k:
            got = f"{len(row)} entries" if isinstance(row, list) else repr(row)[:40]
            raise _fail(index, f"{field}[{j}]", f"must list {k} top tokens (got {got})")
        if first_may_be_none and j == 0 and all(isinstance(e, list) and e and e[0] is None for e in row):
            continue
        row_lp, row_ids, _ = _entries(row, index, f"{field}[{j}]", k, first_may_be_none=False)
        order = np.argsort(-row_lp, kind="stable")
        ids[j], lps[j] = row_ids[order], row_lp[order]
    return TopLogprobs(ids=ids, logprobs=lps)


def parse_generation(answer: Any, request: GenerateRequest, index: int) -> Generation:
    """Validate one item of a ``/generate`` answer against the request that produced it."""
    if not isinstance(answer, Mapping):
        raise _fail(index, "answer", f"is not a JSON object (got {type(answer).__name__})")
    meta = answer.get("meta_info")
    if not isinstance(meta, Mapping):
        raise _fail(index, "meta_info", "is missing")
    prompt_tokens = _int(meta.get("prompt_tokens"), index, "meta_info.prompt_tokens", minimum=1)
    if prompt_tokens != len(request.input_ids):
        raise _fail(index, "meta_info.prompt_tokens", f"is {prompt_tokens}, but {len(request.input_ids)} were sent")
    completion = _int(meta.get("completion_tokens"), index, "meta_info.completion_tokens")
    if completion > request.max_new_tokens or (request.ignore_eos and completion != request.max_new_tokens):
        raise _fail(
            index,
            "meta_info.completion_tokens",
            f"is {completion}, expected {request.max_new_tokens} (max_new_tokens with ignore_eos)",
        )
    cached = meta.get("cached_tokens", 0)
    cached = _int(0 if cached is None else cached, index, "meta_info.cached_tokens")
    if cached > prompt_tokens:
        raise _fail(index, "meta_info.cached_tokens", f"is {cached}, more than the {prompt_tokens} prompt tokens")

    out_lp, out_ids, out_text = _entries(
        meta.get("output_token_logprobs"), index, "meta_info.output_token_logprobs", completion, False
    )
    output_ids = answer.get("output_ids")
    if output_ids is not None and (not isinstance(output_ids, list) or output_ids != out_ids.tolist()):
        raise _fail(index, "output_ids", "disagree with the token ids in meta_info.output_token_logprobs")
    start = request.logprob_start_len
    if start >= 0:
        expected = prompt_tokens - start
        in_lp, in_ids, in_text = _entries(
            meta.get("input_token_logprobs"), index, "meta_info.input_token_logprobs", expected, True
        )
        if in_ids.tolist() != list(request.input_ids[start:]):
            raise _fail(index, "meta_info.input_token_logprobs", "token ids differ from the prompt that was sent")
    else:
        in_lp, in_ids, in_text = np.empty(0), np.empty(0, dtype=np.int32), ()
    input_top = output_top = None
    if request.top_logprobs_num > 0:
        k = request.top_logprobs_num
        output_top = _top(meta.get("output_top_logprobs"), index, "meta_info.output_top_logprobs", completion, k, False)
        if start >= 0:
            input_top = _top(meta.get("input_top_logprobs"), index, "meta_info.input_top_logprobs", len(in_lp), k, True)
    latency = meta.get("e2e_latency")
    return Generation(
        input_ids=request.input_ids,
        output_ids=tuple(int(t) for t in out_ids),
        prompt_tokens=prompt_tokens,
        cached_tokens=cached,
        input_token_ids=in_ids,
        input_logprobs=in_lp,
        output_logprobs=out_lp,
        input_top=input_top,
        output_top=output_top,
        input_token_text=in_text if request.return_text else (),
        output_token_text=out_text if request.return_text else (),
        e2e_latency_s=float(latency) if isinstance(latency, (int, float)) and not isinstance(latency, bool) else None,
    )


def parse_batch(answer: Any, requests: Sequence[GenerateRequest], first_index: int) -> list[Generation]:
    """A batch answer must be a list of exactly ``len(requests)`` items, in request order."""
    if isinstance(answer, Mapping) and len(requests) == 1:
        answer = [answer]
    if not isinstance(answer, list):
        raise EngineError(
            f"engine answer to requests {first_index}..{first_index + len(requests) - 1}: expected a JSON list "
            f"of {len(requests)} results, got {type(answer).__name__}"
        )
    if len(answer) != len(requests):
        raise EngineError(
            f"engine answer to requests {first_index}..{first_index + len(requests) - 1}: the batch answer has "
            f"{len(answer)} results for {len(requests)} prompts"
        )
    return [parse_generation(a, r, first_index + i) for i, (a, r) in enumerate(zip(answer, requests, strict=True))]
