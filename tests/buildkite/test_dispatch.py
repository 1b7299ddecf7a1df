"""From the gate's decision to the build request (``precisionbot.buildkite.dispatch``, pure)."""

from __future__ import annotations

from precisionbot.buildkite.api import Build
from precisionbot.buildkite.dispatch import build_request, head_moved, not_started, refuse_mode, started
from precisionbot.gh.api import PullInfo
from precisionbot.gh.gate import Decision

HEAD = "1234567890abcdef1234567890abcdef12345678"
CELLS = {"include": [{"model": "a", "checks": "match", "samples": 8}, {"model": "b", "checks": "match", "samples": 8}]}


def decision(mode: str = "check") -> Decision:
    return Decision(True, "/precision rerun by carol", HEAD, 7, "pr", mode, CELLS, ("eyes", "rocket"), "🚀")


def pull(**changes: object) -> PullInfo:
    fields: dict[str, object] = {
        "number": 7,
        "head_sha": HEAD,
        "head_repo": "acme/engine",
        "base_repo": "acme/engine",
        "author": "alice",
        "base_ref": "main",
        "head_ref": "fix",
    }
    fields.update(changes)
    return PullInfo(**fields)  # type: ignore[arg-type]


def test_only_checks_go_to_buildkite() -> None:
    assert refuse_mode(decision()) is None
    assert refuse_mode(Decision(False, "skip")) is None
    refused = refuse_mode(decision("baseline"))
    assert refused is not None and not refused.run and refused.reactions == ("eyes", "confused")
    assert "`baseline` runs are not part of its pipeline" in (refused.reply or "")


def test_a_head_that_moved_or_closed_is_refused() -> None:
    assert head_moved(decision(), pull()) is None
    moved = head_moved(decision(), pull(head_sha="e" * 40))
    assert moved is not None and not moved.run and "e" * 40 in (moved.reply or "")
    closed = head_moved(decision(), pull(state="closed"))
    assert closed is not None and "the PR is closed" in closed.reason


def test_the_request_names_the_pr_and_the_rerun() -> None:
    request = build_request(decision(), pull(), "https://github.com/")
    assert request.body() == {
        "commit": HEAD,
        "branch": "fix",
        "message": "precisionbot: /precision rerun by carol on PR #7",
        "env": {
            "PRECISIONBOT_RERUN_SUITE": "pr",
            "PRECISIONBOT_RERUN_MODELS": "a,b",
            "PRECISIONBOT_RERUN_CHECKS": "match",
            "PRECISIONBOT_RERUN_SAMPLES": "8",
        },
        "pull_request_id": 7,
        "pull_request_base_branch": "main",
        "pull_request_repository": "https://github.com/acme/engine.git",
    }
    fork = build_request(decision(), pull(head_repo="eve/engine", head_ref=None), "https://github.com")
    assert fork.branch == "eve:pull/7/head"
    assert fork.pull_request_repository == "https://github.com/eve/engine.git"


def test_replies_name_the_build_or_point_to_the_log() -> None:
    build = Build(number=12, web_url="https://buildkite.com/vllm/ci/builds/12", commit=HEAD)
    ran = started(decision(), build)
    assert ran.run and ran.reply == (
        f"🚀 Running suite `pr` (check) on commit `{HEAD}` in Buildkite build "
        "[#12](https://buildkite.com/vllm/ci/builds/12)."
    )
    failed = not_started(decision(), "HTTP 403 Forbidden")
    assert not failed.run and "HTTP 403" in failed.reason and "HTTP 403" not in (failed.reply or "")
