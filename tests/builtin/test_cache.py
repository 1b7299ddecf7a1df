"""Prefix-cache semantics of the clean engine: hits are reported and change no number."""

from __future__ import annotations

import pydoc_data.topics
import threading

import httpx
import numpy as np

from precisionbot.builtin.tokenizer import encode
from tests.builtin import flows
from tests.support.engine_server import running_engine

NEW = 24


def test_repeat_hits_the_cache_and_flush_resets_it(client: httpx.Client) -> None:
    ids = flows.prompts(2)
    first = flows.generate(client, ids, 4)
    assert [o["meta_info"]["cached_tokens"] for o in first] == [0, 0]
    again = flows.generate(client, ids, 4)
    for p, o in zip(ids, again, strict=True):
        cached = o["meta_info"]["cached_tokens"]
        assert 0 < cached <= len(p) - 1 and cached % 16 == 0
    assert [o["output_ids"] for o in again] == [o["output_ids"] for o in first]
    assert client.post("/flush_cache").status_code == 200
    assert [o["meta_info"]["cached_tokens"] for o in flows.generate(client, ids, 4)] == [0, 0]


def test_logprob_start_len_caps_the_reused_prefix(client: httpx.Client) -> None:
    ids = flows.prompts(1)
    flows.prefill(client, ids)  # everything cached now
    body = {"input_ids": ids[0], "sampling_params": {"max_new_tokens": 1}, "return_logprob": True}
    assert client.post("/generate", json={**body, "logprob_start_len": 0}).json()["meta_info"]["cached_tokens"] == 0
    capped = client.post("/generate", json={**body, "logprob_start_len": 40}).json()["meta_info"]["cached_tokens"]
    assert capped == 32  # whole pages at or below min(input_len - 1, 40)


def test_clean_engine_is_exact_with_and_without_cache_hits(client: httpx.Client) -> None:
    ids = flows.prompts(4)
    assert not np.any(flows.match(client, ids, NEW))
    d, cached = flows.prefill_cache_hit(client, ids, NEW)
    assert all(c > 0 for c in cached) and not np.any(d)
    d, cached, _ = flows.decode_cache_hit(client, ids, NEW)
    assert all(c > len(p) + 1 for c, p in zip(cached, ids, strict=True)) and not np.any(d)


def test_concurrent_calls_share_batches_and_change_nothing() -> None:
    ids = flows.prompts(4)
    with running_engine() as url, httpx.Client(base_url=url, timeout=120) as client:
        solo = [flows.generate(client, [p], NEW)[0] for p in ids]
        assert client.get("/server_info").json()["internal_states"][0]["max_decode_batch"] == 1
        assert client.post("/flush_cache").status_code == 200
        results: dict[int, list[float]] = {}

        def call(i: int) -> None:
            with httpx.Client(base_url=url, timeout=120) as own:
                results[i] = flows.output_lps(flows.generate(own, [ids[i]], NEW)[0]).tolist()

        threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        state = client.get("/server_info").json()["internal_states"][0]
    for i, s in enumerate(solo):
        assert results[i] == flows.output_lps(s).tolist()
    assert state["max_decode_batch"] >= 2  # separate HTTP calls were decoded together


def test_disabled_radix_cache_reports_no_hits() -> None:
    with running_engine(disable_radix_cache=True) as url, httpx.Client(base_url=url, timeout=60) as c:
        ids = flows.prompts(1)
        flows.generate(c, ids, 2)
        assert flows.generate(c, ids, 2)[0]["meta_info"]["cached_tokens"] == 0
        assert c.get("/server_info").json()["disable_radix_cache"] is True


def test_fp32_mode_is_exact_too() -> None:
    with (
        running_engine(dtype="float32", chunked_prefill_size=64, enable_deterministic_inference=True) as url,
        httpx.Client(base_url=url, timeout=60) as c,
    ):
        ids = flows.prompts(2)
        assert not np.any(flows.match(c, ids, 16))
        d, cached = flows.prefill_cache_hit(c, ids, 16)
        assert all(x > 0 for x in cached) and not np.any(d)


def test_other_page_sizes_and_unaligned_chunks_are_exact() -> None:
    with running_engine(page_size=32, chunked_prefill_size=100) as url, httpx.Client(base_url=url, timeout=60) as c:
        ids = flows.prompts(2)
        assert not np.any(flows.match(c, ids, 16))
        d, cached = flows.prefill_cache_hit(c, ids, 16)
        assert all(x > 0 and x % 32 == 0 for x in cached) and not np.any(d)


def test_lru_eviction_when_the_pool_is_full() -> None:
    # 16384 slots = 1023 usable pages of 16: ten 2000-token prompts do not all stay cached.
    with (
        running_engine(kv_pool_tokens=16384, max_context_tokens=8192) as url,
        httpx.Client(base_url=url, timeout=120) as c,
    ):
        texts = sorted(pydoc_data.topics.topics.values(), key=len, reverse=True)[:10]
        ids = [encode(t[:1999]) for t in texts]  # 10 distinct prompts x 125 pages > the pool
        for p in ids:
            flows.prefill(c, [p])
        again = [flows.generate(c, [p], 1)[0]["meta_info"]["cached_tokens"] for p in (ids[0], ids[-1])]
        full = [(len(p) - 1) // 16 * 16 for p in (ids[0], ids[-1])]
        assert again[0] < full[0]  # the least recently used prompt lost pages (deepest first)
        assert again[1] == full[1]  # the newest is still cached whole
