"""Token text for every engine kind: the OpenAI-compatible client (vLLM's shape) asks ``/detokenize`` for the text
its id-only completions lack, and gets what SGLang's native API returns with the same tokens. Against the
builtin engine's real HTTP server on 127.0.0.1, which speaks both."""

from __future__ import annotations

import pytest

from precisionbot.engines.base import GenerateRequest
from precisionbot.engines.openai import OpenAIEngine

torch = pytest.importorskip("torch")


def test_openai_kind_detokenizes_like_sglangs_native_text() -> None:
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
