"""``/precision accept reason="..."`` and ``/precision bisect [good=SHA]``: parsing and the gate (pure), and
accept's branch checks through real PyGithub over HTTP to the fake GitHub API."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from precisionbot.gh.api import PullInfo
from precisionbot.gh.gate import Facts, decide, needs
from precisionbot.gh.slash import Malformed, SlashCommand, parse_command
from tests.commands.test_github_plan import comment_payload, replies, run
from tests.gh.test_gate import BOT, CONFIG, HEAD, comment_event, facts, pull
from tests.support.fake_github import FakeGitHub

MERGED = "m" * 40
MAIN_HEAD = "e" * 40


def merged_pull(base_ref: str = "main") -> PullInfo:
    return replace(pull(state="closed"), merged=True, merge_commit_sha=MERGED, base_ref=base_ref)


def merged_facts(**kw: Any) -> Facts:
    """A maintainer's accept of a PR merged into main whose merge commit main still holds."""
    base: dict[str, Any] = dict(permission="maintain", pull=merged_pull(), default_head=MAIN_HEAD)
    return facts(**{**base, "merge_status": "behind", **kw})


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
    assert n.pull and n.permission_of == "alice" and n.default_head and n.merge_in_default
    assert not decide(comment_event(body), merged_facts(permission="write"), CONFIG).run
    refused = decide(comment_event(body), facts(permission="maintain", pull=pull()), CONFIG)
    assert not refused.run and refused.reply and "merge it, then comment again" in refused.reply
    d = decide(comment_event(body), merged_facts(), CONFIG)
    assert d.run and d.mode == "accept" and d.sha == MERGED and d.suite == "baseline" and d.pr == 7
    assert d.accept_reason == "fp32 router GEMM" and d.accepted_by == "alice"


@pytest.mark.parametrize(
    ("event_kw", "facts_kw", "runs", "reply"),
    [
        ({}, {"merge_status": "identical"}, True, None),  # main's head is the merge commit itself
        ({}, {"merge_status": "behind"}, True, None),  # main moved on past the merge
        # P1: a writer merges into a branch of their own, or a backport merges into a release branch.
        ({}, {"pull": merged_pull("release-x")}, False, "merged into `release-x`, not `main`: only merges into main"),
        ({"default_branch": None}, {}, False, "not `the default branch`"),
        # Merged into main, but main no longer holds it (force-pushed), or it never reached main's head.
        ({}, {"merge_status": "diverged"}, False, f"`{MERGED}` of PR #7 is not in the history of `main`"),
        ({}, {"merge_status": "ahead"}, False, "compares them as ahead"),
        ({}, {"merge_status": None}, False, "compares them as unknown"),
    ],
)
def test_accept_takes_only_merges_that_the_default_branch_holds(
    event_kw: dict[str, Any], facts_kw: dict[str, Any], runs: bool, reply: str | None
) -> None:
    d = decide(comment_event('/precision accept reason="x"', **event_kw), merged_facts(**facts_kw), CONFIG)
    assert d.run is runs
    if reply is not None:
        assert d.reactions == ("eyes", "confused") and d.reply is not None and reply in d.reply, d.reply


ACCEPT = '/precision accept reason="fp32 router GEMM"'
PR_HEAD = "1" * 40


def _merged_into_main(fake: FakeGitHub, merge_sha: str = "2" * 40, **kw: Any) -> None:
    fake.add_pull(7, head_sha=PR_HEAD, **kw)
    fake.add_commit(PR_HEAD, parents=["d" * 40])
    fake.merge_pull(7, merge_sha)
    fake.set_permission("alice", "write", role_name="maintain")


def _accept(fake: FakeGitHub, tmp_path: Path) -> dict[str, str]:
    comment = fake.add_comment(7, ACCEPT)
    outputs, _ = run(fake, tmp_path, "issue_comment", comment_payload(fake, comment))
    return outputs


def test_http_accept_of_a_merge_into_main_runs_its_merge_commit(fake_github: FakeGitHub, tmp_path: Path) -> None:
    _merged_into_main(fake_github)
    fake_github.add_commit("3" * 40, parents=["2" * 40])  # main moved on since: the merge is still in it
    fake_github.set_branch("main", "3" * 40)
    outputs = _accept(fake_github, tmp_path)
    assert outputs["run"] == "true" and outputs["mode"] == "accept" and outputs["sha"] == "2" * 40
    (compare,) = fake_github.calls("GET", r"/compare/")
    assert compare.path.endswith(f"/compare/{'3' * 40}...{'2' * 40}")


def test_http_accept_of_a_pr_merged_into_another_branch_is_refused(fake_github: FakeGitHub, tmp_path: Path) -> None:
    """P1: a writer opens a PR against a branch of their own, merges it, and asks a maintainer to accept."""
    fake_github.set_branch("release-x", "d" * 40)
    _merged_into_main(fake_github, base_ref="release-x")
    outputs = _accept(fake_github, tmp_path)
    assert outputs["run"] == "false"
    (reply,) = replies(fake_github)
    assert "PR #7 was merged into `release-x`, not `main`: only merges into main may be accepted" in reply
    assert not fake_github.calls("GET", r"/compare/")


def test_http_accept_after_main_was_force_pushed_past_the_merge_is_refused(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    """Merged into main, then main force-pushed to a history without the merge commit."""
    _merged_into_main(fake_github)
    fake_github.add_commit("4" * 40, parents=["d" * 40])
    fake_github.set_branch("main", "4" * 40)
    outputs = _accept(fake_github, tmp_path)
    assert outputs["run"] == "false"
    (reply,) = replies(fake_github)
    assert f"`{'2' * 40}` of PR #7 is not in the history of `main`" in reply and "as diverged" in reply


def test_http_accept_of_a_merge_main_never_reached_is_refused(fake_github: FakeGitHub, tmp_path: Path) -> None:
    """GitHub reports a merge into main, yet main's head is behind it (the branch was reset under the merge):
    the merge commit is ahead of main, so main never ran it."""
    _merged_into_main(fake_github)
    fake_github.set_branch("main", "d" * 40)
    outputs = _accept(fake_github, tmp_path)
    assert outputs["run"] == "false"
    assert "as ahead" in replies(fake_github)[0]


def test_bisect_needs_the_rerun_role_and_never_runs_a_fork() -> None:
    assert not decide(comment_event("/precision bisect"), facts(permission="triage"), CONFIG).run
    d = decide(comment_event("/precision bisect good=abcdef1"), facts(permission="write"), CONFIG)
    assert d.run and d.mode == "bisect" and d.sha == HEAD and d.bisect_good == "abcdef1" and d.suite == "pr"
    fork = decide(comment_event("/precision bisect"), facts(permission="admin", pull=pull(fork=True)), CONFIG)
    assert not fork.run and fork.reply and "not for PRs from forks" in fork.reply
