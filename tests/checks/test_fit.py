"""Whether a suite's sizes fit the engine's context (``precisionbot.checks.fit``), from each engine's own words."""

from __future__ import annotations

import dataclasses

from precisionbot.checks.fit import context_length, helper_tokens, misfits
from precisionbot.config import Config
from precisionbot.results import CONSISTENCY_CHECKS


def test_context_length_from_each_engine_kind() -> None:
    assert context_length({"context_length": 32768}) == (32768, "context_length")  # SGLang /server_info
    props = {"default_generation_settings": {"n_ctx": 1024, "params": {}}, "total_slots": 4}  # llama-server /props
    assert context_length(props) == (1024, "n_ctx per slot")
    assert context_length({"max_model_len": 4096}) == (4096, "max_model_len")  # vLLM
    assert context_length({"context_length": None, "model": "x"}) is None  # not said: nothing refused
    assert context_length({"context_length": True}) is None


def test_the_longest_sequence_of_each_part() -> None:
    pr = Config.default().suite("pr")
    # decode_cache_hit's turn 2: prompt + turn 1's output + "," + turn 2's output
    assert helper_tokens(pr, CONSISTENCY_CHECKS)[0] == 4608 + 2 * 512 + 2
    assert helper_tokens(pr, ("match",))[0] == 4608 + 512
    small = dataclasses.replace(pr, prompt_tokens=(256, 512), max_new_tokens=64)
    assert misfits(small, pr.checks, 1024, "n_ctx per slot") == [
        "golden needs 4,128 tokens (depth 4,096 + 32 decode steps), more than the engine's context of 1,024 "
        "tokens (n_ctx per slot); pass --golden-depths 512"
    ]
    assert misfits(small, ("match", "decode_cache_hit"), 1024, "n_ctx per slot") == []
    assert misfits(small, ("match",), 512, "x")[0].startswith("the helpers (match) need 576 tokens per sequence")
