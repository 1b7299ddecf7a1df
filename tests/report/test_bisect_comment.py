"""The ``/precision bisect`` comment: strict parsing of ``bisect.json`` (written by PR code), an ambiguous answer,
and hostile strings made inert. Pure."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from precisionbot.errors import DataError
from precisionbot.report.bisect_comment import (
    MARKER,
    MAX_CELLS,
    BisectCell,
    bisect_comment,
    parse_bisect,
    render_bisect,
)
from precisionbot.report.render import COMMENT_MARKER


def test_ambiguous_answer_and_hostile_subjects_are_inert() -> None:
    payload = {
        "good": "a" * 40,
        "bad": "b" * 40,
        "commits": 3,
        "first_bad": ["c" * 40, "b" * 40],
        "max_steps": 3,
        "steps": [
            {
                "sha": "c" * 40,
                "outcome": "skip",
                "verdict": "does not build",
                "numbers": {},
                "note": "engine.install exited with code 1",
                "subject": "fix | <img src=x onerror=alert(1)> @admin",
            }
        ],
    }
    md = bisect_comment(payload)
    assert md.startswith(MARKER)
    assert f"first bad commit is one of `{'c' * 12}`, `{'b' * 12}` (the others could not be tested)" in md
    assert "<img" not in md and "&lt;img" in md and "fix &#124;" in md  # no tag, no extra table cell
    assert "@admin" not in md  # no mention
    assert md.count("\n| ") == 2  # header + one step


def payload(**top: Any) -> dict[str, Any]:
    """What ``precisionbot bisect --out`` writes for a clean answer after two steps."""
    data: dict[str, Any] = {
        "good": "a" * 40,
        "bad": "b" * 40,
        "commits": 3,
        "first_bad": ["c" * 40],
        "max_steps": 2,
        "steps": [
            {
                "sha": "c" * 40,
                "outcome": "bad",
                "verdict": "fail",
                "numbers": {"match": {"mean_k3": 2.5e-3}, "golden": {"kl_p99": 0.25}},
                "note": "failed: match",
                "cached": False,
                "subject": "attention: fp8 P",
            },
            {
                "sha": "d" * 40,
                "outcome": "good",
                "verdict": "pass",
                "numbers": {},
                "note": "",
                "cached": True,
                "subject": "refactor",
            },
        ],
    }
    data.update(top)
    return data


def with_step(**fields: Any) -> dict[str, Any]:
    data = payload()
    data["steps"][0].update(fields)
    return data


@pytest.mark.parametrize(
    ("data", "field", "why"),
    [
        ([], "the top level", "expected an object, got an array"),
        ({k: v for k, v in payload().items() if k != "steps"}, "steps", "missing"),
        (payload(good="main"), "good", "expected a full commit id"),
        (payload(bad="B" * 40), "bad", "expected a full commit id"),
        (payload(bad="b" * 64), "bad", "(40 lower-case hex digits)"),  # untrusted.FULL_SHA: what GitHub sends
        (payload(commits=0), "commits", "expected a whole number from 1"),
        (payload(commits=True), "commits", "boolean true"),
        (payload(max_steps=1.5), "max_steps", "number 1.5"),
        (payload(first_bad=[]), "first_bad", "expected 1 to 257 entries, got 0"),
        (payload(first_bad=["c" * 40, 7]), "first_bad[1]", "expected a full commit id"),
        (payload(steps=[{}] * 257), "steps", "expected 0 to 256 entries, got 257"),
        (payload(steps=["x"]), "steps[0]", "expected an object, got string 'x'"),
        (with_step(outcome="maybe"), "steps[0].outcome", "'maybe' is not one of good, bad, skip"),
        (with_step(sha=None), "steps[0].sha", "expected a full commit id"),
        (with_step(verdict=["fail"]), "steps[0].verdict", "expected a string, got an array"),
        (with_step(cached="yes"), "steps[0].cached", "expected true or false"),
        (with_step(subject={"a": 1}), "steps[0].subject", "expected a string, got an object"),
        (with_step(numbers=[]), "steps[0].numbers", "expected an object"),
        (with_step(numbers={"match": {"mean_k3": "1e-3"}}), "steps[0].numbers.match.mean_k3", "expected a number"),
        (with_step(numbers={"match": {"p99": 1.0}}), "steps[0].numbers.match", "unknown number 'p99'"),
        (with_step(numbers={"<!-- x -->": {}}), "steps[0].numbers", "is not a check name"),
        (with_step(numbers={f"c{i}": {} for i in range(33)}), "steps[0].numbers", "more than 32 checks"),
        # 400 nines: a valid JSON number that float() cannot hold (OverflowError, once an internal error)
        (with_step(numbers={"m": {"kl_p99": 10**400 - 1}}), "steps[0].numbers.m.kl_p99", "a float can hold"),
        (payload(commits=-(10**400)), "commits", "got a negative number of more than 40 digits"),
    ],
)
def test_bisect_json_is_validated_naming_the_field(data: Any, field: str, why: str) -> None:
    with pytest.raises(DataError) as info:
        parse_bisect(data)
    assert str(info.value).startswith(f"{field}: ") and why in str(info.value), str(info.value)


def test_what_bisect_writes_parses_and_renders() -> None:
    result = parse_bisect(payload(), pinned="b" * 40)
    assert result.first_bad == ("c" * 40,) and result.steps[1].cached and len(result.steps) == 2
    md = render_bisect([BisectCell("0", result)])
    assert md.startswith(MARKER + "\n### 🔎 precisionbot bisect: first bad commit `cccccccccccc` attention: fp8 P")
    assert "match mean k3 0.0025, golden KL p99 0.25" in md and "✅ good (pass) (cached)" in md


def test_a_bisect_of_another_range_than_the_pinned_head_is_refused() -> None:
    with pytest.raises(DataError, match=r"^bad: b{40} is not the commit the plan pinned \(e{40}\)"):
        parse_bisect(payload(), pinned="e" * 40)


def test_non_finite_numbers_are_shown_as_such() -> None:
    # Python's json reads NaN and Infinity, and ``bisect --out`` writes them: a commit whose logprobs are all
    # NaN has a NaN mean k3, which is the bad step's honest number, not a reason to drop the whole answer.
    data = with_step(numbers={"match": {"mean_k3": float("nan")}, "golden": {"kl_p99": float("-inf")}})
    md = render_bisect([BisectCell("0", parse_bisect(json.loads(json.dumps(data))))])
    assert "match mean k3 nan, golden KL p99 -inf" in md


HOSTILE = "<!-- precisionbot:comment -->\n<!-- precisionbot:bisect --> @org/team @alice #1 GH-2 | `x` [l](http://e.vil)"


def test_every_untrusted_string_is_inert_and_only_our_marker_remains() -> None:
    data = with_step(subject=HOSTILE, note=HOSTILE, verdict=HOSTILE)
    cells = [BisectCell(f"cell @org/team {i} <!--", parse_bisect(data)) for i in range(2)]
    cells.append(BisectCell("2", problem=f"results/2/bisect.json is missing {HOSTILE}"))
    md = render_bisect(cells, run_url="https://github.com/acme/engine/actions/runs/1")
    assert md.count("<!--") == 1 and md.startswith(MARKER) and COMMENT_MARKER not in md
    assert not re.search(r"@(?!\u200d)|(?<!&)#(?=\d)", md)  # a joiner after each @ and #N: no mention, no link
    assert "GH-\u200d2" in md and "http://" not in md  # no issue link, no autolink
    assert re.findall(r"(?<!\\)\]\(", md) == ["]("]  # one link: the run's (the PR's brackets are escaped)
    assert all(line.count(" | ") == 4 for line in md.splitlines() if line.startswith("| 1 "))  # no extra cell


def test_cells_beyond_the_cap_are_counted_not_shown() -> None:
    result = parse_bisect(payload())
    md = render_bisect([BisectCell(str(i), result) for i in range(MAX_CELLS + 5)])
    assert md.count("\n#### ") == MAX_CELLS and "*5 more result folders are not shown" in md


def test_no_result_at_all_says_so_and_links_the_run() -> None:
    md = render_bisect([], run_url="https://github.com/acme/engine/actions/runs/1")
    assert md.startswith(MARKER) and "❔ no result" in md and "(https://github.com/acme/engine/actions/runs/1)" in md
