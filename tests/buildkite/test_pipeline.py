"""``buildkite pipeline``: the steps it prints, Buildkite's published schema on them, and the example file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from precisionbot.buildkite.pipeline import PipelineOptions, build_pipeline, render_pipeline
from precisionbot.cli import main
from precisionbot.config import Config, load_config
from precisionbot.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "buildkite" / "pipeline.yml"
EXAMPLE_ARGS = ["--queue", "gpu-h200", "--post-queue", "small-cpu", "--token-secret", "PRECISIONBOT_GITHUB_TOKEN"]
"""What examples/buildkite/pipeline.yml was printed with, from a checkout whose .github/precision.yml is
examples/precision.yml."""


def generate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    (tmp_path / ".github").mkdir(exist_ok=True)
    shutil.copy(ROOT / "examples" / "precision.yml", tmp_path / ".github" / "precision.yml")
    monkeypatch.chdir(tmp_path)
    for name in ("PRECISIONBOT_CONFIG", "PRECISIONBOT_RERUN_SUITE", "PRECISIONBOT_RERUN_MODELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("PRECISIONBOT_RERUN_CHECKS", raising=False)
    monkeypatch.delenv("PRECISIONBOT_RERUN_SAMPLES", raising=False)
    capsys.readouterr()
    assert main(["buildkite", "pipeline", *args]) == 0
    return capsys.readouterr().out


def test_the_example_is_what_the_generator_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    printed = generate(tmp_path, monkeypatch, capsys, *EXAMPLE_ARGS)
    assert printed == EXAMPLE.read_text(encoding="utf-8"), (
        "examples/buildkite/pipeline.yml is stale: regenerate it with "
        f"`precisionbot buildkite pipeline {' '.join(EXAMPLE_ARGS)} > examples/buildkite/pipeline.yml` "
        "from a folder whose .github/precision.yml is examples/precision.yml"
    )


def test_one_check_step_per_model_on_the_gpu_queue_then_the_post_step() -> None:
    config = load_config(ROOT / "examples" / "precision.yml")
    steps = build_pipeline(config, PipelineOptions(queue="gpu-h200", post_queue="small-cpu"))["steps"]
    checks, post = steps[:-1], steps[-1]
    assert [s["agents"] for s in checks] == [{"queue": "gpu-h200"}] * len(config.models)
    assert [s["key"] for s in checks] == [f"precisionbot-check-{i}" for i in range(len(config.models))]
    for i, (step, model) in enumerate(zip(checks, config.models, strict=True)):
        (command,) = step["commands"]
        assert f"--model {model.name} " in command and f"--out precisionbot-results/{i}" in command
        assert command.endswith('--engine-commit "$$BUILDKITE_COMMIT"')  # expanded by the job's shell
        assert step["artifact_paths"] == [f"precisionbot-results/{i}/**/*"]
        assert step["timeout_in_minutes"] == 100
    assert post["agents"] == {"queue": "small-cpu"}
    assert post["checkout"] == {"skip": True}  # no PR code (nor its hooks) where the token is
    assert post["allow_dependency_failure"] is True and post["depends_on"] == [s["key"] for s in checks]
    assert "secrets" not in post
    dirs = " ".join(f"precisionbot-results/{i}" for i in range(len(config.models)))
    assert post["commands"][-1] == f"precisionbot buildkite post --suite pr {dirs}"


def test_a_rerun_narrows_the_steps_through_the_build_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    generate(tmp_path, monkeypatch, capsys, "--queue", "q")  # sets up the checkout
    monkeypatch.setenv("PRECISIONBOT_RERUN_MODELS", "qwen3-8b")
    monkeypatch.setenv("PRECISIONBOT_RERUN_CHECKS", "match")
    monkeypatch.setenv("PRECISIONBOT_RERUN_SAMPLES", "4")
    assert main(["buildkite", "pipeline", "--queue", "q"]) == 0
    steps = yaml.safe_load(capsys.readouterr().out)["steps"]
    assert len(steps) == 2
    assert "--model qwen3-8b --checks match --samples 4 " in steps[0]["commands"][0]
    monkeypatch.setenv("PRECISIONBOT_RERUN_MODELS", "nonesuch")
    assert main(["buildkite", "pipeline", "--queue", "q"]) == 3
    assert "unknown model 'nonesuch'" in capsys.readouterr().err


def test_refusals_name_the_fix() -> None:
    with pytest.raises(ConfigError, match="give it a small queue of its own"):
        build_pipeline(Config.default(), PipelineOptions(queue="gpu", post_queue="gpu"))
    with pytest.raises(ConfigError, match="pass --queue"):
        build_pipeline(Config.default(), PipelineOptions(queue=""))
    with pytest.raises(ConfigError, match=r"not in 1\.\.1440"):
        build_pipeline(Config.default(), PipelineOptions(queue="gpu", timeout_minutes=0))


def test_dollars_are_escaped_from_the_upload_interpolation() -> None:
    options = PipelineOptions(queue="gpu", install="pip install -e . && echo $HOME", token_secret="GH_TOKEN")
    steps = build_pipeline(Config.default(), options)["steps"]
    assert steps[0]["commands"][0] == "pip install -e . && echo $$HOME"
    assert steps[-1]["secrets"] == {"PRECISIONBOT_GITHUB_TOKEN": "GH_TOKEN"}
    text = render_pipeline({"steps": steps}, "precisionbot buildkite pipeline --queue gpu")
    assert text.startswith("# Generated by `precisionbot buildkite pipeline --queue gpu`")
    assert yaml.safe_load(text) == {"steps": steps}


def _check_jsonschema() -> str:
    beside = Path(sys.executable).parent / "check-jsonschema"
    found = shutil.which("check-jsonschema") or (str(beside) if beside.is_file() else None)
    if found is None:
        message = "check-jsonschema is not installed (pip install check-jsonschema): Buildkite's schema not checked"
        if os.environ.get("PRECISIONBOT_REQUIRE_CHECK_JSONSCHEMA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _validate(exe: str, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [exe, "--builtin-schema", "vendor.buildkite", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_buildkites_schema_takes_the_generated_pipeline_and_refuses_a_broken_one(tmp_path: Path) -> None:
    exe = _check_jsonschema()
    config = load_config(ROOT / "examples" / "precision.yml")
    other = tmp_path / "other.yml"
    options = PipelineOptions(queue="gpu-h200", install="pip install -e .", samples=4, timeout_minutes=30)
    other.write_text(render_pipeline(build_pipeline(config, options), "x"))
    done = _validate(exe, EXAMPLE, other)
    assert done.returncode == 0, done.stdout + done.stderr
    # The same file with a key Buildkite does not know on one step: the schema refuses it, so the check above
    # can fail.
    broken = yaml.safe_load(EXAMPLE.read_text())
    broken["steps"][0]["queue_name"] = "gpu-h200"
    bad = tmp_path / "broken.yml"
    bad.write_text(yaml.safe_dump(broken))
    done = _validate(exe, bad)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Schema validation errors" in done.stdout + done.stderr


def test_the_docs_show_lines_of_the_example() -> None:
    docs = (ROOT / "docs" / "buildkite.md").read_text(encoding="utf-8")
    shown = docs.split("```yaml\nsteps:\n", 1)[1].split("```", 1)[0].splitlines()
    example = EXAMPLE.read_text(encoding="utf-8").splitlines()
    assert len(shown) > 20
    assert [line for line in shown if not line.startswith("#") and line not in example] == []
