"""The helpers' multi-turn shape and the new suite options, over real HTTP against the fake SGLang server.

The fake's cache is exact (page size 1 unless /server_info says otherwise), so SGLang's rules hold on it
unless a test makes it report a wrong ``cached_tokens``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest

from precisionbot.checks import run_suite
from precisionbot.config import Config, SuiteConfig, from_mapping
from precisionbot.engines.sglang import SGLangEngine
from precisionbot.errors import ConfigError
from precisionbot.results import RunResult, Verdict
from tests.support.fake_sglang import Behaviour, fake_sglang

CONFIG = Config.default()
# The single-turn shape as it was before multi-turn existed; ``strip-bos`` is the separator precisionbot used
# then (the default is now SGLang's own ``tokenizer.encode(",")``, BOS included).
SINGLE = dataclasses.replace(
    CONFIG.suite("consistency"), samples=6, max_new_tokens=12, prompt_tokens=(40, 90), separator="strip-bos"
)
MULTI = dataclasses.replace(
    CONFIG.suite("consistency"),
    samples=4,
    branches=2,
    turns=3,
    max_new_tokens=6,
    prompt_tokens=(30, 60),
    suffix_tokens=(5, 12),
)
P, F = Verdict.PASS, Verdict.FAIL


def _run(behaviour: Behaviour, suite: SuiteConfig, config: Config = CONFIG, **kw: Any) -> tuple[RunResult, list[Any]]:
    with fake_sglang(behaviour) as (url, b):
        engine = SGLangEngine(url, batch_size=4, concurrency=1)
        try:
            return run_suite(engine, config, suite, **kw).result, list(b.bodies)
        finally:
            engine.close()


@pytest.mark.parametrize(
    ("mode", "means", "verdicts", "bodies_digest"),
    [
        (
            "decode_bias",
            [0.0009744519484905273, 0.0009744519484905273, 0.0010097601811578612],
            [P, P, P],
            "6c457766cb99a34d",
        ),
        (
            "cache_bias",
            [0.000308513677270445, 0.0009744519484905273, 0.000974451948490527],
            [P, F, F],
            "f144262ca83434c5",
        ),
    ],
)
def test_single_turn_results_are_bit_for_bit_what_they_were(
    mode: str, means: list[float], verdicts: list[Verdict], bodies_digest: str
) -> None:
    """Numbers, verdicts, every request body and the signature pinned from the code before multi-turn existed
    (with the separator it used then, ``strip-bos``)."""
    run, bodies = _run(Behaviour(mode=mode, bias=0.05), SINGLE)
    assert [c.stats["mean_k3"] for c in run.checks] == means
    assert [c.verdict for c in run.checks] == verdicts
    assert hashlib.sha256(json.dumps(bodies, sort_keys=True).encode()).hexdigest()[:16] == bodies_digest
    # strip-bos is no longer the default, so it enters the signature (the default suite keeps e9cccf6e4ce010d6).
    assert run.signature.startswith("f25e4bdd4021812b")


def test_multi_turn_branches_pass_with_every_cache_expectation_met() -> None:
    run, bodies = _run(Behaviour(), MULTI)
    assert [c.verdict for c in run.checks] == [P, P, P]
    for c in run.checks[1:]:
        assert c.cache is not None and (c.cache.kept, c.cache.total) == (4, 4)
        conv = c.extra["conversation"]
        assert conv["cache_violations"] == [] and "page_size 1" in conv["cache_rules"]
        assert conv["turns"] == 3 and conv["branches"] == 2 and conv["groups"] == 2
    # Prefill helper: the 4 warmed prefixes are two groups' shared prefixes.
    warm = next(b for b in bodies if b.get("sampling_params") and b["sampling_params"][0]["max_new_tokens"] == 0
                and "input_ids" in b and b.get("logprob_start_len") == [-1] * 4)  # fmt: skip
    assert warm["input_ids"][0] == warm["input_ids"][1] != warm["input_ids"][2] == warm["input_ids"][3]
    assert run.signature != _run(Behaviour(), dataclasses.replace(MULTI, turns=2))[0].signature


def test_a_wrong_cached_tokens_fails_with_sample_turn_expected_and_actual() -> None:
    run, _ = _run(Behaviour(cached_shift=3), dataclasses.replace(MULTI, checks=("prefill_cache_hit",)))
    (check,) = run.checks
    assert check.verdict is F
    assert check.stats["mean_k3"] == 0.0  # the numbers are fine: the cache accounting is not
    reason = check.reasons[0]
    assert "cached_tokens expectation(s) violated in 4 of 4 samples" in reason
    assert "sample 0 turn 1: expected cached_tokens=" in reason
    assert "sample 0 turn 2: expected cached_tokens in [" in " ".join(check.extra["conversation"]["cache_violations"])
    assert check.cache is not None and check.cache.kept == 0


def test_cache_asserts_off_compares_without_judging_the_cache() -> None:
    suite = dataclasses.replace(MULTI, checks=("decode_cache_hit",), cache_asserts=False)
    run, _ = _run(Behaviour(cached_shift=3), suite)
    assert run.checks[0].verdict is P and run.checks[0].cache is None


def test_mamba_rules_come_from_server_info() -> None:
    hybrid = {"page_size": 1, "uses_mamba_radix_cache": True, "mamba_track_interval": 4}
    suite = dataclasses.replace(MULTI, checks=("decode_cache_hit",), mamba_checkpoint_lag=8)
    # 2 tokens short of the exact count: a radix cache violates; a mamba checkpoint (every 4 tokens, 8 of lag
    # allowed) may lag that much.
    run, _ = _run(Behaviour(cached_shift=2, server_info_extra=hybrid), suite)
    conv = run.checks[0].extra["conversation"]
    assert "mamba rules" in conv["cache_rules"] and "track interval 4, checkpoint lag 8" in conv["cache_rules"]
    assert run.checks[0].verdict is P, conv["cache_violations"]
    run, _ = _run(Behaviour(cached_shift=20, server_info_extra=hybrid), suite)
    assert run.checks[0].verdict is F
    assert "expected cached_tokens>=" in run.checks[0].reasons[0]
    radix, _ = _run(Behaviour(cached_shift=2), suite)
    assert radix.checks[0].verdict is F


def test_sampled_decode_sends_a_seed_per_request_and_says_what_it_estimates() -> None:
    suite = dataclasses.replace(MULTI, checks=("match",), temperature=1.0, sampling_seed=5)
    run, bodies = _run(Behaviour(), suite)
    decode = [sp for b in bodies if "input_ids" in b for sp in b["sampling_params"] if sp["max_new_tokens"] > 0]
    seeds = [sp["sampling_seed"] for sp in decode]
    assert len(seeds) == 12 and len(set(seeds)) == 12  # 4 samples x 3 turns, all different
    assert all(sp["temperature"] == 1.0 for b in bodies if "input_ids" in b for sp in b["sampling_params"])
    assert any("unbiased estimate of KL" in r for r in run.checks[0].reasons)
    greedy, bodies = _run(Behaviour(), dataclasses.replace(suite, temperature=0.0))
    assert not any("sampling_seed" in sp for b in bodies if "input_ids" in b for sp in b["sampling_params"])
    assert not any("unbiased" in r for r in greedy.checks[0].reasons)


def test_request_and_replay_batches_and_interleaving() -> None:
    suite = dataclasses.replace(MULTI, checks=("decode_cache_hit",), turns=2, request_batch_size=1, replay_batch_size=2)
    run, bodies = _run(Behaviour(), suite)
    assert run.checks[0].verdict is P
    generate = [b for b in bodies if "input_ids" in b]
    flushes = [b for b in bodies if "input_ids" not in b and "text" not in b]
    assert [len(b["input_ids"]) for b in generate] == [1] * 8 + [2, 2]  # 2 turns one by one, then the replay
    assert len(flushes) == 1 + 2  # before turn 1, before each replay batch
    # Turn 1 sends each group's prompt for both branches: g0, g0, g1, g1. Turn 2 goes g0b0, g1b0, g0b1, g1b1.
    g0, g1 = generate[0]["input_ids"][0], generate[2]["input_ids"][0]
    assert g0 == generate[1]["input_ids"][0] and g0 != g1
    turn2 = [b["input_ids"][0] for b in generate[4:8]]
    assert [0 if t[: len(g0)] == g0 else 1 if t[: len(g1)] == g1 else -1 for t in turn2] == [0, 1, 0, 1]
    _, bodies = _run(Behaviour(), dataclasses.replace(suite, interleave=False))
    turn2 = [b["input_ids"][0] for b in bodies if "input_ids" in b][4:8]
    assert [0 if t[: len(g0)] == g0 else 1 for t in turn2] == [0, 0, 1, 1]


def test_per_phase_thresholds_and_the_suite_threshold() -> None:
    suite = dataclasses.replace(SINGLE, samples=4)
    config = from_mapping({"thresholds": {"default": {"kl_div_prefill": 1.0e-4}}})
    run, _ = _run(Behaviour(mode="decode_bias", bias=0.05), suite, config)
    assert [c.verdict for c in run.checks] == [P, F, P]
    assert "is not below kl_div_prefill 1.00e-04" in run.checks[1].reasons[0]  # the key that set it
    own = dataclasses.replace(suite, kl_div=1.0e-4)
    run, _ = _run(Behaviour(mode="decode_bias", bias=0.05), own)
    assert [c.verdict for c in run.checks] == [F, F, F]
    assert f"is not below suites.{suite.name}.kl_div 1.00e-04" in run.checks[0].reasons[0]
    # The deterministic profile keeps its own kl_div.
    run, _ = _run(Behaviour(), own, profile="deterministic")
    assert run.checks[0].extra["thresholds"]["kl_div"] == 1e-9


def test_upstream_separator_keeps_the_bos() -> None:
    suite = dataclasses.replace(SINGLE, samples=2, checks=("decode_cache_hit",))
    _, stripped = _run(Behaviour(), suite)
    _, upstream = _run(Behaviour(), dataclasses.replace(suite, separator="upstream"))
    _, default = _run(Behaviour(), dataclasses.replace(suite, separator=CONFIG.suite("consistency").separator))

    def turn2(bodies: list[Any]) -> list[int]:
        gens = [b for b in bodies if "input_ids" in b and b["sampling_params"][0]["max_new_tokens"] > 0]
        return list(gens[1]["input_ids"][0])

    # The fake tokenizer adds BOS (1) to text: upstream's tokenizer.encode(",") is [BOS, ","].
    assert turn2(upstream)[-2:] == [1, turn2(stripped)[-1]]
    assert len(turn2(upstream)) == len(turn2(stripped)) + 1
    assert turn2(default) == turn2(upstream)  # SGLang's behaviour is the default


def test_suite_options_are_validated() -> None:
    def suite(**kw: Any) -> SuiteConfig:
        return from_mapping({"suites": {"s": kw}}, source="p.yml").suite("s")

    assert suite(groups=3, branches=3).samples == 9
    assert suite(branches=4).samples == 32
    assert suite(branches=3).samples == 30  # the default 32, rounded down to whole groups
    assert suite(kl_div=0.003, temperature=1, sampling_seed=None).sampling_seed is None
    for bad, message in [
        ({"groups": 2, "branches": 3, "samples": 5}, "groups x branches is 2 x 3 = 6"),
        ({"samples": 10, "branches": 3}, "not a multiple of branches"),
        ({"turns": 0}, "'suites.s.turns' must be a positive integer"),
        ({"turns": 17}, "at most 16"),
        ({"temperature": 3}, "between 0 and 2"),
        ({"separator": "comma"}, "one of strip-bos, upstream"),
        ({"replay_batch_size": 0}, "replay_batch_size"),
        ({"cache_consistency": {"cut": 2}}, "did you mean 'cuts'"),
        ({"cache_consistency": {"top_k": 100}}, "at most 64"),
        ({"kl_div": -1}, "'suites.s.kl_div' must be > 0"),
    ]:
        with pytest.raises(ConfigError, match=r"p\.yml") as info:
            suite(**bad)
        assert message in str(info.value), (bad, str(info.value))


def test_sglang_unified_preset_mirrors_the_kit() -> None:
    s = Config.default().suite("sglang-unified")
    assert (s.groups, s.branches, s.turns, s.kl_div, s.temperature) == (3, 3, 3, 0.003, 1.0)
    assert s.checks == ("match", "prefill_cache_hit", "decode_cache_hit") and s.replay_batch_size == 1
