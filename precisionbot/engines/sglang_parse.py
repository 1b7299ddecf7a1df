"""Strict validation of SGLang ``/generate`` answers into ``Generation`` (pure).

Every problem is an ``EngineError`` naming the request index and the field, e.g.
``request 5: meta_info.output_token_logprobs has 31 entries, expected 32 (completion_tokens)``.

Speed (``parse_batch_bytes``): against a GPU engine, reading its answers is most of the client's time, and
nearly all of it is the per-position ``[logprob, token_id, text]`` entries. They are decoded by msgspec into
typed entries (types checked in C, untracked by the garbage collector) with the collector paused while a
batch is read: the lists a decoder creates otherwise trigger collections that rescan everything already read,
which measured as half the decoding time. The columns then become numpy arrays with no per-position work in
Python beyond one list comprehension per column, and the checks that remain (null only at prompt position 0,
logprob <= 0, ids in range) are vectorised. Anything unusual falls back to the general path below, entry by
entry, which names the request and the entry.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from precisionbot.engines import jsoncodec
from precisionbot.engines.base import GenerateRequest, Generation, TopLogprobs
from precisionbot.engines.logprobs import answer_error, logprob
from precisionbot.errors import EngineError


class _Entry(msgspec.Struct, array_like=True, gc=False):
    """One ``[logprob, token_id, ...]`` entry, typed: msgspec rejects a string, bool or float id in C. Elements
    after the id (the text) are skipped without creating a string: the text is only kept where a request
    asked for it (``_TextEntry``), and never for top-k rows (nothing shows them)."""

    logprob: float | None
    token_id: int


class _TextEntry(msgspec.Struct, array_like=True, gc=False):
    logprob: float | None
    token_id: int
    text: str | None = None


_SPEC_DRAFT_NAMES = (
    ("spec_draft_token_num", "spec_accept_token_num"),
    ("spec_num_proposed_drafts", "spec_num_correct_drafts"),
)
"""SGLang's per-request (drafted, accepted) counts, by release."""
_SPEC_FIELDS = ("spec_verify_ct", *(name for pair in _SPEC_DRAFT_NAMES for name in pair))


def _answer_type(entry: type, input_entry: Any = None, input_row: Any = None) -> Any:
    """The typed answer: ``entry`` for the token logprobs; the input positions' entries and top-k rows may
    be given other types (``msgspec.Raw``: left as their bytes)."""
    meta = msgspec.defstruct(
        "_Meta",
        [
            ("prompt_tokens", Any, None),
            ("completion_tokens", Any, None),
            ("cached_tokens", Any, None),
            ("e2e_latency", Any, None),
            ("input_token_logprobs", list[input_entry or entry] | None, None),  # type: ignore[misc]
            ("output_token_logprobs", list[entry] | None, None),  # type: ignore[valid-type]
            ("input_top_logprobs", list[input_row or list[_Entry] | None] | None, None),  # type: ignore[misc]
            ("output_top_logprobs", list[list[_Entry] | None] | None, None),
            ("routed_experts", Any, None),
            *((name, Any, None) for name in _SPEC_FIELDS),
        ],
        gc=False,
    )
    answer = msgspec.defstruct("_Answer", [("meta_info", meta), ("output_ids", Any, None)], gc=False)
    return answer


_ANSWER = {False: _answer_type(_Entry), True: _answer_type(_TextEntry)}
_DECODERS = {text: msgspec.json.Decoder(list[a] | a) for text, a in _ANSWER.items()}  # type: ignore[valid-type]
_SKIMMED = _answer_type(_TextEntry, msgspec.Raw, msgspec.Raw)
"""The answer with each input position's entry and top-k row left as its raw bytes (read later, if at all)."""
_SKIM_DECODER = msgspec.json.Decoder(list[_SKIMMED] | _SKIMMED)  # type: ignore[valid-type]
_ENTRY_ROWS: dict[bool, msgspec.json.Decoder[Any]] = {
    False: msgspec.json.Decoder(list[_Entry]),
    True: msgspec.json.Decoder(list[_TextEntry]),
}
_TOP_ROWS = msgspec.json.Decoder(list[list[_Entry] | None])
_TYPED = (_Entry, _TextEntry)
_META_FIELDS = (
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "e2e_latency",
    "input_token_logprobs",
    "output_token_logprobs",
    "input_top_logprobs",
    "output_top_logprobs",
    "routed_experts",
    *_SPEC_FIELDS,
)


