"""``github bisect-comment`` through real PyGithub over HTTP to the fake GitHub: the bisect's files are PR-written.

The attack it replays: PR code on the GPU runner writes ``bisect.md``/``bisect.json`` carrying the verdict
comment's sticky marker (so the verdict's next upsert would take that comment over), ``@org/team`` mentions,
a file of any size and a result folder per "cell" as many as it likes, and the run is repeated. The old job
posted ``bisect.md`` verbatim, once per folder and run.
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from precisionbot.cli import main
from precisionbot.commands.github_bisect import bisect_comment_action
from precisionbot.gh.sticky import COMMENT_LIMIT_CHARS, DEFAULT_MARKER, upsert_comment
from precisionbot.report.bisect_comment import MARKER
from tests.gh.conftest import rest
from tests.report.test_bisect_comment import payload
from tests.support.fake_github import FakeGitHub

HEAD = "b" * 40
"""The plan's pinned head: the bisect's bad end."""
ATTACK = f"{DEFAULT_MARKER}\n## ✅ precisionbot: PASS\ncc @org/team @acme/maintainers"
VERDICT = f"{DEFAULT_MARKER}\n### precisionbot: ❌ FAIL\nthe real verdict"


def post(fake: FakeGitHub, dirs: list[str], log: io.StringIO | None = None) -> int:
    """One run of the comment job's command, as ``github bisect-comment`` calls it."""
    run_url = f"https://github.com/{fake.repo}/actions/runs/99"
    return bisect_comment_action(rest(fake), dirs, pr=7, sha=HEAD, run_url=run_url, out=log or io.StringIO())


def ours(fake: FakeGitHub, pr: int = 7) -> list[dict[str, Any]]:
    return [c for c in fake.comments(pr) if c["user"]["login"] == fake.bot_login]  # type: ignore[index]


def cell(root: Path, name: str, data: Any = None, raw: bytes | None = None) -> str:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "bisect.md").write_text(ATTACK)  # written by PR code as well: never read
    if raw is not None or data is not None:
        (folder / "bisect.json").write_bytes(raw if raw is not None else json.dumps(data).encode())
    return str(folder)


def with_number(value: float) -> dict[str, Any]:
    data = payload()
    data["steps"][0]["numbers"] = {"match": {"mean_k3": value}}
    return data


def hostile_results(root: Path) -> list[str]:
    forged = payload()
    for step in forged["steps"]:
        step["subject"] = step["note"] = ATTACK
    forged["steps"] *= 100  # many rows
    dirs = [cell(root, "0", forged)]
    dirs.append(cell(root, "1", raw=b'{"steps": "' + b"x" * (2 * 1024 * 1024) + b'"}'))  # 2 MiB
    dirs.append(cell(root, "2", payload(first_bad=[ATTACK])))
    dirs.append(cell(root, "3"))  # the bisect died: no bisect.json
    dirs.append(cell(root, "4", payload(bad="e" * 40)))  # a bisect of some other range
    dirs.append(cell(root, "5", with_number(10**400 - 1)))  # 400 nines: too large for a float
    dirs.append(cell(root, "6", raw=b'{"commits": ' + b"9" * 5000 + b"}"))  # past Python's int-parsing limit
    dirs.append(cell(root, "7", raw=b"[" * 100_000 + b"]" * 100_000))  # deeper than the parser recurses
    dirs.append(cell(root, "8", with_number(math.nan)))  # what a commit with NaN logprobs honestly shows
    dirs += [cell(root, f"{n}", payload()) for n in range(9, 40)]  # many cells
    return dirs


def test_hostile_bisect_files_make_one_inert_comment_and_leave_the_verdict_alone(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    verdict = upsert_comment(rest(fake_github), 7, VERDICT).comment
    dirs = hostile_results(tmp_path / "results")
    log = io.StringIO()
    codes = [post(fake_github, dirs, log) for _ in range(3)]  # three runs
    assert codes == [2, 2, 2]  # invalid and missing cells: not a clean answer

    bisects = [c for c in ours(fake_github) if MARKER in str(c["body"])]
    (comment,) = bisects
    body = str(comment["body"])
    # The verdict comment is untouched: same body, never edited or deleted, and still the only one with its marker.
    assert fake_github.comment(verdict.id)["body"] == VERDICT
    assert not fake_github.calls("PATCH", rf"/issues/comments/{verdict.id}$")
    assert not fake_github.calls("DELETE", ".")
    assert [c["id"] for c in ours(fake_github) if DEFAULT_MARKER in str(c["body"])] == [verdict.id]
    assert len(ours(fake_github)) == 2
    # One marker (ours), no mention, bounded size, every bad cell named with its file and field.
    assert body.startswith(MARKER) and body.count("<!--") == 1
    assert not re.search(r"@(?!\u200d)", body) and "@\u200dorg/team" in body
    assert len(body) <= COMMENT_LIMIT_CHARS
    assert "results/1/bisect.json is not a bisect result: larger than 1,048,576 bytes" in body
    assert "results/2/bisect.json is not a bisect result: first\\_bad\\[0\\]: expected a full commit id" in body
    assert "results/3/bisect.json is missing" in body
    assert (
        "results/4/bisect.json is not a bisect result: bad: " + "e" * 40 + " is not the commit the plan pinned" in body
    )
    assert (
        "results/5/bisect.json is not a bisect result: steps\\[0\\].numbers.match.mean\\_k3: "
        "expected a number a float can hold, got a number of more than 40 digits" in body
    )
    assert "results/6/bisect.json is not a bisect result: ValueError: Exceeds the limit (4300 digits)" in body
    assert "results/7/bisect.json is not a bisect result: nested too deeply" in body
    assert "#### 8: first bad commit `cccccccccccc`" in body and "match mean k3 nan" in body
    assert "*24 more result folders are not shown" in body
    assert "::warning::precisionbot: bisect cell 2: " in log.getvalue()


def test_reruns_update_the_one_comment_in_place(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    assert post(fake_github, [cell(tmp_path / "run1", "0", payload())]) == 0
    ambiguous = cell(tmp_path / "run2", "0", payload(first_bad=["c" * 40, HEAD]))
    assert post(fake_github, [ambiguous]) == 2
    (comment,) = ours(fake_github)
    assert "first bad commit is one of `cccccccccccc`, `bbbbbbbbbbbb`" in str(comment["body"])
    assert len(fake_github.calls("POST", r"/issues/7/comments$")) == 1


def test_no_result_folder_at_all_is_one_no_result_comment(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    assert post(fake_github, []) == 2
    (comment,) = ours(fake_github)
    assert "❔ no result" in str(comment["body"]) and f"{fake_github.repo}/actions/runs/99" in str(comment["body"])


def test_the_cli_command_posts_it(fake_github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    for name, value in {
        "GITHUB_TOKEN": fake_github.token or "",
        "GITHUB_API_URL": fake_github.url,
        "GITHUB_REPOSITORY": fake_github.repo,
        "GITHUB_OUTPUT": str(tmp_path / "out"),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GITHUB_EVENT_PATH", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    folder = cell(tmp_path / "results", "0", payload())
    assert main(["github", "bisect-comment", folder, "--pr", "7", "--sha", HEAD]) == 0
    (comment,) = ours(fake_github)
    assert str(comment["body"]).startswith(f"{MARKER}\n### 🔎 precisionbot bisect: first bad commit `cccccccccccc`")
    assert "comment-url<<" in (tmp_path / "out").read_text()
