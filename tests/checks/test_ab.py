"""``baselines.mode: merge-base``: the same-runner A/B passes a PR that a baseline from another runner fails.

The "other runner" is a stored baseline whose numbers differ (the builtin engine's mantissa fault stands in
for another driver's kernels) and whose recorded fingerprint names another driver and GPU. The PR changes
nothing numeric, so against its merge base built on this runner it must pass, and the comment must say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precisionbot import corpus
from precisionbot.baselines import open_store
from precisionbot.baselines.golden_recording import golden_target, record_golden
from precisionbot.cli import main
from precisionbot.config import load_config
from precisionbot.engines.builtin import BuiltinEngine
from tests.support.engine_repo import commit, git, write_config
from tests.support.engine_server import engine_options

SUITE = {"checks": ["golden"], "golden": {"top_k": 8, "context_depths": [32], "decode_steps": 8}}


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    repo = tmp_path / "engine"
    repo.mkdir()
    git(repo, "init", "-q")
    base = commit(repo, "main: the reference", fault="")
    head = commit(repo, "PR: comments only")
    return repo, base, head


def _config(tmp_path: Path, repo: Path, mode: str) -> Path:
    path = write_config(tmp_path / f"{mode}.json", repo)
    data = json.loads(path.read_text())
    data["baselines"].update(mode=mode, helper_reruns=0, store=str(tmp_path / "stored"))
    data["suites"] = {"ab": SUITE}
    path.write_text(json.dumps(data))
    return path


def _record_other_runner(config_path: Path) -> None:
    config = load_config(config_path)
    suite = config.suite("ab")
    engine = BuiltinEngine(options=engine_options(faults=("mantissa=2",)))
    try:
        target = golden_target(engine, config, suite.golden, config.models[0], corpus.suite_documents(suite.corpus))
        other = {**target.fingerprint(), "driver": "535.104", "gpu_model": "NVIDIA A100"}
        record_golden(target, open_store(config.baselines.store), engine_commit="0" * 40, fingerprint=other)
    finally:
        engine.close()


def test_ab_passes_where_the_stored_baseline_of_another_runner_fails(
    repo: tuple[Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    engine_repo, base, head = repo
    monkeypatch.chdir(engine_repo)  # the workflow's checkout of the PR: engine.launch reads fault.txt here
    stored_cfg, ab_cfg = _config(tmp_path, engine_repo, "stored"), _config(tmp_path, engine_repo, "merge-base")
    _record_other_runner(stored_cfg)
    common = ["check", "--engine", "launch", "--suite", "ab", "--quiet", "--engine-commit", head]

    out = tmp_path / "stored-out"
    assert main([*common, "--config", str(stored_cfg), "--out", str(out)]) == 1
    golden = json.loads((out / "result.json").read_text())["checks"][0]
    assert golden["verdict"] == "fail"
    note = golden["reasons"][-1]
    assert "recorded in another environment" in note and "driver: baseline 535.104" in note
    assert "baselines.mode: merge-base" in note
    capsys.readouterr()

    out = tmp_path / "ab-out"
    assert main([*common, "--config", str(ab_cfg), "--base-ref", base[:10], "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"A/B on one runner against merge-base {base[:7]}" in printed
    result = json.loads((out / "result.json").read_text())
    assert result["verdict"] == "pass"
    assert result["ab"]["merge_base"] == base and result["ab"]["gpu_minutes"] > 0
    assert result["checks"][0]["baseline"]["producer"] == "merge-base"
    assert "driver: baseline 535.104" in " ".join(result["ab"]["stored_fingerprint_diff"])
    assert result["fingerprint"]["precisionbot"]  # every result carries its environment

    assert main(["report", str(out), "--output", str(tmp_path / "comment.md")]) == 0
    comment = (tmp_path / "comment.md").read_text()
    assert f"A/B on one runner against merge-base {base[:7]} (" in comment and "GPU minutes" in comment
    assert "the stored baseline was recorded in another environment" in comment
    assert git(engine_repo, "worktree", "list").count("\n") == 0


def test_merge_base_mode_without_a_launch_template_is_a_setup_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "precision.json"
    config.write_text(json.dumps({"baselines": {"mode": "merge-base"}}))
    assert main(["check", "--config", str(config), "--engine", "builtin", "--out", str(tmp_path / "o")]) == 3
    err = capsys.readouterr().err
    assert "baselines.mode: merge-base needs engine.launch and one model" in err and err.count("\n") == 1
