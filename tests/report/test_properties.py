"""Any result the engine side can produce renders: no exception, within the limit, tables intact, no raw HTML."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precisionbot.report import ReportSection, diagnose, render_comment, render_json
from precisionbot.results import CacheStats, CheckResult, EngineInfo, RunResult, SampleSummary, Verdict, WorstPosition
from tests.report import markdown

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=10),
    st.just(0.0),
)
texts = st.text(max_size=30)


@st.composite
def worst_positions(draw: st.DrawFn) -> WorstPosition:
    lp_ref, lp_test = draw(numbers), draw(numbers)
    return WorstPosition(
        sample=draw(st.integers(0, 100)),
        position=draw(st.integers(0, 10**6)),
        token_id=draw(st.integers(0, 200_000)),
        token_text=draw(texts),
        lp_ref=lp_ref,
        lp_test=lp_test,
        delta=draw(numbers),
        k3=draw(numbers),
        margin_ref=draw(st.none() | numbers),
        flip=draw(st.none() | st.booleans()),
    )


@st.composite
def checks(draw: st.DrawFn) -> CheckResult:
    n = draw(st.integers(0, 6))
    samples = tuple(
        SampleSummary(
            i,
            draw(st.integers(0, 10**5)),
            10,
            draw(numbers),
            draw(numbers),
            draw(st.none() | st.integers(0, 500)),
            draw(st.booleans()),
            draw(st.none() | st.integers(0, 10**5)),
        )
        for i in range(n)
    )
    keys = st.sampled_from(
        [
            "positions",
            "mean_k3",
            "p99",
            "max",
            "flips",
            "confident_flips",
            "expected_flips",
            "kl_p99",
            "kl_p50",
            "kl_max",
            "flips_p_value",
        ]
    )
    stats = draw(st.dictionaries(keys, numbers | st.integers(0, 10**6), max_size=8))
    stats["frac_over"] = {"1e-2": draw(numbers)}
    stats["flips_by_margin"] = draw(st.sampled_from([None, {"0-0.1": 3}, [{"lo": 1, "hi": math.inf, "flips": 2}]]))
    return CheckResult(
        name=draw(st.sampled_from(["match", "prefill_cache_hit", "decode_cache_hit", "golden", "batch_invariance"])),
        verdict=draw(st.sampled_from(list(Verdict))),
        reasons=tuple(draw(st.lists(texts, max_size=2))),
        stats=stats,
        cache=draw(st.none() | st.builds(CacheStats, st.integers(0, 64), st.integers(0, 64))),
        worst=tuple(draw(st.lists(worst_positions(), max_size=12))),
        samples=samples,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(checks(), min_size=0, max_size=5), min_size=1, max_size=3), texts)
def test_any_result_renders_safely(matrix: list[list[CheckResult]], label: str) -> None:
    sections = [
        ReportSection(
            label=label,
            run=RunResult.from_checks(
                cs, signature="s", engine=EngineInfo("http://x", "builtin"), environment={"model": label, "gpu": label}
            ),
        )
        for cs in matrix
    ]
    for s in sections:
        diagnose(s.run.checks)
    text = render_comment(sections, max_chars=8_000)
    assert len(text.encode("utf-8")) <= 8_000
    for group in markdown.raw_cell_counts(text):
        assert len(set(group)) == 1
    for fragment in markdown.raw_html(text):
        assert markdown.ALLOWED_HTML.match(fragment), fragment
    render_json(sections)