def decode_answer(content: bytes, what: str, texts: bool = True, skim: bool = False) -> Any:
    """A ``/generate`` answer: typed entries when it has the usual shape, plain JSON values otherwise.
    ``texts=False`` skips the token texts (nothing asked for them); ``skim=True`` leaves each input position
    as its raw bytes, for ``parse_generation`` to read only the positions a request's ``read_from`` wants."""
    try:
        return (_SKIM_DECODER if skim else _DECODERS[texts]).decode(content)
    except msgspec.DecodeError:  # not the usual shape (or not strict JSON): the general path explains it
        return jsoncodec.decode(content, what)


def _plain(answer: Any) -> Any:
    """A typed answer as the mapping the validation reads (entries stay typed; fields the engine left out
    read as null, as they would from a mapping)."""
    if not isinstance(answer, (_ANSWER[False], _ANSWER[True], _SKIMMED)):
        return answer
    m = answer.meta_info
    return {"meta_info": {f: getattr(m, f) for f in _META_FIELDS}, "output_ids": answer.output_ids}


def _as_lists(raw: list[Any]) -> list[Any]:
    """Typed entries back as ``[logprob, token_id, text]`` lists, for the entry-by-entry path."""
    return [[e.logprob, e.token_id, getattr(e, "text", None)] if isinstance(e, _TYPED) else e for e in raw]


MAX_INT = 2**53
"""Counts and ids beyond this are not what an engine sends (and overflow NumPy's fixed-width integers)."""


def _int(value: Any, index: int, field: str, minimum: int = 0, maximum: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        shown = f"an integer of {value.bit_length()} bits" if isinstance(value, int) else repr(str(value)[:40])
        raise answer_error(index, field, f"must be an integer >= {minimum} and <= {maximum} (got {shown})")
    return value


def _entries(
    raw: Any, index: int, field: str, expected: int, first_may_be_none: bool, want_text: bool = True
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], tuple[str | None, ...]]:
    """``[[logprob, token_id, text|null], ...]`` → (logprobs, ids, texts), checked entry by entry."""
    if not isinstance(raw, list):
        raise answer_error(index, field, f"is missing or not a list (got {type(raw).__name__})")
    if len(raw) != expected:
        raise answer_error(index, field, f"has {len(raw)} entries, expected {expected}")
    if raw and isinstance(raw[0], _TYPED):
        typed = _typed_columns(raw, first_may_be_none, want_text)
        if typed is not None:
            return typed
        raw = _as_lists(raw)
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
            raise answer_error(index, where, f"is not a [logprob, token_id, text] entry (got {str(entry)[:40]!r})")
        lps[j] = logprob(entry[0], index, where, allow_none=first_may_be_none and j == 0)
        ids[j] = _int(entry[1], index, f"{where} token id", maximum=_INT32_MAX)
        text = entry[2] if len(entry) > 2 else None
        texts.append(text if isinstance(text, str) else None)
    return lps, ids, tuple(texts)


_NUMBER_TYPES = frozenset({float, int})
_INT32_MAX = int(np.iinfo(np.int32).max)


def _checked(
    lps: list[Any], ids: list[Any], first_may_be_none: bool
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
    """Columns of numbers as arrays, checked at once: None only at position 0 (when allowed), every logprob
    a finite number <= 0 (1e-3 of rounding allowed), every id in int32; None = let the slow path explain."""
    try:
        lp = np.array(lps, dtype=np.float64)  # a None becomes NaN: only position 0 may have one
        tok = np.array(ids, dtype=np.int64)
    except (OverflowError, TypeError, ValueError):
        return None
    if lp.shape != (len(lps),) or tok.shape != (len(ids),):
        return None
    body = lp[1:] if first_may_be_none and lps and lps[0] is None else lp
    if np.isnan(body).any() or (body > 1e-3).any():
        return None
    if tok.size and (int(tok.min()) < 0 or int(tok.max()) > _INT32_MAX):
        return None
    return lp, tok.astype(np.int32)


def _typed_columns(
    raw: list[Any], first_may_be_none: bool, want_text: bool
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], tuple[str | None, ...]] | None:
    """Typed entries (types already checked by msgspec) as columns; None = use the slow path."""
    arrays = _checked([e.logprob for e in raw], [e.token_id for e in raw], first_may_be_none)
    if arrays is None:
        return None
    if want_text and type(raw[0]) is _TextEntry:
        return arrays[0], arrays[1], tuple([e.text for e in raw])
    return arrays[0], arrays[1], (None,) * len(raw) if want_text else ()


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
    if isinstance(row, list) and row and isinstance(row[0], _TYPED):
        return all(e.logprob is None for e in row)
    return row is None or (isinstance(row, list) and all(isinstance(e, list) and e and e[0] is None for e in row))


