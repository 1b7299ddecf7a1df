"""Pure validation of ``/generate`` answers: any single corruption of a valid answer is an EngineError."""

from __future__ import annotations

import copy
import gc
import json
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precisionbot.engines.base import GenerateRequest, Generation
from precisionbot.engines.sglang_parse import (
    decode_answer,
    parse_batch,
    parse_batch_bytes,
    parse_generation,
    parse_token_ids,
)
from precisionbot.errors import EngineError
from tests.support.fake_sglang import Behaviour, FakeState

REQUEST = GenerateRequest((1, 5, 9, 13, 17, 21), max_new_tokens=4, logprob_start_len=0, top_logprobs_num=2)


def _valid() -> dict[str, Any]:
    return FakeState(Behaviour()).one(list(REQUEST.input_ids), {"max_new_tokens": 4}, 0, 2, False)


def test_valid_answer_parses() -> None:
    g = parse_generation(_valid(), REQUEST, 0)
    assert len(g.output_ids) == 4 and len(g.input_logprobs) == 6
    assert g.input_top is not None and (g.input_top.ids[0] == -1).all()  # position 0 has no top-k


FIELDS = ["input_token_logprobs", "output_token_logprobs", "input_top_logprobs", "output_top_logprobs"]
BAD_VALUES = [None, float("nan"), float("inf"), 0.5, "x", True]


def _corrupted(field: str, row: int, how: str, bad: Any) -> dict[str, Any]:
    """A valid answer with one corruption: a row dropped or duplicated, a value or id replaced, a bad entry."""
    answer = copy.deepcopy(_valid())
    rows = answer["meta_info"][field]
    top = "top" in field
    if how == "drop":
        del rows[row]
    elif how == "dup":
        rows.insert(row, copy.deepcopy(rows[row]))
    elif how == "value":
        (rows[row][0] if top else rows[row])[0] = bad
    elif how == "id":
        (rows[row][0] if top else rows[row])[1] = -3 if bad is None else bad
    else:
        rows[row] = bad
    return answer


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(FIELDS),
    row=st.integers(1, 3),
    how=st.sampled_from(["drop", "dup", "value", "id", "entry"]),
    bad=st.sampled_from(BAD_VALUES),
)
def test_any_single_corruption_is_an_error(field: str, row: int, how: str, bad: Any) -> None:
    answer = _corrupted(field, row, how, bad)
    with pytest.raises(EngineError, match=r"request 7: "):
        parse_generation(answer, REQUEST, 7)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("prompt_tokens", 5, "meta_info.prompt_tokens is 5, but 6 were sent"),
        ("completion_tokens", 3, "meta_info.completion_tokens is 3, expected 4"),
        ("cached_tokens", 9, "meta_info.cached_tokens is 9, more than the 6 prompt tokens"),
        ("cached_tokens", -1, "meta_info.cached_tokens must be an integer >= 0"),
        ("prompt_tokens", None, "meta_info.prompt_tokens must be an integer >= 1"),
    ],
)
def test_meta_fields(key: str, value: Any, message: str) -> None:
    answer = _valid()
    answer["meta_info"][key] = value
    with pytest.raises(EngineError, match=message):
        parse_generation(answer, REQUEST, 0)


def test_batch_shape() -> None:
    with pytest.raises(EngineError, match="the batch answer has 1 results for 2 prompts"):
        parse_batch([_valid()], [REQUEST, REQUEST], 0)
    with pytest.raises(EngineError, match="expected a JSON list of 2 results, got str"):
        parse_batch("oops", [REQUEST, REQUEST], 0)
    assert len(parse_batch(_valid(), [REQUEST], 0)) == 1  # a lone answer for a batch of one


# --- the bytes path (parse_batch_bytes): typed decoding must accept and refuse exactly what the object path does ---

TEXT_REQUEST = GenerateRequest(
    (1, 5, 9, 13, 17, 21), max_new_tokens=4, logprob_start_len=0, top_logprobs_num=2, return_text=True
)


def _answer(request: GenerateRequest) -> dict[str, Any]:
    sp = {"max_new_tokens": request.max_new_tokens}
    start, top = request.logprob_start_len, request.top_logprobs_num
    return FakeState(Behaviour()).one(list(request.input_ids), sp, start, top, request.return_text)


