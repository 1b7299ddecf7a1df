"""``precisionbot bisect``: the command over a real engine git repository (tests/support/engine_repo.py).

The repository is made here: each commit's ``fault.txt`` holds the builtin engine's ``--fault`` flags and the
launch template reads it, so one commit plants a prefix-cache restore fault that ``prefill_cache_hit``
catches. Another commit does not build (its install command fails) and must be skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precisionbot.checks.bisect_search import BAD, GOOD, SKIP
from precisionbot.cli import main
from tests.support.engine_repo import commit, git, write_config


@pytest.fixture(scope="module")
def engine_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("engine")
    git(repo, "init", "-q")
    shas = [commit(repo, "good: the reference", fault="")]
    shas.append(commit(repo, "docs"))
    shas.append(commit(repo, "refactor the scheduler"))
    shas.append(commit(repo, "break the build", broken=True))
    shas.append(commit(repo, "fix the build", broken=False))
    shas.append(commit(repo, "faster prefix restore", fault="--fault restore-stale-page"))
    shas.append(commit(repo, "tidy"))
    return repo, shas


ARGS = ["--checks", "match,prefill_cache_hit", "--samples", "4", "--max-new-tokens", "16", "--prompt-tokens", "32"]


def test_bisect_names_the_planted_commit_and_caches_eachcommit(
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
    assert git(repo, "worktree", "list").count("\n") == 0  # every worktree removed
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


def test_bisect_caches_elsewhere_when_the_store_is_read_only(
    engine_repo: tuple[Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The workflow's GPU job reads baselines with a read-only role: `--cache` keeps the per-commit outcomes in
    a folder of the job's own (uploaded with the results) and the store is never written."""
    repo, shas = engine_repo
    config = write_config(tmp_path / "precision.json", repo)
    store = tmp_path / "store"
    store.mkdir()
    cache = tmp_path / "cache"
    argv = ["bisect", "--good", shas[0], "--bad", shas[-1], "--config", str(config), *ARGS, "--cache", str(cache)]
    assert main([*argv, "--log-dir", str(tmp_path / "logs")]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(f"first bad commit: {shas[5]}")
    assert list(store.iterdir()) == []  # nothing written where the job may only read
    assert len(list(cache.rglob("*.json"))) == 3
    assert main(argv) == 0
    assert capsys.readouterr().err.count("(cached)") == 3
