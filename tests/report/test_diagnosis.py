"""The diagnosis as a table of cases: which codes a pattern of results must (and must not) produce."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from precisionbot.report import diagnose
from precisionbot.results import CheckResult, SampleSummary, Verdict, WorstPosition
from tests.report import scenarios

P, F, INC = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE


def chk(
    name: str,
    verdict: Verdict,
    *,
    diverging: Sequence[int] = (),
    n: int = 32,
    onset: int = 0,
    contiguous: bool = True,
    worst: Sequence[tuple[float, float | None, bool | None]] = (),
    **stats: Any,
) -> CheckResult:
    """A check; ``diverging`` samples get ``onset``; ``worst`` rows are (delta, top-2 gap, flip)."""
    if verdict is F and not diverging:
        diverging = range(n)
    return CheckResult(
        name=name,
        verdict=verdict,
        stats={"p99": 0.5 if verdict is F else 2e-6, "max": 0.9 if verdict is F else 2e-5, **stats},
        worst=tuple(
            WorstPosition(0, 10 + i, 5, " tok", -0.5, -0.5 - d, d, d * d / 2, margin_ref=g, flip=f)
            for i, (d, g, f) in enumerate(worst)
        ),
        samples=scenarios.samples(n, diverging=diverging, onset=onset, contiguous=contiguous)
        if verdict is not INC
        else (),
    )


def codes(checks: Sequence[CheckResult], **kwargs: Any) -> list[str]:
    return [d.code for d in diagnose(checks, **kwargs)]


CASES: list[tuple[str, list[CheckResult], set[str], set[str]]] = [
    (
        "only prefill_cache_hit: the restore path",
        [chk("match", P), chk("prefill_cache_hit", F), chk("decode_cache_hit", P)],
        {"prefill_restore", "onset_first_token", "global"},
        {"arithmetic", "decode_state", "noise", "onset_mid_generation", "concentrated"},
    ),
    (
        "prefill and decode cache hits: still the restore path (decode's turn 2 restores a prefix too)",
        [chk("match", P), chk("prefill_cache_hit", F), chk("decode_cache_hit", F)],
        {"prefill_restore"},
        {"arithmetic", "decode_state"},
    ),
    (
        "only decode_cache_hit, from mid-generation, in two requests: decode-written state",
        [
            chk("match", P),
            chk("prefill_cache_hit", P),
            chk("decode_cache_hit", F, diverging=(17, 29), onset=212, contiguous=False),
        ],
        {"decode_state", "onset_mid_generation", "concentrated"},
        {"prefill_restore", "arithmetic", "onset_first_token", "global"},
    ),
    (
        "match diverged: arithmetic, every helper inherits it",
        [chk("match", F), chk("prefill_cache_hit", F), chk("decode_cache_hit", F)],
        {"arithmetic"},
        {"prefill_restore", "decode_state"},
    ),
    (
        "batch_invariance failed: arithmetic",
        [chk("match", P), chk("batch_invariance", F)],
        {"arithmetic"},
        {"prefill_restore", "noise"},
    ),
    (
        "a third of the samples: neither concentrated nor global",
        [chk("match", P), chk("prefill_cache_hit", F, diverging=range(12))],
        {"prefill_restore"},
        {"concentrated", "global"},
    ),
    (
        "golden alone, a few documents: no onset reading (teacher forcing has no generation)",
        [chk("match", P), chk("golden", F, n=8, diverging=(3,), onset=40, contiguous=False)],
        {"concentrated"},
        {"onset_first_token", "onset_mid_generation", "prefill_restore", "arithmetic", "noise"},
    ),
    (
        "a flip across a 0.46-nat gap: systematic",
        [chk("golden", F, worst=[(0.51, 0.46, True)])],
        {"systematic_flip"},
        set(),
    ),
    (
        "a flip across a 0.2-nat gap: unattributable, not systematic",
        [chk("golden", F, worst=[(0.05, 0.2, True)])],
        set(),
        {"systematic_flip"},
    ),
    (
        "a flip at 0.35 nats (between the two thresholds): not systematic",
        [chk("golden", F, worst=[(0.05, 0.35, True)])],
        set(),
        {"systematic_flip"},
    ),
    (
        "a large gap without a flip: not a flip finding",
        [chk("golden", F, worst=[(0.5, 2.0, False)])],
        set(),
        {"systematic_flip"},
    ),
    (
        "41 flips where noise explains 4.2",
        [chk("golden", F, flips=41, expected_flips=4.2)],
        {"excess_flips"},
        {"noise"},
    ),
    (
        "3 flips where noise explains 3.4",
        [chk("match", P), chk("golden", P, flips=3, expected_flips=3.4)],
        {"noise"},
        {"excess_flips", "systematic_flip"},
    ),
    (
        "all pass: noise",
        [chk("match", P), chk("prefill_cache_hit", P), chk("decode_cache_hit", P), chk("golden", P)],
        {"noise"},
        {"prefill_restore", "decode_state", "arithmetic", "global", "concentrated", "onset_first_token"},
    ),
    (
        "nothing could judge: no finding at all",
        [chk("prefill_cache_hit", INC), chk("golden", INC)],
        set(),
        {"noise", "prefill_restore"},
    ),
]


@pytest.mark.parametrize(("checks", "must", "must_not"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_diagnosis_table(checks: list[CheckResult], must: set[str], must_not: set[str]) -> None:
    found = codes(checks)
    assert must <= set(found), found
    assert not (must_not & set(found)), found
    assert len(found) == len(set((d.code, d.check) for d in diagnose(checks)))  # no duplicate finding


def test_the_helper_finding_comes_first() -> None:
    checks = [chk("match", P), chk("prefill_cache_hit", F, worst=[(0.51, 0.455, True)])]
    found = diagnose(checks)
    assert found[0].code == "prefill_restore"
    assert "match passes" in found[0].text and "0.51 nats" in found[0].text
    assert found[0].check == "prefill_cache_hit"


def test_match_not_run_leaves_arithmetic_open() -> None:
    (first, *_) = diagnose([chk("prefill_cache_hit", F)])
    assert first.code == "prefill_restore" and "not ruled out" in first.text


def test_concentrated_names_samples_with_prompt_and_cached_tokens() -> None:
    c = chk("decode_cache_hit", F, diverging=(17, 29), onset=212, contiguous=False)
    (finding,) = [d for d in diagnose([c]) if d.code == "concentrated"]
    # scenarios.samples: prompt 1536 + 97 i, cached 1024 + 64 i.
    assert "sample 17 (prompt 3,185 tokens, 2,112 cached" in finding.text
    assert "sample 29 (prompt 4,349 tokens, 2,880 cached" in finding.text
    assert finding.text.index("sample 17") < finding.text.index("sample 29")  # worst first


def test_onset_mid_generation_reports_where() -> None:
    c = chk("decode_cache_hit", F, onset=212, contiguous=False)
    (finding,) = [d for d in diagnose([c]) if d.code.startswith("onset")]
    assert finding.code == "onset_mid_generation" and "212" in finding.text


def test_systematic_flip_names_the_token_visibly() -> None:
    c = chk("golden", F, worst=[(0.51, 0.455, True)])
    (finding,) = [d for d in diagnose([c]) if d.code == "systematic_flip"]
    assert "“·tok”" in finding.text and "0.455 nats" in finding.text


def test_against_the_baseline_and_the_previous_run() -> None:
    now = [chk("match", P, p99=2e-6), chk("prefill_cache_hit", F, p99=0.5)]
    base = {"match": {"p99": 1.8e-6}, "prefill_cache_hit": {"p99": 2.5e-6}}
    previous = scenarios.run([chk("match", P, p99=2e-6), chk("prefill_cache_hit", P, p99=2.4e-6)])
    found = diagnose(now, baseline_stats=base, previous=previous)
    vs_base = [d for d in found if d.code == "vs_baseline"]
    assert [d.check for d in vs_base] == ["prefill_cache_hit"]  # match moved by < 2×: not worth a sentence
    assert "200,000×" in vs_base[0].text
    (vs_prev,) = [d for d in found if d.code == "vs_previous"]
    assert vs_prev.text.startswith("prefill_cache_hit: pass → fail since the previous run")


def test_still_failing_but_much_better_than_the_previous_run() -> None:
    previous = scenarios.run([chk("prefill_cache_hit", F, p99=0.5)])
    (finding,) = [
        d for d in diagnose([chk("prefill_cache_hit", F, p99=0.05)], previous=previous) if d.code == "vs_previous"
    ]
    assert "still fail" in finding.text and "0.5 → 0.05" in finding.text


def test_diagnosis_round_trips_through_result_json() -> None:
    run = scenarios.prefill_restore()[0].run
    run = run.with_diagnosis(diagnose(run.checks))
    again = type(run).from_json(run.to_json())
    assert again.diagnosis == run.diagnosis


def test_samples_without_divergence_give_no_spread_reading() -> None:
    c = CheckResult(
        "golden",
        F,
        stats={"p99": 0.5},
        samples=tuple(SampleSummary(i, 100, 10, 0.0, 0.0, None, False) for i in range(4)),
    )
    assert not {"global", "concentrated", "onset_first_token"} & set(codes([c]))


def test_bit_identical_paths_say_so() -> None:
    (finding,) = diagnose([chk("match", P, max=0.0, p99=0.0)])
    assert finding.code == "noise" and "bit-identical" in finding.text


def test_a_flip_without_token_text_names_the_token_id() -> None:
    w = WorstPosition(2, 1018, 101, "", -5.19, -4.93, -0.26, 0.03, margin_ref=0.53, flip=True)
    c = CheckResult("golden", F, stats={"p99": 0.1}, worst=(w,))
    (finding,) = [d for d in diagnose([c]) if d.code == "systematic_flip"]
    assert "(scored token id 101, gap 0.53 nats)" in finding.text


@pytest.mark.parametrize("flips", [float("nan"), float("inf")])
def test_a_non_finite_flip_count_is_ignored_not_a_crash(flips: float) -> None:
    # result.json can carry "NaN"/"Infinity" (restored as floats); the report must still render.
    codes = {d.code for d in diagnose([chk("golden", F, flips=flips, expected_flips=1.0)])}
    assert "excess_flips" not in codes
