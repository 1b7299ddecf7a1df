"""``precisionbot bisect``: the search's bound, and the command over a real engine git repository.

The repository is made here: each commit's ``fault.txt`` holds the builtin engine's ``--fault`` flags and the
launch template reads it, so one commit plants a prefix-cache restore fault that ``prefill_cache_hit``
catches. Another commit does not build (its install command fails) and must be skipped.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from precisionbot.checks.bisect_search import BAD, GOOD, SKIP, Bisection, Step
from precisionbot.cli import main


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 64, 100])
def test_search_finds_the_first_bad_commit_within_the_bound(n: int) -> None:
    rng = random.Random(n)
    for first_bad, n_skip in itertools.product(range(n), range(min(n, 4))):
        commits = [f"{i:040x}" for i in range(n)]
        untestable = set(rng.sample(range(n - 1), min(n_skip, n - 1)))
        search = Bisection(commits)
        while (sha := search.next_commit()) is not None:
            i = commits.index(sha)
            outcome = SKIP if i in untestable else (BAD if i >= first_bad else GOOD)
            search.record(Step(sha, outcome, outcome))
        answer = search.first_bad()
        assert commits[first_bad] in answer
        assert len(search.steps) <= math.ceil(math.log2(n)) + len(search.skipped) if n > 1 else not search.steps
        # Ambiguous only through skips right before the answer.
        assert all(commits.index(a) in untestable for a in answer[:-1])


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@e",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@e",
        },
    ).stdout.strip()


def _commit(repo: Path, message: str, fault: str | None = None, broken: bool | None = None) -> str:
    if fault is not None:
        (repo / "fault.txt").write_text(fault)
    if broken is True:
        (repo / "broken").write_text("x")
    elif broken is False:
        (repo / "broken").unlink()
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def engine_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("engine")
    _git(repo, "init", "-q")
    shas = [_commit(repo, "good: the reference", fault="")]
    shas.append(_commit(repo, "docs"))
    shas.append(_commit(repo, "refactor the scheduler"))
    shas.append(_commit(repo, "break the build", broken=True))
    shas.append(_commit(repo, "fix the build", broken=False))
    shas.append(_commit(repo, "faster prefix restore", fault="--fault restore-stale-page"))
    shas.append(_commit(repo, "tidy"))
    return repo, shas


def write_config(path: Path, repo: Path) -> Path:
    """An engine built and launched from the checkout: ``install`` fails where the commit has ``broken``."""
    serve = f"{shlex.quote(sys.executable)} -m precisionbot serve --port {{port}} --model-preset tiny"
    launch = f"sh -c 'exec {serve} $(cat fault.txt)'"
    path.write_text(
        json.dumps(
            {
                "engine": {"kind": "builtin", "launch": launch, "install": "test ! -e broken", "checkout": str(repo)},
                "models": [{"name": "tiny", "path": "builtin"}],
                "baselines": {"store": str(path.parent / "store")},
            }
        )
    )
    return path


ARGS = ["--checks", "match,prefill_cache_hit", "--samples", "4", "--max-new-tokens", "16", "--prompt-tokens", "32"]


def test_bisect_names_the_planted_commit_and_caches_each_commit(
    engine_repo: tuple[Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, shas = engine_repo
    config = write_config(tmp_path / "precision.json", repo)
    argv = ["bisect", "--good", shas[0][:10], "--bad", shas[-1], "--config", str(config), *ARGS]
    out_json = tmp_path / "bisect.json"
    comment = tmp_path / "comment.md"
    assert main([*argv, "--log-dir", str(tmp_path / "logs"), "--out", str(out_json), "--comment", str(comment)]) == 0
    captured = capsys.readouterr()
    final = captured.out.strip().splitlines()[-1]
    assert final.startswith(f"first bad commit: {shas[5]} 'faster prefix restore' after 3 steps (bound 4)")
    progress = [line for line in captured.err.splitlines() if line.startswith("step ")]
    assert [p.split(":")[0] for p in progress] == ["step 1", "step 2", "step 3"]
    assert f"{shas[3][:12]} 'break the build': skip (does not build)" in progress[0]
    assert f"{shas[4][:12]} 'fix the build': good (pass)" in progress[1]
    assert f"{shas[5][:12]} 'faster prefix restore': bad (fail)" in progress[2]
    assert "failed: prefill_cache_hit" in progress[2]
    assert "prefill_cache_hit k3" in final  # the numbers at each step
    report = json.loads(out_json.read_text())
    assert report["first_bad"] == [shas[5]] and [s["outcome"] for s in report["steps"]] == [SKIP, GOOD, BAD]
    bad_k3 = report["steps"][2]["numbers"]["prefill_cache_hit"]["mean_k3"]
    good_k3 = report["steps"][1]["numbers"]["prefill_cache_hit"]["mean_k3"]
    assert bad_k3 > 1e-3 > 1e-9 > good_k3
    assert _git(repo, "worktree", "list").count("\n") == 0  # every worktree removed
    md = comment.read_text()
    assert f"first bad commit `{shas[5][:12]}` faster prefix restore" in md
    assert "6 commits after" in md and "3 steps (at most 4" in md
    assert md.count("\n| ") == 4 and r"prefill\_cache\_hit mean k3" in md and "❌ bad (fail)" in md

    # The same bisection again: every commit's outcome comes from the store, no engine is started.
    assert main(argv) == 0
    again = capsys.readouterr()
    assert again.err.count("(cached)") == 3
    assert again.out.strip().splitlines()[-1].startswith(f"first bad commit: {shas[5]}")


def test_bisect_refuses_commits_it_cannot_order(
    engine_repo: tuple[Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, shas = engine_repo
    config = write_config(tmp_path / "precision.json", repo)
    assert main(["bisect", "--good", shas[-1], "--bad", shas[0], "--config", str(config)]) == 3
    assert "is not an ancestor of --bad" in capsys.readouterr().err
    assert main(["bisect", "--good", "deadbeef", "--bad", shas[0], "--config", str(config)]) == 3
    assert "--good 'deadbeef' is not a commit of" in capsys.readouterr().err
