"""The sliding-window KV pool (swa_cache.py) with SGLang's SWA radix-cache semantics: out-of-window pages freed
while a request runs, SWA pages evicted (tombstoned) before full-attention pages under pressure, hits only
where the window before them still has its pages, and the same numbers as one shared pool."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from precisionbot.builtin.kvcache import Node, PageAllocator, RadixCache
from precisionbot.errors import ConfigError
from tests.builtin import flows
from tests.support.engine_server import engine_options, running_engine

PS = 16
WINDOW = 64
EXACT = {"preset": "hybrid", "enable_deterministic_inference": True, "sliding_window_size": WINDOW}
TIGHT = {
    **EXACT,
    "mamba_track_interval": PS,  # a checkpoint on every page, so the SWA rule alone decides where a hit ends
    "chunked_prefill_size": 128,
    "kv_pool_tokens": 16384,
    "max_context_tokens": 8192,
    "swa_full_tokens_ratio": 21 * PS / 16384,  # 21 SWA pages: one request's peak (16) plus a few cached
}


def _state(c: httpx.Client) -> dict[str, Any]:
    state: dict[str, Any] = c.get("/server_info").json()["internal_states"][0]
    return state


def _lps(out: dict[str, Any], key: str = "output_token_logprobs") -> np.ndarray:
    return np.array([e[0] for e in out["meta_info"][key]], dtype=np.float64)


@pytest.fixture(scope="module")
def tight() -> Iterator[httpx.Client]:
    with running_engine(**TIGHT) as url, httpx.Client(base_url=url, timeout=300) as c:
        yield c


def test_a_long_generation_holds_only_the_windows_pages_and_matches_one_pool() -> None:
    prompt = flows.prompts(1, chars=40)[0]
    new = 4 * WINDOW
    outs = {}
    for disable in (False, True):
        opts = {**EXACT, "disable_hybrid_swa_memory": disable}
        with running_engine(**opts) as url, httpx.Client(base_url=url, timeout=300) as c:
            (outs[disable],) = flows.generate(c, [prompt], new)
            info = c.get("/server_info").json()
        assert info["disable_hybrid_swa_memory"] is disable
        if not disable:
            state = info["internal_states"][0]
            assert info["swa_full_tokens_ratio"] == 0.8
            # (41 + 256) tokens are 19 pages; the request held at most its window, the tokens since its last
            # checkpoint (every 64), a spare page and the new one.
            assert state["max_swa_pages_per_request"] <= (WINDOW + 64) // PS + 2
            assert state["swa_pages_freed_out_of_window"] >= (len(prompt) + new - WINDOW) // PS - 3
    assert outs[False]["output_ids"] == outs[True]["output_ids"]
    assert np.array_equal(_lps(outs[False]), _lps(outs[True]))  # bit for bit: freed keys were masked anyway


def test_swa_pressure_tombstones_before_full_eviction_and_hits_only_where_the_window_is_whole(
    tight: httpx.Client,
) -> None:
    p, q, r = flows.prompts(3, chars=300)
    assert tight.post("/flush_cache").status_code == 200
    flows.generate(tight, [p], 1)  # prefill in chunks of 128: pages below 176 are out of the window already
    before = _state(tight)
    assert before["swa_tombstones"] == 11 and before["swa_cached_pages"] == 7  # pages 0-10 gone, 11-17 kept
    flows.generate(tight, [q], 1)  # reserves 16 of 20 SWA pages: 3 cached ones must go
    after = _state(tight)
    assert after["swa_tombstoned_nodes"] == 3 and after["full_evicted_pages"] == 0
    # p's pages 11-13 are tombstones now; 14-17 are exactly one window: a hit may still end at 288.
    (hit,) = flows.generate(tight, [p + [10] * 8], 8)
    assert hit["meta_info"]["cached_tokens"] == 288
    flows.generate(tight, [r], 1)  # more pressure: q's pages (least recent; its leaf goes whole), then p's 14
    # Matches p's 18 pages, but 15-17 are not a window; the new tokens' window reaches into page 14.
    (short,) = flows.generate(tight, [[*p[:288], 11]], 8)
    assert short["meta_info"]["cached_tokens"] < 288
    # The pages p's tombstoned nodes had now hold q's and r's keys: a hit that read them would differ.
    refs = []
    for ids in (p + [10] * 8, [*p[:288], 11]):
        assert tight.post("/flush_cache").status_code == 200
        refs += flows.generate(tight, [ids], 8)
    assert [x["meta_info"]["cached_tokens"] for x in refs] == [0, 0]
    assert np.array_equal(_lps(hit), _lps(refs[0])) and np.array_equal(_lps(short), _lps(refs[1]))


def test_swa_early_evict_frees_window_pages_of_a_hit() -> None:
    # 269 tokens: the hit ends at 256 and the generated tokens' window reaches into the freed pages.
    prompt = flows.prompts(1, chars=268)[0]
    with running_engine(**EXACT, faults=("swa-early-evict",)) as url, httpx.Client(base_url=url, timeout=300) as c:
        flows.prefill(c, [prompt])
        (bad,) = flows.generate(c, [prompt], 8)
        state = _state(c)
        assert c.post("/flush_cache").status_code == 200
        (ref,) = flows.generate(c, [prompt], 8)
    assert bad["meta_info"]["cached_tokens"] == 256 and ref["meta_info"]["cached_tokens"] == 0
    assert state["swa_tombstoned_nodes"] == (256 - WINDOW // PS) // PS  # all but the hit's last page
    assert np.abs(_lps(bad) - _lps(ref)).max() > 1e-3


def _chain(cache: RadixCache, swa: PageAllocator, n: int, tombstones: set[int]) -> list[Node]:
    tokens = list(range(n * PS))
    cache.insert(tokens, cache.allocator.alloc(n), [0 if i in tombstones else swa.alloc(1)[0] for i in range(n)])
    return cache.match(tokens, n * PS)


def test_the_match_rule_and_swa_eviction_in_the_tree() -> None:
    full, swa = PageAllocator(64), PageAllocator(64, "SWA KV pool")
    cache = RadixCache(full, PS, swa, WINDOW)
    path = _chain(cache, swa, 12, tombstones={2, 9})
    # Valid ends: after pages 0-1 (no tombstone before them), after 6, 7 and 8 (a window of pages since the
    # tombstone at 2), none after the tombstone at 9.
    assert len(cache.usable(path, checkpoint=False)) == 9
    for node in path:
        node.mamba = None
    path[4].mamba = path[7].mamba = object()  # type: ignore[assignment]
    assert len(cache.usable(path, checkpoint=True)) == 8
    # A request holding the whole path SWA-locks only the window's nodes: eviction tombstones the others,
    # keeping every full-attention page, and never touches what the window needs.
    cache.lock(path)
    free_full = full.free_count
    assert cache.evict_swa(100) == 7  # pages 0-7 but the tombstone at 2; 8-11 are the window's
    assert full.free_count == free_full and cache.cached_pages == 12
    assert [n.swa_page != 0 for n in path] == [False] * 8 + [True, False, True, True]
    cache.unlock(path)
    assert cache.evict(100) == 12 and swa.free_count == 63 and full.free_count == 63


def test_a_too_small_swa_pool_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="raise swa_full_tokens_ratio"):
        engine_options(**{**TIGHT, "swa_full_tokens_ratio": 0.001})
    with pytest.raises(ConfigError, match="drop --disable-hybrid-swa-memory"):
        engine_options(**EXACT, disable_hybrid_swa_memory=True, faults=("swa-early-evict",))


@pytest.mark.parametrize("new", [70, 100])
def test_the_next_turn_resumes_at_the_last_checkpoint_despite_freed_pages(new: int) -> None:
    # Without keeping the window before the latest checkpoint, freeing during decode leaves it without one
    # (h + o - 1 = 300 and 270: the checkpoint at 256 or 192 would lie within W + page_size of the end).
    prompt = flows.prompts(1, chars=200)[0]
    with running_engine(**EXACT) as url, httpx.Client(base_url=url, timeout=300) as c:
        (turn1,) = flows.generate(c, [prompt], new)
        (turn2,) = flows.generate(c, [prompt + turn1["output_ids"] + [10]], 4)
    assert turn2["meta_info"]["cached_tokens"] >= (len(prompt) + new - 1) // 64 * 64  # make_mamba_decode_assert


def test_serve_takes_sglangs_swa_flags() -> None:
    import argparse

    from precisionbot.commands import serve

    parser = argparse.ArgumentParser()
    serve.register(parser.add_subparsers())
    o = serve.options_from_args(parser.parse_args(["serve", "--swa-full-tokens-ratio", "0.25"]))
    assert o.swa_full_tokens_ratio == 0.25 and o.uses_swa_pool and o.swa_pool_tokens == 262144 // 4
    o = serve.options_from_args(parser.parse_args(["serve", "--disable-hybrid-swa-memory"]))
    assert o.disable_hybrid_swa_memory and not o.uses_swa_pool


@pytest.mark.parametrize("fault", ["restore-layer0-only", "restore-stale-page", "cache-decode-kv-rounded"])
def test_the_older_cache_faults_still_work_with_the_swa_pool(fault: str) -> None:
    prompt = flows.prompts(1, chars=268)[0]
    with running_engine(**EXACT, faults=(fault,)) as url, httpx.Client(base_url=url, timeout=300) as c:
        if fault == "cache-decode-kv-rounded":  # the decoded KV of turn 1 comes back rounded in turn 2
            (turn1,) = flows.generate(c, [prompt], 80)  # the hit then ends at 320, past the first decode KV
            prompt = prompt + turn1["output_ids"]
        else:
            flows.prefill(c, [prompt])
        (bad,) = flows.generate(c, [prompt], 8)
        assert c.post("/flush_cache").status_code == 200
        (ref,) = flows.generate(c, [prompt], 8)
    assert bad["meta_info"]["cached_tokens"] >= 256 and ref["meta_info"]["cached_tokens"] == 0
    assert not np.array_equal(_lps(bad), _lps(ref))
