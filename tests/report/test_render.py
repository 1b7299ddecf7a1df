from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources

import jinja2
import pytest

from precisionbot.report import (
    COMMENT_MARKER,
    ReportLinks,
    comment_marker,
    render_comment,
    render_json,
    render_summary,
)
from precisionbot.report.render import environment
from precisionbot.results import RunResult
from tests.report import markdown, scenarios


def test_templates_load_from_the_package() -> None:
    root = resources.files("precisionbot") / "templates"
    for name in ("comment.md.j2", "summary.md.j2", "_section.md.j2"):
        assert (root / name).is_file()
    assert environment().undefined is jinja2.StrictUndefined


def test_a_template_naming_a_missing_field_fails_loudly() -> None:
    template = environment().from_string("{{ view.no_such_field }}")
    with pytest.raises(jinja2.UndefinedError):
        template.render(view=object())


def test_comment_marker() -> None:
    assert comment_marker() == COMMENT_MARKER == "<!-- precisionbot:comment -->"
    assert comment_marker("nightly") == "<!-- precisionbot:comment suite=nightly -->"
    assert comment_marker("a --> <b>") == "<!-- precisionbot:comment suite=a-b -->"
    text = render_comment(scenarios.all_pass(), marker=comment_marker("pr"))
    assert text.startswith("<!-- precisionbot:comment suite=pr -->\n")


def test_summary_has_no_marker_and_open_details() -> None:
    text = render_summary(scenarios.prefill_restore())
    assert COMMENT_MARKER not in text
    assert "<details open>" in text


def test_links_are_shown_and_only_http() -> None:
    links = ReportLinks(run_url="https://github.com/o/r/actions/runs/1", artifact_url="javascript:alert(1)")
    text = render_comment(scenarios.all_pass(), links=links)
    assert "[workflow run](https://github.com/o/r/actions/runs/1)" in text
    assert "javascript" not in text
    spaced = render_comment(scenarios.all_pass(), links=ReportLinks(run_url="https://x/a b)c"))
    assert "(https://x/a%20b%29c)" in spaced


def test_no_sections_is_an_error() -> None:
    with pytest.raises(ValueError, match="no sections"):
        render_comment([])


def test_json_carries_every_section_and_the_recomputed_diagnosis() -> None:
    sections = scenarios.matrix()
    data = json.loads(render_json(sections))
    assert data["verdict"] == "fail"
    assert [s["label"] for s in data["sections"]] == ["Qwen3-8B tp2", "Llama-3.1-70B tp8"]
    second = RunResult.from_dict(data["sections"][1]["result"])
    assert [d.code for d in second.diagnosis][:1] == ["decode_state"]
    assert second.checks == sections[1].run.checks


def test_the_stored_diagnosis_is_used_when_there_are_no_checks() -> None:
    run = scenarios.run([])
    from precisionbot.results import Diagnosis

    run = replace(run, diagnosis=(Diagnosis("noise", "stored"),))
    data = json.loads(render_json([scenarios.ReportSection("x", run)]))
    assert data["sections"][0]["result"]["diagnosis"] == [{"code": "noise", "text": "stored"}]
    assert data["verdict"] == "inconclusive"


def test_previous_run_adds_a_column() -> None:
    text = render_comment(scenarios.golden_failure())
    (table, *_) = markdown.tables(text)
    assert table.header[-3:] == ["vs baseline (p99)", "vs previous (p99)", "Why"]
    golden = next(r for r in table.rows if r[0] == "golden")
    assert golden[-2] == "pass → fail" and golden[-3] == "×55 ↑ (baseline 3.8e-05)"


def test_a_huge_limit_changes_nothing_and_a_tiny_one_still_gives_a_valid_comment() -> None:
    sections = scenarios.prefill_restore()
    assert render_comment(sections) == render_comment(sections, max_chars=10**9)
    tiny = render_comment(sections, max_chars=400)
    assert len(tiny.encode()) <= 400 and tiny.startswith(COMMENT_MARKER)


def test_environment_line_takes_the_baseline_from_the_golden_check() -> None:
    from precisionbot.results import CheckResult, Verdict

    golden = CheckResult(
        "golden",
        Verdict.PASS,
        stats={"p99": 1e-6, "kl_p99": 2e-5, "band": {"pairs": 1, "kl_p99": 1e-5}},
        extra={"baseline": {"run_id": "r1", "engine_commit": "abcdef0123", "created": "2026-11-28T10:00:00+00:00"}},
    )
    run = scenarios.run([golden], baseline=None, model=None, model_path="builtin-tiny", suite="pr")
    text = render_comment([scenarios.ReportSection("x", run)])
    assert "model builtin-tiny" in text and "suite pr" in text
    assert "baseline abcdef0 from 2026-11-28" in text
    row = next(r for r in markdown.tables(text)[0].rows if r[0] == "golden")
    assert row[-2] == "×2 ↑ (band 1e-05)"  # KL p99 against the noise band's


def test_every_template_ships_in_the_wheel() -> None:
    import fnmatch
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "precisionbot"
    ]
    for name in ("comment.md.j2", "summary.md.j2", "_section.md.j2"):
        assert any(fnmatch.fnmatch(f"templates/{name}", p) for p in patterns), name
    assert (root / "precisionbot" / "templates").resolve() == (root / "templates").resolve()


def test_positions_without_any_difference_are_not_listed() -> None:
    from precisionbot.results import CheckResult, Verdict, WorstPosition

    same = WorstPosition(0, 1, 34, "x", -5.0, -5.0, 0.0, 0.0, margin_ref=1.0, flip=False)
    diff = WorstPosition(0, 2, 35, "y", -5.0, -5.1, 0.1, 0.005, margin_ref=1.0, flip=False)
    run = scenarios.run([CheckResult("match", Verdict.PASS, stats={"max": 0.005}, worst=(same, diff))])
    text = render_summary([scenarios.ReportSection("x", run)])
    (worst,) = [t for t in markdown.tables(text) if "Token" in t.header]
    assert [r[worst.header.index("Token")] for r in worst.rows] == ["y"]
