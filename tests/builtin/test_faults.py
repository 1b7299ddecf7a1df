"""Each fault changes what it should and only that (the fault table of docs/builtin-engine.md)."""

from __future__ import annotations

import pydoc_data.topics
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import numpy as np
import pytest

from precisionbot.builtin.tokenizer import encode
from tests.builtin import flows
from tests.support.engine_server import running_engine

NEW = 24
POOL = {"kv_pool_tokens": 65536, "chunked_prefill_size": 128}


@contextmanager
def engine(*faults: str) -> Iterator[httpx.Client]:
    with running_engine(faults=faults, **POOL) as url, httpx.Client(base_url=url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """The clean engine's numbers for the same flows."""
    ids = flows.prompts(4)
    with engine() as c:
        assert c.post("/flush_cache").status_code == 200
        return {"ids": ids, "gen": flows.generate(c, ids, NEW), "golden": flows.prefill(c, [_deep()], top=258)}


def _deep() -> list[int]:
    text = pydoc_data.topics.topics["typesseq"] + pydoc_data.topics.topics["compound"]
    return encode(text[:1600])


def _kl(ref: dict[str, Any], test: dict[str, Any]) -> np.ndarray:
    """Full-vocabulary KL(ref || test) per prompt position (top_logprobs_num covers the whole vocabulary)."""
    out = []
    for a, b in zip(
        ref["meta_info"]["input_top_logprobs"][1:], test["meta_info"]["input_top_logprobs"][1:], strict=True
    ):
        pa = {t: lp for lp, t, _ in a}
        pb = {t: lp for lp, t, _ in b}
        out.append(sum(np.exp(lp) * (lp - pb[t]) for t, lp in pa.items()))
    return np.array(out)


def _same_as_clean(c: httpx.Client, reference: dict[str, Any]) -> bool:
    assert c.post("/flush_cache").status_code == 200
    gen = flows.generate(c, reference["ids"], NEW)
    return all(
        np.array_equal(flows.output_lps(a), flows.output_lps(b)) for a, b in zip(gen, reference["gen"], strict=True)
    )


def test_restore_layer0_only(reference: dict[str, Any]) -> None:
    with engine("restore-layer0-only") as c:
        assert c.get("/server_info").json()["faults"] == ["restore-layer0-only"]
        assert _same_as_clean(c, reference)  # no cache hit, no difference: bit-identical to clean
        assert not np.any(flows.match(c, reference["ids"], NEW))
        d, cached = flows.prefill_cache_hit(c, reference["ids"], NEW)
        assert all(x > 0 for x in cached) and np.abs(d).mean() > 0.02


def test_restore_stale_page(reference: dict[str, Any]) -> None:
    with engine("restore-stale-page") as c:
        assert _same_as_clean(c, reference)
        assert not np.any(flows.match(c, reference["ids"], NEW))
        d, cached = flows.prefill_cache_hit(c, reference["ids"], NEW)
        assert all(x > 0 for x in cached) and np.any(d)


def test_cache_decode_kv_rounded(reference: dict[str, Any]) -> None:
    with engine("cache-decode-kv-rounded") as c:
        assert _same_as_clean(c, reference)
        d, _ = flows.prefill_cache_hit(c, reference["ids"], NEW)
        assert not np.any(d)  # a warm-up prefill writes no decode KV
        d, cached, first_turn = flows.decode_cache_hit(c, reference["ids"], NEW)
        clean_first = np.concatenate([flows.output_lps(o) for o in reference["gen"]])
        assert np.array_equal(first_turn, clean_first)  # the first turn is untouched
        assert all(x > len(p) + 1 for x, p in zip(cached, reference["ids"], strict=True)) and np.any(d)


@pytest.mark.parametrize(
    ("fault", "harmful"), [("attn-p-fp8", True), ("attn-p-fp8-scaled", False), ("attn-p-bf16", False)]
)
def test_attention_p_precision(reference: dict[str, Any], fault: str, harmful: bool) -> None:
    with engine(fault) as c:
        assert not np.any(flows.match(c, reference["ids"], 8))  # same kernel in prefill and decode
        kl = _kl(reference["golden"][0], flows.prefill(c, [_deep()], top=258)[0])
    if harmful:
        assert np.median(kl[1000:]) > 1e-2
        assert np.median(kl[1000:]) > 10 * np.median(kl[:200])  # worse with context depth
    else:
        assert kl.max() < 1e-2 and np.median(kl) < 1e-3


def test_mantissa(reference: dict[str, Any]) -> None:
    with engine("mantissa=4") as c:
        small = _kl(reference["golden"][0], flows.prefill(c, [_deep()], top=258)[0])
    with engine("mantissa=16") as c:
        near_fp32 = _kl(reference["golden"][0], flows.prefill(c, [_deep()], top=258)[0])
    assert small.max() > 1e-2 and np.median(small) > 1e-4
    assert near_fp32.max() < 1e-2 and np.median(near_fp32) < 1e-6 and small.max() > 10 * near_fp32.max()


def test_chunk_boundary(reference: dict[str, Any]) -> None:
    with engine("chunk-boundary") as c:
        short = flows.prefill(c, [_deep()[:100]], top=258)[0]  # one chunk: nothing changes
        long = flows.prefill(c, [_deep()], top=258)[0]
        d = flows.match(c, reference["ids"], NEW)
    kl_short = _kl(
        {"meta_info": {"input_top_logprobs": reference["golden"][0]["meta_info"]["input_top_logprobs"][:100]}}, short
    )
    assert not np.any(kl_short)
    kl = _kl(reference["golden"][0], long)
    assert not np.any(kl[:127]) and kl[128:].max() > 0.05
    assert np.abs(d).max() > 0.01


def test_batch_variant_is_small_and_deterministic(reference: dict[str, Any]) -> None:
    with engine("batch-variant") as c:
        first = flows.match(c, reference["ids"], NEW)
        again = flows.match(c, reference["ids"], NEW)
    assert np.array_equal(first, again)
    assert np.any(first) and np.abs(first).max() < 0.1


def test_nondeterministic_is_small_run_to_run_noise(reference: dict[str, Any]) -> None:
    with engine("nondeterministic") as c:
        runs = [flows.prefill(c, reference["ids"][:2]) for _ in range(2)]
        assert c.post("/flush_cache").status_code == 200
    a = np.array([e[0] for r in runs[0] for e in r["meta_info"]["input_token_logprobs"][1:]])
    b = np.array([e[0] for r in runs[1] for e in r["meta_info"]["input_token_logprobs"][1:]])
    # bf16-like run-to-run noise: about 1e-3 nats at a typical position, never a large jump
    assert np.any(a != b) and np.abs(a - b).max() < 0.2 and 1e-5 < np.median(np.abs(a - b)) < 5e-3


def test_several_faults_at_once() -> None:
    with engine("attn-p-bf16", "mantissa=12") as c:
        assert c.get("/server_info").json()["faults"] == ["attn-p-bf16", "mantissa=12"]
