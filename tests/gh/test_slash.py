from __future__ import annotations

import pytest

from precisionbot.gh.slash import USAGE, Malformed, SlashCommand, parse_command


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/precision rerun", SlashCommand("rerun")),
        ("  /precision   RERUN  \nthanks!", SlashCommand("rerun")),
        (
            "/precision rerun models=a,b checks=match,golden samples=8",
            SlashCommand("rerun", models=("a", "b"), checks=("match", "golden"), samples=8),
        ),
        ("/precision rerun sha=ABCDEF1", SlashCommand("rerun", sha="abcdef1")),
        ("/precision rerun models=qwen3@tp4,a,a", SlashCommand("rerun", models=("qwen3@tp4", "a"))),
        ("/precision baseline", SlashCommand("baseline")),
        ("/precision baseline models=m1", SlashCommand("baseline", models=("m1",))),
        ("/precision help", SlashCommand("help")),
        # not addressed to us: ignored quietly
        ("", None),
        ("LGTM", None),
        ("please run /precision rerun", None),
        ("> /precision rerun", None),
        ("/precisionbot rerun", None),
        ("thanks\n/precision rerun", None),
    ],
)
def test_parse(body: str, expected: SlashCommand | None) -> None:
    assert parse_command(body) == expected


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("/precision", "needs a verb"),
        ("/precision deploy", "unknown verb `deploy`"),
        ("/precision rerun samples", "is not `key=value`"),
        ("/precision rerun samples=", "is not `key=value`"),
        ("/precision rerun samples=0", "from 1 to"),
        ("/precision rerun samples=-3", "from 1 to"),
        ("/precision rerun samples=1e3", "from 1 to"),
        ("/precision rerun checks=match,nope", "unknown check `nope`"),
        ("/precision rerun models=,", "comma-separated"),
        ("/precision rerun models=a;rm", "comma-separated"),
        ("/precision rerun sha=xyz1234", "hex digits"),
        ("/precision rerun sha=abc", "hex digits"),
        ("/precision rerun colour=red", "`colour` is not an option of `rerun`"),
        ("/precision baseline checks=match", "`checks` is not an option of `baseline`"),
        ("/precision help me=1", "options: none"),
        ("/precision rerun samples=4 samples=5", "given twice"),
    ],
)
def test_malformed(body: str, fragment: str) -> None:
    result = parse_command(body)
    assert isinstance(result, Malformed)
    assert fragment in result.problem


def test_echoed_user_text_cannot_break_out_or_mention() -> None:
    result = parse_command("/precision `@org/team`")
    assert isinstance(result, Malformed)
    assert "`" not in result.problem.replace("unknown verb `", "", 1).rstrip("`")
    assert "@org" not in result.problem


def test_usage_names_every_verb() -> None:
    for verb in ("rerun", "baseline", "help"):
        assert f"/precision {verb}" in USAGE
