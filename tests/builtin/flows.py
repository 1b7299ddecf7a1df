"""The consistency helpers' request flows (SGLang kl_test_utils semantics), written independently of
``precisionbot.checks`` so the engine's tests do not depend on the code they exist to test."""

from __future__ import annotations

import pydoc_data.topics
from typing import Any

import httpx
import numpy as np

from precisionbot.builtin.tokenizer import encode

_TOPICS = sorted(pydoc_data.topics.topics.items())


def prompts(n: int = 4, chars: int = 400) -> list[list[int]]:
    """``n`` prompts, prose and code alternating, ``chars`` bytes each (+ BOS)."""
    out = []
    for i in range(n):
        text = _TOPICS[7 + 11 * i][1] if i % 2 == 0 else _code(i)
        out.append(encode(text[100 : 100 + chars]))
    return out


def _code(i: int) -> str:
    import inspect
    import json.decoder
    import textwrap

    return inspect.getsource((textwrap, json.decoder)[i // 2 % 2])


def generate(c: httpx.Client, ids: list[list[int]], new: int) -> list[dict[str, Any]]:
    body = {
        "input_ids": ids,
        "sampling_params": {"temperature": 0, "max_new_tokens": new, "ignore_eos": True},
        "return_logprob": True,
        "logprob_start_len": -1,
    }
    r = c.post("/generate", json=body)
    r.raise_for_status()
    out: list[dict[str, Any]] = r.json()
    return out


def prefill(c: httpx.Client, ids: list[list[int]], top: int = 0) -> list[dict[str, Any]]:
    body = {
        "input_ids": ids,
        "sampling_params": {"temperature": 0, "max_new_tokens": 0},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": top,
    }
    r = c.post("/generate", json=body)
    r.raise_for_status()
    out: list[dict[str, Any]] = r.json()
    return out


def output_lps(out: dict[str, Any]) -> np.ndarray:
    return np.array([e[0] for e in out["meta_info"]["output_token_logprobs"]])


def delta(test: list[dict[str, Any]], replay: list[dict[str, Any]]) -> np.ndarray:
    """Per-token ``replay - decode`` logprob differences, all samples concatenated."""
    parts = []
    for t, r in zip(test, replay, strict=True):
        lp = output_lps(t)
        rp = np.array([e[0] for e in r["meta_info"]["input_token_logprobs"][-len(lp) :]])
        parts.append(rp - lp)
    return np.concatenate(parts)


def replay(c: httpx.Client, ids: list[list[int]], outs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert c.post("/flush_cache").status_code == 200
    return prefill(c, [p + o["output_ids"] for p, o in zip(ids, outs, strict=True)])


def match(c: httpx.Client, ids: list[list[int]], new: int) -> np.ndarray:
    assert c.post("/flush_cache").status_code == 200
    outs = generate(c, ids, new)
    return delta(outs, replay(c, ids, outs))


def prefill_cache_hit(c: httpx.Client, ids: list[list[int]], new: int) -> tuple[np.ndarray, list[int]]:
    assert c.post("/flush_cache").status_code == 200
    prefill(c, ids)
    outs = generate(c, ids, new)
    cached = [o["meta_info"]["cached_tokens"] for o in outs]
    return delta(outs, replay(c, ids, outs)), cached


def decode_cache_hit(c: httpx.Client, ids: list[list[int]], new: int) -> tuple[np.ndarray, list[int], np.ndarray]:
    """Returns (turn-2 deltas, turn-2 cached tokens, turn-1 output logprobs)."""
    assert c.post("/flush_cache").status_code == 200
    turn1 = generate(c, ids, new)
    turn2_ids = [p + o["output_ids"] + list(b",") for p, o in zip(ids, turn1, strict=True)]
    turn2 = generate(c, turn2_ids, new)
    cached = [o["meta_info"]["cached_tokens"] for o in turn2]
    first = np.concatenate([output_lps(o) for o in turn1])
    return delta(turn2, replay(c, turn2_ids, turn2)), cached, first