def _same(a: Generation, b: Generation) -> None:
    assert a.output_ids == b.output_ids and a.input_token_text == b.input_token_text
    assert a.output_token_text == b.output_token_text and a.cached_tokens == b.cached_tokens
    for name in ("input_token_ids", "input_logprobs", "output_logprobs"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), name
    for name in ("input_top", "output_top"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None)
        if x is not None:
            assert np.array_equal(x.ids, y.ids) and np.array_equal(x.logprobs, y.logprobs, equal_nan=True)


@pytest.mark.parametrize("request_", [REQUEST, TEXT_REQUEST, GenerateRequest((3, 4, 5), max_new_tokens=3)])
def test_bytes_path_reads_what_the_object_path_reads(request_: GenerateRequest) -> None:
    answer = _answer(request_)
    (from_bytes,) = parse_batch_bytes(orjson.dumps([answer]), [request_], 0, "test")
    _same(from_bytes, parse_generation(answer, request_, 0))
    assert np.isnan(from_bytes.input_logprobs[0]) if request_.logprob_start_len == 0 else True


def test_bytes_path_sorts_unsorted_top_rows_like_the_object_path() -> None:
    answer = _answer(REQUEST)
    for row in answer["meta_info"]["output_top_logprobs"]:
        row.reverse()
    (from_bytes,) = parse_batch_bytes(orjson.dumps([answer]), [REQUEST], 0, "test")
    _same(from_bytes, parse_generation(answer, REQUEST, 0))
    assert from_bytes.output_top is not None and (np.diff(from_bytes.output_top.logprobs, axis=1) <= 0).all()


def _message(fn: Any) -> str:
    with pytest.raises(EngineError) as info:
        fn()
    return str(info.value)


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(FIELDS),
    row=st.integers(1, 3),
    how=st.sampled_from(["drop", "dup", "value", "id", "entry"]),
    bad=st.sampled_from(BAD_VALUES),
)
def test_any_single_corruption_gives_the_same_error_from_bytes(field: str, row: int, how: str, bad: Any) -> None:
    answer = _corrupted(field, row, how, bad)
    content = json.dumps([answer]).encode()  # NaN and Infinity as Python writes them
    from_bytes = _message(lambda: parse_batch_bytes(content, [REQUEST], 7, "test"))
    assert from_bytes == _message(lambda: parse_batch([answer], [REQUEST], 7))
    assert "request 7: " in from_bytes


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json", "test answered invalid JSON"),
        (b'{"meta_info": 5}', "request 0: meta_info is missing"),
        (b"[1, 2]", "the batch answer has 2 results for 1 prompts"),
        (b"[[1]]", "request 0: answer is not a JSON object (got list)"),
    ],
)
def test_bytes_that_are_not_an_answer(content: bytes, message: str) -> None:
    assert message in _message(lambda: parse_batch_bytes(content, [REQUEST], 0, "test"))


def test_garbage_collector_is_restored_after_reading_even_on_error() -> None:
    assert gc.isenabled()
    parse_batch_bytes(orjson.dumps([_valid()]), [REQUEST], 0, "test")
    _message(lambda: parse_batch_bytes(b"[1, 2]", [REQUEST], 0, "test"))
    assert gc.isenabled()
    gc.disable()
    try:
        parse_batch_bytes(orjson.dumps([_valid()]), [REQUEST], 0, "test")
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


def test_token_ids_from_bytes_and_from_objects() -> None:
    answer = [_answer(GenerateRequest((7, 8, 9), max_new_tokens=0, logprob_start_len=0))]
    typed = decode_answer(orjson.dumps(answer), "test")
    assert parse_token_ids(typed, 1, 0) == parse_token_ids(answer, 1, 0) == ([(7, 8, 9)], 0.001)
    del answer[0]["meta_info"]["input_token_logprobs"]
    assert "answer 4 has no meta_info.input_token_logprobs" in _message(
        lambda: parse_token_ids(decode_answer(orjson.dumps(answer), "test"), 1, 4)
    )


# --- read_from: the positions before it are counted, not read (a replay's prompt) ---

SKIM_REQUEST = GenerateRequest(
    (1, 5, 9, 13, 17, 21), max_new_tokens=4, logprob_start_len=0, top_logprobs_num=2, return_text=True, read_from=3
)