def _sorted_rows(
    flat_lp: np.ndarray[Any, Any], flat_ids: np.ndarray[Any, Any], k: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Rows by descending logprob (stable); engines send them sorted, so usually nothing moves."""
    lp, ids = flat_lp.reshape(-1, k), flat_ids.reshape(-1, k)
    if k > 1 and (lp[:, 1:] > lp[:, :-1]).any():
        order = np.argsort(-lp, axis=1, kind="stable")
        return np.take_along_axis(lp, order, axis=1), np.take_along_axis(ids, order, axis=1)
    return lp, ids


def _top(raw: Any, index: int, field: str, expected: int, k: int, first_may_be_none: bool) -> TopLogprobs:
    if not isinstance(raw, list) or len(raw) != expected:
        got = f"{len(raw)} rows" if isinstance(raw, list) else type(raw).__name__
        raise answer_error(index, field, f"must have {expected} rows (got {got})")
    ids = np.full((expected, k), -1, dtype=np.int32)
    lps = np.full((expected, k), np.nan, dtype=np.float64)
    head = 1 if first_may_be_none and raw and _empty_top_row(raw[0]) else 0
    rows = raw[head:]
    if not rows or (set(map(type, rows)) == {list} and set(map(len, rows)) == {k}):
        flat = list(itertools.chain.from_iterable(rows))
        if flat and isinstance(flat[0], _TYPED):
            columns = _checked([e.logprob for e in flat], [e.token_id for e in flat], False)
        else:
            fast = _entries_fast(flat, False)
            columns = None if fast is None else (fast[0], fast[1])
        if columns is not None:
            lps[head:], ids[head:] = _sorted_rows(columns[0], columns[1], k)
            return TopLogprobs(ids=ids, logprobs=lps)
    raw = [_as_lists(row) if isinstance(row, list) else row for row in raw]
    for j, row in enumerate(raw):
        if row is None and first_may_be_none and j == 0:
            continue
        if not isinstance(row, list) or len(row) != k:
            got = f"{len(row)} entries" if isinstance(row, list) else repr(row)[:40]
            raise answer_error(index, f"{field}[{j}]", f"must list {k} top tokens (got {got})")
        if first_may_be_none and j == 0 and all(isinstance(e, list) and e and e[0] is None for e in row):
            continue
        row_lp, row_ids, _ = _entries(row, index, f"{field}[{j}]", k, first_may_be_none=False)
        order = np.argsort(-row_lp, kind="stable")
        ids[j], lps[j] = row_ids[order], row_lp[order]
    return TopLogprobs(ids=ids, logprobs=lps)


def _read_from(raw: Any, index: int, field: str, expected: int, skip: int, rows: msgspec.json.Decoder[Any]) -> Any:
    """The positions from ``skip`` on of a per-position list of ``expected``, to validate; the others are
    only counted. A skimmed answer's positions are raw bytes: only those read are decoded (``rows``)."""
    if not isinstance(raw, list) or (skip == 0 and not (raw and isinstance(raw[0], msgspec.Raw))):
        return raw  # not skimmed and nothing skipped: validated as it is
    if len(raw) != expected:
        raise answer_error(index, field, f"has {len(raw)} entries, expected {expected}")
    tail = raw[skip:]
    if not tail or not isinstance(tail[0], msgspec.Raw):
        return tail
    joined = b"[" + b",".join(tail) + b"]"
    try:
        return rows.decode(joined)
    except msgspec.DecodeError:  # not the usual shape: the general path names the entry
        return jsoncodec.decode(joined, f"engine answer to request {index}: {field}")


def _label(field: str, skip: int) -> str:
    """The field's name in an error about the positions read from ``skip`` on (indices count from there)."""
    return f"{field}[{skip}:]" if skip else field


def parse_generation(answer: Any, request: GenerateRequest, index: int) -> Generation:
    """Validate one item of a ``/generate`` answer against the request that produced it."""
    answer = _plain(answer)
    if not isinstance(answer, Mapping):
        raise answer_error(index, "answer", f"is not a JSON object (got {type(answer).__name__})")
    meta = answer.get("meta_info")
    if not isinstance(meta, Mapping):
        raise answer_error(index, "meta_info", "is missing")
    prompt_tokens = _int(meta.get("prompt_tokens"), index, "meta_info.prompt_tokens", minimum=1)
    if prompt_tokens != len(request.input_ids):
        raise answer_error(
            index, "meta_info.prompt_tokens", f"is {prompt_tokens}, but {len(request.input_ids)} were sent"
        )
    completion = _int(meta.get("completion_tokens"), index, "meta_info.completion_tokens")
    if completion > request.max_new_tokens or (request.ignore_eos and completion != request.max_new_tokens):
        raise answer_error(
            index,
            "meta_info.completion_tokens",
            f"is {completion}, expected {request.max_new_tokens} (max_new_tokens with ignore_eos)",
        )
    cached = meta.get("cached_tokens", 0)
    cached = _int(0 if cached is None else cached, index, "meta_info.cached_tokens")
    if cached > prompt_tokens:
        raise answer_error(
            index, "meta_info.cached_tokens", f"is {cached}, more than the {prompt_tokens} prompt tokens"
        )

    out_lp, out_ids, out_text = _entries(
        meta.get("output_token_logprobs"),
        index,
        "meta_info.output_token_logprobs",
        completion,
        False,
        want_text=request.return_text,
    )
    output_ids = answer.get("output_ids")
    if output_ids is not None and (not isinstance(output_ids, list) or output_ids != out_ids.tolist()):
        raise answer_error(index, "output_ids", "disagree with the token ids in meta_info.output_token_logprobs")
    start = request.logprob_start_len
    skip = 0  # input positions counted but not read (before ``read_from``)
    if start >= 0:
        expected = prompt_tokens - start
        skip = request.unread(expected)
        field = "meta_info.input_token_logprobs"
        rows = _read_from(
            meta.get("input_token_logprobs"), index, field, expected, skip, _ENTRY_ROWS[request.return_text]
        )
        in_lp, in_ids, in_text = _entries(
            rows, index, _label(field, skip), expected - skip, skip == 0, want_text=request.return_text
        )
        if in_ids.tolist() != list(request.input_ids[start + skip :]):
            raise answer_error(index, field, "token ids differ from the prompt that was sent")
        if skip:
            in_lp = np.concatenate([np.full(skip, np.nan), in_lp])
            in_ids = np.concatenate([np.asarray(request.input_ids[start : start + skip], dtype=np.int32), in_ids])
            in_text = (None,) * skip + in_text if request.return_text else in_text
    else:
        in_lp, in_ids, in_text = np.empty(0), np.empty(0, dtype=np.int32), ()
    input_top = output_top = None
    if request.top_logprobs_num > 0:
        k = request.top_logprobs_num
        output_top = _top(meta.get("output_top_logprobs"), index, "meta_info.output_top_logprobs", completion, k, False)
        if start >= 0:
            field = "meta_info.input_top_logprobs"
            rows = _read_from(meta.get("input_top_logprobs"), index, field, len(in_lp), skip, _TOP_ROWS)
            input_top = _top(rows, index, _label(field, skip), len(in_lp) - skip, k, skip == 0)
            if skip:
                ids = np.full((len(in_lp), k), -1, dtype=np.int32)
                lps = np.full((len(in_lp), k), np.nan, dtype=np.float64)
                ids[skip:], lps[skip:] = input_top.ids, input_top.logprobs
                input_top = TopLogprobs(ids=ids, logprobs=lps)
    latency = meta.get("e2e_latency")
    return Generation(
        input_ids=request.input_ids,
        output_ids=tuple(out_ids.tolist()),
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
        routed_experts=_routed(meta.get("routed_experts"), index, prompt_tokens + completion - 1)
        if request.return_routed_experts
        else None,
        spec_counts=_spec_counts(meta, index),
    )


def _spec_counts(meta: Mapping[str, Any], index: int) -> tuple[int, int, int] | None:
    """SGLang's per-request speculative counters (verify steps, drafted, accepted), under either of its names
    for the draft counts (``spec_draft_token_num`` / ``spec_accept_token_num``, newer releases'
    ``spec_num_proposed_drafts`` / ``spec_num_correct_drafts``); None when the answer has no verify count or
    no draft counts (a server without speculation, or a release that reports only ``spec_verify_ct``)."""
    verify = meta.get("spec_verify_ct")
    if verify is None:
        return None
    names = next(
        (pair for pair in _SPEC_DRAFT_NAMES if meta.get(pair[0]) is not None and meta.get(pair[1]) is not None), None
    )
    if names is None:
        return None
    counts = (
        _int(verify, index, "meta_info.spec_verify_ct"),
        _int(meta[names[0]], index, f"meta_info.{names[0]}"),
        _int(meta[names[1]], index, f"meta_info.{names[1]}"),
    )
    if counts[2] > counts[1]:
        raise answer_error(index, f"meta_info.{names[1]}", f"is {counts[2]}, more than the {counts[1]} drafted")
    return counts


def _routed(value: Any, index: int, tokens: int) -> npt.NDArray[np.int32] | None:
    """SGLang's ``meta_info.routed_experts``: base64 of int32 ids, ``tokens`` rows of layers x top_k; None when
    the engine left it out (a dense model, or a server without ``--enable-return-routed-experts``)."""
    if value is None:
        return None
    field = "meta_info.routed_experts"
    if not isinstance(value, str):
        raise answer_error(index, field, f"is not a base64 string (got {type(value).__name__})")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise answer_error(index, field, f"is not valid base64 ({exc})") from None
    if len(raw) % 4 or tokens < 1 or (len(raw) // 4) % tokens:
        raise answer_error(index, field, f"has {len(raw)} bytes, not int32 rows for {tokens} tokens")
    return np.frombuffer(raw, dtype="<i4").astype(np.int32).reshape(tokens, -1)


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


def parse_batch_bytes(
    content: bytes, requests: Sequence[GenerateRequest], first_index: int, what: str
) -> list[Generation]:
    """``parse_batch`` of an answer's bytes: the typed decode when it has the usual shape (see the module)."""
    skim = any(0 <= r.logprob_start_len < r.read_from for r in requests)
    with jsoncodec.gc_paused():
        answer = decode_answer(content, what, texts=any(r.return_text for r in requests), skim=skim)
        generations = parse_batch(answer, requests, first_index)
        # Freed while the collector is still off, so it never scans the decoded entries on its way out.
        del answer
    return generations


def parse_token_ids(answer: Any, count: int, first_index: int) -> tuple[list[tuple[int, ...]], float]:
    """The token ids of a tokenizing ``/generate`` answer (``input_token_logprobs`` from position 0) for
    ``count`` texts, and the engine's latency for the batch (the largest it reports)."""
    if not isinstance(answer, list):
        raise EngineError("tokenize: /generate did not answer one result per text")
    items = [_plain(a) for a in answer]
    metas = [a.get("meta_info") if isinstance(a, Mapping) else None for a in items]
    latencies = [m.get("e2e_latency") for m in metas if isinstance(m, Mapping)]
    latency = max((float(x) for x in latencies if isinstance(x, (int, float)) and not isinstance(x, bool)), default=0.0)
    if len(items) != count:
        raise EngineError("tokenize: /generate did not answer one result per text")
    out: list[tuple[int, ...]] = []
    for i, meta in enumerate(metas):
        entries = meta.get("input_token_logprobs") if isinstance(meta, Mapping) else None
        if not isinstance(entries, list) or not entries:
            raise EngineError(f"tokenize: answer {first_index + i} has no meta_info.input_token_logprobs")
        if isinstance(entries[0], _TYPED):
            ids = tuple([e.token_id for e in entries])
        else:
            try:
                ids = tuple(int(e[1]) for e in entries)
            except (TypeError, ValueError, IndexError) as exc:
                raise EngineError(f"tokenize: answer {first_index + i} has malformed input_token_logprobs") from exc
        if meta is not None and meta.get("prompt_tokens") not in (None, len(ids)):
            raise EngineError(f"tokenize: answer {first_index + i}: prompt_tokens disagrees with the token list")
        out.append(ids)
    return out, latency
