"""The helpers' protocol (SGLang kl_test_utils semantics) and their verdicts when the engine misbehaves,
through real HTTP to a small local SGLang-shaped server."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from precisionbot.checks import run_suite
from precisionbot.config import Config
from precisionbot.engines.sglang import SGLangEngine
from precisionbot.results import Verdict
from tests.support.fake_sglang import Behaviour, fake_sglang

CONFIG = Config.default()
SUITE = dataclasses.replace(CONFIG.suite("consistency"), samples=4, max_new_tokens=6, prompt_tokens=(16, 30))


def _run(b: Behaviour, checks: tuple[str, ...] | None = None, **engine_kw: Any) -> Any:
    with fake_sglang(b) as (url, _):
        engine = SGLangEngine(url, batch_size=2, concurrency=2, backoff_s=0.01, **engine_kw)
        try:
            return run_suite(engine, CONFIG, SUITE, checks=checks)
        finally:
            engine.close()


def _gen_bodies(b: Behaviour) -> list[dict[str, Any]]:
    return [body for body in b.bodies if "input_ids" in body]


def test_match_protocol_flushes_and_replays_like_sglang() -> None:
    b = Behaviour()
    run = _run(b, checks=("match",))
    assert run.result.verdict is Verdict.PASS
    calls = [c for c in b.calls if c.startswith("POST")]
    # tokenize (text prefill), then: flush, generate (2 batches), flush, replay (2 batches)
    tail = calls[-6:]
    assert tail == ["POST /flush_cache", "POST /generate", "POST /generate"] * 2
    gen, replay = _gen_bodies(b)[:2], _gen_bodies(b)[2:]
    for body in gen:
        assert body["logprob_start_len"] == [-1, -1]
        assert all(
            sp == {"temperature": 0.0, "max_new_tokens": 6, "ignore_eos": True} for sp in body["sampling_params"]
        )
    for body in replay:
        assert body["logprob_start_len"] == [0, 0]
        assert all(sp["max_new_tokens"] == 0 and sp["temperature"] == 0.0 for sp in body["sampling_params"])
    check = run.result.checks[0]
    assert check.stats["positions"] == 4 * 6 and check.stats["samples"] == 4
    assert run.records["match"].position.min() >= 16


def test_clean_engine_passes_all_three_and_repeats() -> None:
    first = _run(Behaviour())
    second = _run(Behaviour())
    assert [c.verdict for c in first.result.checks] == [Verdict.PASS] * 3
    assert [(c.name, c.verdict, c.stats["mean_k3"]) for c in first.result.checks] == [
        (c.name, c.verdict, c.stats["mean_k3"]) for c in second.result.checks
    ]
    assert first.result.check("prefill_cache_hit").cache.kept == 4  # type: ignore[union-attr]
    assert first.result.signature == second.result.signature


def test_prefill_cache_hit_protocol() -> None:
    b = Behaviour()
    _run(b, checks=("prefill_cache_hit",))
    bodies = _gen_bodies(b)
    warm, gen = bodies[:2], bodies[2:4]
    assert all(sp["max_new_tokens"] == 0 for body in warm for sp in body["sampling_params"])
    assert all(sp["max_new_tokens"] == 6 for body in gen for sp in body["sampling_params"])
    posts = [c for c in b.calls if c.startswith("POST")]
    i = posts.index("POST /flush_cache")
    # no flush between warm-up and generation; one before the replay
    assert posts[i + 1 : i + 5] == ["POST /generate"] * 4 and posts[i + 5] == "POST /flush_cache"


def test_decode_cache_hit_builds_turn_two_from_output_and_separator() -> None:
    b = Behaviour()
    run = _run(b, checks=("decode_cache_hit",))
    assert run.result.verdict is Verdict.PASS
    bodies = _gen_bodies(b)
    turn1 = [ids for body in bodies[:2] for ids in body["input_ids"]]
    turn2 = [ids for body in bodies[2:4] for ids in body["input_ids"]]
    for prompt in turn1:  # batches arrive concurrently, in any order
        (follow,) = [t for t in turn2 if t[: len(prompt)] == prompt]
        # SGLang's tokenizer.encode(","): the fake tokenizer's BOS (1) and its ","
        assert len(follow) == len(prompt) + 6 + 2
        assert follow[-2:] == [1, 2 + (ord(",") % 38)]
    assert run.result.checks[0].cache.kept == 4  # type: ignore[union-attr]


def test_radix_cache_disabled_makes_cache_helpers_inconclusive() -> None:
    run = _run(Behaviour(disable_radix_cache=True))
    verdicts = {c.name: c for c in run.result.checks}
    assert verdicts["match"].verdict is Verdict.PASS
    for name in ("prefill_cache_hit", "decode_cache_hit"):
        assert verdicts[name].verdict is Verdict.INCONCLUSIVE
        assert "radix cache disabled" in verdicts[name].reasons[0]
    assert run.result.verdict is Verdict.INCONCLUSIVE


def test_no_cache_hits_is_inconclusive_not_pass() -> None:
    run = _run(Behaviour(never_cache=True), checks=("prefill_cache_hit", "decode_cache_hit"))
    for c in run.result.checks:
        assert c.verdict is Verdict.INCONCLUSIVE
        assert c.reasons[0].startswith("too few cache hits: 0 of 4 prompts")
        assert c.cache is not None and (c.cache.kept, c.cache.total) == (0, 4)


def test_cache_only_bias_fails_the_cache_helper() -> None:
    run = _run(Behaviour(mode="cache_bias", bias=0.5), checks=("prefill_cache_hit",))
    assert run.result.verdict is Verdict.FAIL


@pytest.mark.parametrize("mode", ["short_output", "null_output", "nan", "wrong_batch", "status500", "no_meta"])
def test_misbehaving_engine_is_inconclusive_with_reason(mode: str) -> None:
    run = _run(Behaviour(mode=mode), checks=("match",))
    check = run.result.checks[0]
    assert check.verdict is Verdict.INCONCLUSIVE
    assert check.reasons[0].startswith("could not run: ")
    assert run.result.verdict is Verdict.INCONCLUSIVE


def test_hanging_engine_is_inconclusive_quickly() -> None:
    run = _run(Behaviour(mode="hang", hang_s=2.0), checks=("match",), request_timeout_s=0.2)
    assert run.result.checks[0].verdict is Verdict.INCONCLUSIVE
    assert "within 0.2 s" in run.result.checks[0].reasons[0]


def test_layers_without_dumps_is_inconclusive_naming_the_keys() -> None:
    run = _run(Behaviour(), checks=("layers",))
    assert run.result.checks[0].verdict is Verdict.INCONCLUSIVE
    assert "layers.dump_dir" in run.result.checks[0].reasons[0]
