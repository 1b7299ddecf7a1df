"""``/precision accept reason="..."`` and ``/precision bisect [good=SHA]``: parsing and the gate. Pure."""

from __future__ import annotations

from dataclasses import replace

import pytest

from precisionbot.gh.api import PullInfo
from precisionbot.gh.gate import decide, needs
from precisionbot.gh.slash import Malformed, SlashCommand, parse_command
from tests.gh.test_gate import BOT, CONFIG, HEAD, comment_event, facts, pull

MERGED = "m" * 40


def merged_pull() -> PullInfo:
    return replace(pull(state="closed"), merged=True, merge_commit_sha=MERGED)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('/precision accept reason="fp32 router  GEMM"', SlashCommand("accept", reason="fp32 router GEMM")),
        ("/precision accept reason=intended models=a", SlashCommand("accept", models=("a",), reason="intended")),
        ("/precision bisect", SlashCommand("bisect")),
        ("/precision bisect good=ABCDEF1", SlashCommand("bisect", good="abcdef1")),
        ("/precision accept", "`accept` needs `reason="),
        ('/precision accept reason=""', "`accept` needs `reason="),
        ('/precision rerun reason="x y"', "only `reason` takes a quoted value"),
        ("/precision bisect good=main", "`good` must be 7 to 40 hex digits"),
        ("/precision bisect reason=x", "`reason` is not an option of `bisect`"),
        ('/precision accept reason="' + "x" * 501 + '"', "longer than 500"),
    ],
)
def test_parse(body: str, expected: SlashCommand | str) -> None:
    got = parse_command(body)
    if isinstance(expected, str):
        assert isinstance(got, Malformed) and expected in got.problem, got
    else:
        assert got == expected


def test_accept_needs_the_baseline_role_and_a_merged_pr() -> None:
    body = '/precision accept reason="fp32 router GEMM"'
    n = needs(comment_event(body), CONFIG, BOT)
    assert n.pull and n.permission_of == "alice"
    assert not decide(comment_event(body), facts(permission="write", pull=merged_pull()), CONFIG).run
    refused = decide(comment_event(body), facts(permission="maintain", pull=pull()), CONFIG)
    assert not refused.run and refused.reply and "merge it, then comment again" in refused.reply
    d = decide(comment_event(body), facts(permission="maintain", pull=merged_pull()), CONFIG)
    assert d.run and d.mode == "accept" and d.sha == MERGED and d.suite == "baseline" and d.pr == 7
    assert d.accept_reason == "fp32 router GEMM" and d.accepted_by == "alice"


def test_bisect_needs_the_rerun_role_and_never_runs_a_fork() -> None:
    assert not decide(comment_event("/precision bisect"), facts(permission="triage"), CONFIG).run
    d = decide(comment_event("/precision bisect good=abcdef1"), facts(permission="write"), CONFIG)
    assert d.run and d.mode == "bisect" and d.sha == HEAD and d.bisect_good == "abcdef1" and d.suite == "pr"
    fork = decide(comment_event("/precision bisect"), facts(permission="admin", pull=pull(fork=True)), CONFIG)
    assert not fork.run and fork.reply and "not for PRs from forks" in fork.reply
