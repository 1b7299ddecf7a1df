"""The hybrid preset over HTTP: SGLang's mamba cache semantics (checkpoints every ``mamba_track_interval``,
``cached_tokens`` at the last one), exact restores under --enable-deterministic-inference, and each hybrid
fault breaking exactly the path it names. Small window and prompts keep it fast."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.builtin import flows
from tests.support.engine_server import running_engine

WINDOW = 64
TRACK = 64
EXACT = {"preset": "hybrid", "enable_deterministic_inference": True, "sliding_window_size": WINDOW}


@pytest.fixture(scope="module")
def hybrid() -> Iterator[httpx.Client]:
    with running_engine(**EXACT) as url, httpx.Client(base_url=url, timeout=300) as c:
        yield c


def _lps(entries: list[Any]) -> np.ndarray:
    return np.array([e[0] for e in entries], dtype=np.float64)


def _hit_vs_replay(c: httpx.Client, prompt: list[int], new: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Warm the cache, generate on the hit, flush, replay: (cached_tokens, hit logprobs, replay logprobs)."""
    assert c.post("/flush_cache").status_code == 200
    flows.prefill(c, [prompt])
    (out,) = flows.generate(c, [prompt], new)
    assert c.post("/flush_cache").status_code == 200
    (replay,) = flows.prefill(c, [prompt + out["output_ids"]])
    hit = _lps(out["meta_info"]["output_token_logprobs"])
    return out["meta_info"]["cached_tokens"], hit, _lps(replay["meta_info"]["input_token_logprobs"][-new:])


def test_server_info_reports_sglangs_hybrid_names(hybrid: httpx.Client) -> None:
    info = hybrid.get("/server_info").json()
    assert info["mamba_track_interval"] == TRACK and info["mamba_ssm_dtype"] == "float32"
    assert info["sliding_window_size"] == WINDOW and info["page_size"] == 16
    assert info["enable_deterministic_inference"] is True and "swa_full_tokens_ratio" in info
    assert info["model_config"]["layer_types"] == ["full", "gdn", "swa"]


def test_a_hit_resumes_at_the_last_checkpoint_and_changes_no_number(hybrid: httpx.Client) -> None:
    prompt = flows.prompts(1, chars=300)[0]  # 301 tokens: pages reach 288, checkpoints 256
    cached, hit, replay = _hit_vs_replay(hybrid, prompt, 8)
    p = len(prompt) - 1
    assert p // TRACK * TRACK - TRACK <= cached <= p // TRACK * TRACK  # SGLang's make_mamba_prefill_assert
    assert cached == 256
    assert np.array_equal(hit, replay)


def test_decode_checkpoints_serve_the_next_turn(hybrid: httpx.Client) -> None:
    assert hybrid.post("/flush_cache").status_code == 200
    prompt = flows.prompts(1, chars=200)[0]
    (turn1,) = flows.generate(hybrid, [prompt], 80)
    h, o = len(prompt), 80
    (turn2,) = flows.generate(hybrid, [prompt + turn1["output_ids"] + [10]], 4)
    assert turn2["meta_info"]["cached_tokens"] >= (h + o - 1) // TRACK * TRACK  # make_mamba_decode_assert, lag 0


@pytest.mark.parametrize("fault", ["mamba-stale-checkpoint", "conv-state-shift", "swa-early-evict"])
def test_restore_faults_change_the_hit_but_not_the_reported_length(fault: str) -> None:
    # 269 tokens: the hit ends at 256 and the generated tokens' window (64) still reaches into the restored part.
    prompt = flows.prompts(1, chars=268)[0]
    with running_engine(**EXACT, faults=(fault,)) as url, httpx.Client(base_url=url, timeout=300) as c:
        cached, hit, replay = _hit_vs_replay(c, prompt, 8)
    assert cached == 256
    assert not np.array_equal(hit, replay)
    assert np.abs(hit - replay).max() > 1e-3


def test_the_short_decode_window_shows_once_generation_passes_it() -> None:
    prompt = flows.prompts(1, chars=40)[0]
    new = WINDOW + 24
    with running_engine(**EXACT, faults=("swa-decode-window",)) as url, httpx.Client(base_url=url, timeout=300) as c:
        (out,) = flows.generate(c, [prompt], new)
        assert c.post("/flush_cache").status_code == 200
        (replay,) = flows.prefill(c, [prompt + out["output_ids"]])
    gen = _lps(out["meta_info"]["output_token_logprobs"])
    ref = _lps(replay["meta_info"]["input_token_logprobs"][-new:])
    assert np.array_equal(gen[:WINDOW], ref[:WINDOW])  # output k is decoded with k tokens generated before it
    assert not np.array_equal(gen[WINDOW:], ref[WINDOW:])


@pytest.mark.parametrize(("fault", "path"), [("state-mantissa=4", "prefill"), ("state-bf16-decode", "decode")])
def test_state_precision_faults(fault: str, path: str, hybrid: httpx.Client) -> None:
    prompt = flows.prompts(1, chars=200)[0]
    assert hybrid.post("/flush_cache").status_code == 200
    run = flows.prefill if path == "prefill" else (lambda c, ids: flows.generate(c, ids, 16))
    (clean,) = run(hybrid, [prompt])
    with running_engine(**EXACT, faults=(fault,)) as url, httpx.Client(base_url=url, timeout=300) as c:
        (bad,) = run(c, [prompt])
    if path == "prefill":
        a, b = (_lps(x["meta_info"]["input_token_logprobs"][1:]) for x in (clean, bad))
        assert a.shape == b.shape == (len(prompt) - 1,) and np.abs(a - b).max() > 1e-3
    else:
        assert clean["meta_info"]["output_token_logprobs"][0] == bad["meta_info"]["output_token_logprobs"][0]
        assert clean["meta_info"]["output_token_logprobs"] != bad["meta_info"]["output_token_logprobs"]


def test_hybrid_faults_need_the_hybrid_preset() -> None:
    from precisionbot.errors import ConfigError
    from tests.support.engine_server import engine_options

    with pytest.raises(ConfigError, match="need the hybrid preset"):
        engine_options(faults=("conv-state-shift",))
