"""Pure validation of ``/generate`` answers: any single corruption of a valid answer is an EngineError."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precisionbot.engines.base import GenerateRequest
from precisionbot.engines.sglang_parse import parse_batch, parse_generation
from precisionbot.errors import EngineError
from tests.engines.fake_sglang import Behaviour, FakeState

REQUEST = GenerateRequest((1, 5, 9, 13, 17, 21), max_new_tokens=4, logprob_start_len=0, top_logprobs_num=2)


def _valid() -> dict[str, Any]:
    return FakeState(Behaviour()).one(list(REQUEST.input_ids), {"max_new_tokens": 4}, 0, 2, False)


def test_valid_answer_parses() -> None:
    g = parse_generation(_valid(), REQUEST, 0)
    assert len(g.output_ids) == 4 and len(g.input_logprobs) == 6
    assert g.input_top is not None and (g.input_top.ids[0] == -1).all()  # position 0 has no top-k


FIELDS = ["input_token_logprobs", "output_token_logprobs", "input_top_logprobs", "output_top_logprobs"]
BAD_VALUES = [None, float("nan"), float("inf"), 0.5, "x", True]


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(FIELDS),
    row=st.integers(1, 3),
    how=st.sampled_from(["drop", "dup", "value", "id", "entry"]),
    bad=st.sampled_from(BAD_VALUES),
)
def test_any_single_corruption_is_an_error(field: str, row: int, how: str, bad: Any) -> None:
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
