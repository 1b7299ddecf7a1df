"""Speculative decoding in the builtin engine (speculative.py): greedy parity, exact rollback, counters, and what
each spec fault does to the numbers the engine reports. Through real HTTP, test-sized (a few prompts of 24
new tokens)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from precisionbot.builtin.options import EngineOptions, parse_fault
from precisionbot.builtin.speculative import ngram_drafts
from precisionbot.engines.base import GenerateRequest, Generation
from precisionbot.engines.builtin import BuiltinEngine
from precisionbot.errors import ConfigError

TEXTS = (
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.",
    "In the beginning there was a word, and the word was",
    "Once upon a time, in a land far away, there lived a",
)
NEW = 24


def _run(options: EngineOptions, temperature: float = 0.0) -> tuple[list[Generation], dict[str, object]]:
    engine = BuiltinEngine(options=options, batch_size=4, concurrency=1)
    try:
        prompts = engine.tokenize(TEXTS)
        requests = [
            GenerateRequest(p, NEW, temperature=temperature, top_logprobs_num=2, sampling_seed=11 * i + 1)
            for i, p in enumerate(prompts)
        ]
        gens = engine.generate(requests)
        state = engine.http.json_call("GET", "/server_info", what="test")["internal_states"][0]
        return gens, state
    finally:
        engine.close()


def _spec(preset: str, *faults: str, algorithm: str = "NGRAM", exact: bool = True) -> EngineOptions:
    return EngineOptions(
        preset=preset,
        enable_deterministic_inference=exact,
        speculative_algorithm=algorithm,
        faults=tuple(parse_fault(f) for f in faults),
    )


def _plain(preset: str, exact: bool = True) -> EngineOptions:
    return EngineOptions(preset=preset, enable_deterministic_inference=exact)


def _max_delta(a: Sequence[Generation], b: Sequence[Generation]) -> float:
    return max(float(np.max(np.abs(x.output_logprobs - y.output_logprobs))) for x, y in zip(a, b, strict=True))


def _same_tokens(a: Sequence[Generation], b: Sequence[Generation]) -> bool:
    return all(x.output_ids == y.output_ids for x, y in zip(a, b, strict=True))


def test_ngram_drafts_follow_the_latest_match_of_the_longest_suffix() -> None:
    assert ngram_drafts([5, 6, 7, 1, 5, 6], 2) == [7, 1]
    assert ngram_drafts([1, 2, 9, 1, 2, 8, 1, 2], 3) == [8, 1, 2]  # the later occurrence wins
    assert ngram_drafts([1, 2, 3], 3) == []
    assert ngram_drafts([4, 4], 5) == [4]


@pytest.mark.parametrize(("preset", "algorithm"), [("tiny", "NGRAM"), ("hybrid", "NGRAM"), ("hybrid", "STANDALONE")])
def test_exact_engine_speculates_bit_identically_and_counts_acceptance(preset: str, algorithm: str) -> None:
    # Deterministic inference: prefill = decode, so a verify extend with exact rollback (KV and, on the hybrid
    # preset, the recurrent state) gives the plain decode's numbers to the bit.
    plain, _ = _run(_plain(preset))
    spec, state = _run(_spec(preset, algorithm=algorithm))
    assert _same_tokens(plain, spec)
    assert _max_delta(plain, spec) == 0.0
    assert state["speculative_algorithm"] == algorithm
    steps, drafts, accepted = state["spec_verify_ct"], state["spec_draft_token_num"], state["spec_accept_token_num"]
    assert isinstance(steps, int) and isinstance(drafts, int) and isinstance(accepted, int)
    assert 0 < accepted <= drafts and steps < len(TEXTS) * (NEW - 1)  # fewer verifies than tokens: it accepted
    assert state["avg_spec_accept_length"] == pytest.approx(1 + accepted / steps, abs=1e-6)
    # Each request's own counters (SGLang's meta_info) add up to the server's: nothing else ran.
    per_request = [g.spec_counts for g in spec]
    assert all(c is not None for c in per_request) and all(g.spec_counts is None for g in plain)
    assert tuple(map(sum, zip(*per_request, strict=True))) == (steps, drafts, accepted)  # type: ignore[arg-type]
    # Every verify emits its accepted drafts and one token of its own; the first token comes from the prefill.
    assert all(len(g.output_ids) == 1 + c[0] + c[2] for g, c in zip(spec, per_request, strict=True) if c)


def test_spec_state_rollback_moves_the_hybrid_logprobs() -> None:
    plain, _ = _run(_plain("hybrid"))
    spec, _ = _run(_spec("hybrid", "spec-state-rollback"))
    assert _max_delta(plain, spec) > 1e-3 or not _same_tokens(plain, spec)


@pytest.mark.parametrize("fault", ["spec-kv-rollback", "spec-verify-offbyone"])
def test_kv_and_position_faults_move_the_logprobs(fault: str) -> None:
    plain, _ = _run(_plain("tiny"))
    spec, _ = _run(_spec("tiny", fault))
    firsts = [x.output_logprobs[: len(x.output_ids) // 2] - y.output_logprobs[: len(x.output_ids) // 2]
              for x, y in zip(plain, spec, strict=True)]  # fmt: skip
    assert not _same_tokens(plain, spec) or max(float(np.max(np.abs(d))) for d in firsts) > 1e-3


def test_spec_bonus_logprob_keeps_the_tokens_and_moves_their_logprobs() -> None:
    plain, _ = _run(_plain("tiny"))
    spec, _ = _run(_spec("tiny", "spec-bonus-logprob", algorithm="STANDALONE"))
    assert _same_tokens(plain, spec)
    assert _max_delta(plain, spec) > 0.1


def test_spec_accept_loose_emits_tokens_the_target_does_not_rank_first() -> None:
    spec, _ = _run(_spec("tiny", "spec-accept-loose"))
    top1 = np.concatenate([g.output_top.ids[:, 0] for g in spec if g.output_top is not None])
    emitted = np.concatenate([np.asarray(g.output_ids) for g in spec])
    assert np.count_nonzero(top1 != emitted) > 0


def test_spec_draft_degraded_lowers_acceptance_with_identical_outputs() -> None:
    clean, clean_state = _run(_spec("tiny"))
    bad, bad_state = _run(_spec("tiny", "spec-draft-degraded"))
    assert _same_tokens(clean, bad) and _max_delta(clean, bad) == 0.0
    assert float(bad_state["avg_spec_accept_length"]) < float(clean_state["avg_spec_accept_length"])  # type: ignore[arg-type]


def test_spec_greedy_at_temperature_is_invisible_at_temperature_zero() -> None:
    clean, _ = _run(_spec("tiny"))
    bad, _ = _run(_spec("tiny", "spec-greedy-at-temperature"))
    assert _same_tokens(clean, bad) and _max_delta(clean, bad) == 0.0


def test_a_spec_fault_switches_speculation_on_and_bad_options_name_the_fix() -> None:
    assert EngineOptions(faults=(parse_fault("spec-kv-rollback"),)).spec_algorithm == "NGRAM"
    assert EngineOptions(faults=(parse_fault("spec-bonus-logprob"),)).spec_algorithm == "STANDALONE"
    assert EngineOptions().spec_algorithm is None
    with pytest.raises(ConfigError, match="speculative_algorithm must be one of NGRAM, STANDALONE"):
        EngineOptions(speculative_algorithm="EAGLE")
    with pytest.raises(ConfigError, match=r"speculative_num_draft_tokens must be 2\.\.16"):
        EngineOptions(speculative_algorithm="NGRAM", speculative_num_draft_tokens=1)
    with pytest.raises(ConfigError, match="use speculative_algorithm STANDALONE"):
        EngineOptions(speculative_algorithm="NGRAM", faults=(parse_fault("spec-bonus-logprob"),))
    with pytest.raises(ConfigError, match="drop --model-preset tiny"):
        EngineOptions(preset="tiny", faults=(parse_fault("spec-state-rollback"),))
