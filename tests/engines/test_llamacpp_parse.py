"""llama-server answers (shapes measured on llama.cpp 0c1e570) into validated data: the native ``/completion``
(``completion_probabilities`` lined up with ``tokens``, dropped UTF-8 entries, ``timings.cache_n``) and the two
``/v1/completions`` logprob shapes the openai kind reads."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from precisionbot.engines.llamacpp_parse import line_up, parse_completion, parse_entry
from precisionbot.engines.openai import output_logprobs
from precisionbot.errors import EngineError


def _entry(tok: int, lp: float, top: list[tuple[int, float]] | None = None) -> dict[str, Any]:
    top = top if top is not None else [(tok, lp), (tok + 1, lp - 1.0)]
    return {
        "id": tok,
        "token": f"t{tok}",
        "bytes": [116],
        "logprob": lp,
        "top_logprobs": [{"id": i, "token": f"t{i}", "bytes": [116], "logprob": v} for i, v in top],
    }


def _answer(tokens: list[int], entries: list[dict[str, Any]], cache_n: int = 0, prompt: int = 5) -> dict[str, Any]:
    return {
        "content": "...",
        "tokens": tokens,
        "tokens_evaluated": prompt,
        "tokens_cached": prompt + len(tokens) - 1,  # not the reused count: must not be read as such
        "timings": {"cache_n": cache_n, "prompt_n": prompt - cache_n},
        "completion_probabilities": entries,
    }


def test_completion_lines_up_entries_and_reads_cache_n() -> None:
    got = parse_completion(
        _answer([7, 8, 9], [_entry(7, -0.1), _entry(8, -0.2), _entry(9, -0.3)], cache_n=4),
        "req",
        prompt_tokens=5,
        n_predict=3,
        exact=True,
    )
    assert got.tokens == (7, 8, 9)
    assert got.cached_tokens == 4  # timings.cache_n, not tokens_cached (7)
    assert [e.logprob for e in got.entries if e is not None] == [-0.1, -0.2, -0.3]
    assert got.missing == ()


def test_a_token_left_incomplete_in_utf8_has_no_entry() -> None:
    # 4 tokens, 3 entries: the lead byte 0xE4 (id 231) was dropped, the token completing the character has one.
    tokens = [100, 231, 232, 101]
    entries = [_entry(100, -0.5), _entry(232, -0.25), _entry(101, -0.125)]
    got = parse_completion(_answer(tokens, entries), "req", prompt_tokens=5, n_predict=4, exact=True)
    assert got.missing == (1,)
    assert [None if e is None else e.token_id for e in got.entries] == [100, None, 232, 101]


def test_entries_that_match_no_token_and_wrong_counts_are_errors() -> None:
    with pytest.raises(EngineError, match="1 entries that match no generated token"):
        line_up([1, 2], [parse_entry(_entry(3, -1.0), "req", "e")], "req")
    with pytest.raises(EngineError, match="2 generated tokens, expected 3"):
        parse_completion(_answer([1, 2], []), "req", prompt_tokens=5, n_predict=3, exact=True)
    with pytest.raises(EngineError, match="cache_n is 9, more than the 5 prompt tokens"):
        parse_completion(_answer([1], [_entry(1, -1.0)], cache_n=9), "req", prompt_tokens=5, n_predict=1, exact=True)
    with pytest.raises(EngineError, match="tokens is missing"):
        parse_completion({"timings": {}}, "req", prompt_tokens=5, n_predict=1, exact=True)
    bad = _entry(1, -1.0)
    bad["top_logprobs"][0]["logprob"] = float("nan")
    with pytest.raises(EngineError, match=r"top_logprobs\[0\]\.logprob"):
        parse_completion(_answer([1], [bad]), "req", prompt_tokens=5, n_predict=1, exact=True)


def test_entry_sorts_top_k_and_finds_a_token() -> None:
    e = parse_entry(_entry(5, -2.0, [(5, -2.0), (6, -0.5), (7, -9.0)]), "req", "e")
    assert e.top_ids == (6, 5, 7)
    assert e.logprob_of(7) == -9.0
    assert e.logprob_of(8) is None


def test_openai_reads_legacy_and_content_shapes_alike() -> None:
    legacy = {"tokens": ["token_id:3", "token_id:4"], "token_logprobs": [-0.5, -1.5]}
    content = {
        "content": [
            {"id": 3, "token": "a", "bytes": [97], "logprob": -0.5, "top_logprobs": []},
            {"id": 4, "token": "b", "bytes": [98], "logprob": -1.5, "top_logprobs": []},
        ]
    }
    for shape in (legacy, content):
        ids, lps = output_logprobs(shape, 0)
        assert ids == (3, 4)
        np.testing.assert_array_equal(lps, [-0.5, -1.5])


def test_openai_errors_say_what_was_found() -> None:
    with pytest.raises(EngineError, match=r"neither tokens \+ token_logprobs .*found keys: text_offset"):
        output_logprobs({"text_offset": []}, 2)
    with pytest.raises(EngineError, match="logprobs is NoneType, expected an object"):
        output_logprobs(None, 2)
    with pytest.raises(EngineError, match=r"content\[0\].logprob is not a valid logprob"):
        output_logprobs({"content": [{"id": 1, "logprob": math.inf}]}, 2)