def test_reading_from_a_position_keeps_the_earlier_ones_in_place_unread() -> None:
    answer = _answer(SKIM_REQUEST)
    full = parse_generation(answer, TEXT_REQUEST, 0)
    (skimmed,) = parse_batch_bytes(orjson.dumps([answer]), [SKIM_REQUEST], 0, "test")
    _same(skimmed, parse_generation(answer, SKIM_REQUEST, 0))  # the object path reads the same positions
    assert skimmed.input_token_ids.tolist() == list(SKIM_REQUEST.input_ids)  # as sent
    assert np.isnan(skimmed.input_logprobs[:3]).all()
    assert np.array_equal(skimmed.input_logprobs[3:], full.input_logprobs[3:])
    assert skimmed.input_token_text == (None, None, None, *full.input_token_text[3:])
    assert skimmed.input_top is not None and full.input_top is not None
    assert (skimmed.input_top.ids[:3] == -1).all() and np.isnan(skimmed.input_top.logprobs[:3]).all()
    assert np.array_equal(skimmed.input_top.ids[3:], full.input_top.ids[3:])
    assert np.array_equal(skimmed.output_logprobs, full.output_logprobs)


def test_a_batch_mixing_skimmed_and_whole_reads_reads_each_as_asked() -> None:
    answers = [_answer(SKIM_REQUEST), _answer(TEXT_REQUEST)]
    both = parse_batch_bytes(orjson.dumps(answers), [SKIM_REQUEST, TEXT_REQUEST], 0, "test")
    _same(both[0], parse_generation(answers[0], SKIM_REQUEST, 0))
    _same(both[1], parse_generation(answers[1], TEXT_REQUEST, 1))


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(["input_token_logprobs", "input_top_logprobs"]),
    row=st.integers(1, 5),
    how=st.sampled_from(["drop", "dup", "value", "id", "entry"]),
    bad=st.sampled_from(BAD_VALUES),
)
def test_skipped_positions_are_counted_and_read_ones_validated(field: str, row: int, how: str, bad: Any) -> None:
    answer = _corrupted(field, row, how, bad)
    content = json.dumps([answer]).encode()
    if how in ("drop", "dup") or row >= SKIM_REQUEST.read_from:
        from_bytes = _message(lambda: parse_batch_bytes(content, [SKIM_REQUEST], 7, "test"))
        assert from_bytes == _message(lambda: parse_batch([answer], [SKIM_REQUEST], 7))
        assert "request 7: meta_info." + field in from_bytes
    else:  # before read_from: never read, so never judged (the positions no check compares)
        (g,) = parse_batch_bytes(content, [SKIM_REQUEST], 7, "test")
        assert np.isnan(g.input_logprobs[row])


@pytest.mark.parametrize(
    ("names", "counts"),
    [
        (("spec_draft_token_num", "spec_accept_token_num"), (5, 12, 7)),
        (("spec_num_proposed_drafts", "spec_num_correct_drafts"), (3, 6, 0)),  # newer SGLang releases' names
    ],
)
def test_per_request_speculative_counters_are_read_under_either_name(names: tuple[str, str], counts: Any) -> None:
    answer = _valid()
    answer["meta_info"] |= {"spec_verify_ct": counts[0], names[0]: counts[1], names[1]: counts[2]}
    assert parse_generation(answer, REQUEST, 0).spec_counts == counts
    # The same through the bytes path.
    (from_bytes,) = parse_batch_bytes(orjson.dumps([answer]), [REQUEST], 0, "answer")
    assert from_bytes.spec_counts == counts


def test_speculative_counters_absent_or_partial_are_none_and_bad_ones_name_the_field() -> None:
    assert parse_generation(_valid(), REQUEST, 0).spec_counts is None
    only_verify = _valid()
    only_verify["meta_info"]["spec_verify_ct"] = 3  # an older release: no draft counts, nothing to pair on
    assert parse_generation(only_verify, REQUEST, 0).spec_counts is None
    bad = _valid()
    bad["meta_info"] |= {"spec_verify_ct": 3, "spec_draft_token_num": 4, "spec_accept_token_num": 5}
    with pytest.raises(EngineError, match=r"meta_info.spec_accept_token_num.*more than the 4 drafted"):
        parse_generation(bad, REQUEST, 0)
    bad["meta_info"]["spec_accept_token_num"] = -1
    with pytest.raises(EngineError, match=r"meta_info.spec_accept_token_num"):
        parse_generation(bad, REQUEST, 0)
