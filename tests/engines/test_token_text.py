"""Token text for every engine kind: the OpenAI-compatible client (vLLM's shape) asks ``/detokenize`` for the text
its id-only completions lack, and gets what SGLang's native API returns with the same tokens. Against the
builtin engine's real HTTP server on 127.0.0.1, which speaks both."""

from __future__ import annotations

import json

import pytest

from precisionbot.engines.base import GenerateRequest
from precisionbot.engines.openai import OpenAIEngine


def test_openai_kind_detokenizes_like_sglangs_native_text() -> None:
    pytest.importorskip("torch")  # the builtin engine
    from precisionbot.engines.builtin import BuiltinEngine

    native = BuiltinEngine(preset="tiny")
    try:
        ids = tuple(native.tokenize(["def f(x):\n    return x  # done"])[0])
        request = GenerateRequest(input_ids=ids, max_new_tokens=6, logprob_start_len=0, return_text=True)
        (want,) = native.generate([request])
        client = OpenAIEngine(native.url)
        try:
            (got,) = client.generate([request])
            calls = len(client._pieces)
            again = client.token_texts(list(ids))
        finally:
            client.close()
    finally:
        native.close()
    assert got.output_ids == want.output_ids
    assert got.output_token_text == want.output_token_text
    assert all(t for t in got.output_token_text)
    # The prompt's scored positions (from 1: position 0 has no logprob) carry the same text as SGLang's.
    assert got.input_token_text[1:] == want.input_token_text[1:]
    assert "\n" in "".join(t or "" for t in got.input_token_text)
    # Asked once per distinct id, then served from memory.
    assert calls == len(set(ids) | set(got.output_ids))
    assert again == tuple(client._pieces[t] for t in ids)


def test_openai_kind_looks_up_text_only_for_the_positions_read() -> None:
    # A replay names the positions it compares (read_from): the prompt's thousands of ids are not detokenized.
    pytest.importorskip("torch")  # the builtin engine
    from precisionbot.engines.builtin import BuiltinEngine

    native = BuiltinEngine(preset="tiny")
    try:
        ids = tuple(native.tokenize(["class A:\n    pass\n\nclass B(A):\n    x = 1  # the end"])[0])
        read_from = len(ids) - 4
        request = GenerateRequest(ids, max_new_tokens=0, logprob_start_len=0, return_text=True, read_from=read_from)
        (want,) = native.generate([request])  # SGLang's shape: every position's text is in the answer
        client = OpenAIEngine(native.url)
        try:
            (got,) = client.generate([request])
            asked = set(client._pieces)
        finally:
            client.close()
    finally:
        native.close()
    assert asked == set(ids[read_from:])
    assert got.input_token_text[:read_from] == (None,) * read_from
    assert got.input_token_text[read_from:] == want.input_token_text[read_from:]
    assert want.input_token_text[:read_from] == (None,) * read_from  # the native client skipped them too


def test_llamacpp_kind_asks_detokenize_once_per_id_and_drops_half_characters() -> None:
    """llama-server's ``POST /detokenize`` answers ``{"content": text}``; a byte token that is half of a UTF-8
    character comes back as U+FFFD and is shown by id instead of as a replacement character."""
    import httpx

    from precisionbot.engines.llamacpp import LlamaCppEngine

    pieces = {5: " the", 6: "\n", 7: "\ufffd"}
    asked: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/detokenize"
        (token,) = json.loads(request.content)["tokens"]
        asked.append(token)
        return httpx.Response(200, json={"content": pieces[token]})

    engine = LlamaCppEngine("http://llama.invalid", transport=httpx.MockTransport(handler))
    try:
        assert engine.token_texts([5, 6, 5, 7]) == (" the", "\n", " the", None)
        assert engine.token_texts([6, 5]) == ("\n", " the")
    finally:
        engine.close()
    assert sorted(asked) == [5, 6, 7]
