"""action.yml and the workflows: static rules, and the composite's run script executed with a stub CLI."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml")) + sorted(
    (ROOT / "examples" / "workflows").glob("*.yml")
)
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def steps_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if "runs" in doc:
        return list(doc["runs"]["steps"])
    return [step for job in doc["jobs"].values() for step in job.get("steps", [])]


def test_every_input_reaches_the_script_through_a_namespaced_env_var() -> None:
    env_values = " ".join(str(v) for step in ACTION["runs"]["steps"] for v in (step.get("env") or {}).values())
    with_values = " ".join(str(v) for step in ACTION["runs"]["steps"] for v in (step.get("with") or {}).values())
    for name in ACTION["inputs"]:
        if name in ("python-version", "setup-python"):
            assert f"inputs.{name}" in with_values + str(ACTION["runs"]["steps"][0].get("if"))
        else:
            assert f"${{{{ inputs.{name} }}}}" in env_values, name
    for step in ACTION["runs"]["steps"]:
        for key in step.get("env") or {}:
            assert key.startswith("PRECISIONBOT_"), key


def test_outputs_are_declared_from_the_run_step() -> None:
    expected = {
        "run",
        "sha",
        "pr",
        "suite",
        "mode",
        "matrix",
        "reason",
        "verdict",
        "comment-url",
        "label",
        "instance-id",
    }
    assert set(ACTION["outputs"]) == expected
    for name, spec in ACTION["outputs"].items():
        assert spec["value"] == f"${{{{ steps.run.outputs.{name} }}}}"


@pytest.mark.parametrize("path", [ROOT / "action.yml", *WORKFLOWS], ids=lambda p: p.name)
def test_no_expressions_in_scripts_and_third_party_actions_pinned(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    for step in steps_of(doc):
        assert "${{" not in str(step.get("run", "")), (path.name, step.get("name"))
        uses = step.get("uses")
        if uses and not uses.startswith("./") and not uses.startswith("precisionbot/precisionbot@"):
            assert PINNED.match(uses), uses


def test_example_workflow_is_least_privilege_and_never_pull_request_target() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "workflows" / "precision.yml").read_text())
    on = doc[True]  # YAML 1.1 reads the key `on` as True
    assert "pull_request_target" not in on and "pull_request" in on
    assert doc["permissions"] == {}
    assert doc["concurrency"]["cancel-in-progress"] is False
    jobs = doc["jobs"]
    assert jobs["gpu"]["permissions"] == {"contents": "read"}
    assert "secrets" not in str(jobs["gpu"])
    assert jobs["terminate"]["if"].startswith("always()")
    for name, job in jobs.items():
        assert "permissions" in job, name
        writes = {k for k, v in job["permissions"].items() if v == "write"}
        assert writes <= {"pull-requests", "id-token"}, name
    checkout = jobs["gpu"]["steps"][0]
    assert (
        checkout["with"]["ref"] == "${{ needs.plan.outputs.sha }}" and checkout["with"]["persist-credentials"] is False
    )


RUN_SCRIPT = ACTION["runs"]["steps"][2]["run"]


def run_action_script(tmp_path: Path, **inputs: str) -> list[str]:
    """Execute the composite's run step with a stub ``precisionbot`` that prints its argv, one per line."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    stub = venv / "precisionbot"
    stub.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    # As in Actions: every variable the step maps is set, empty unless given.
    env = {name: "" for name in ACTION["runs"]["steps"][2]["env"]}
    env.update({"PATH": os.environ["PATH"], "PRECISIONBOT_VENV": str(tmp_path / "venv")})
    env.update({f"PRECISIONBOT_{k.upper()}": v for k, v in inputs.items()})
    done = subprocess.run(["bash", "-c", RUN_SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_script_builds_comment_arguments_and_expands_globs(tmp_path: Path) -> None:
    for name in ("results/b", "results/a"):
        (tmp_path / name).mkdir(parents=True)
    argv = run_action_script(tmp_path, command="github comment", results="results/*", pr="7", config="", suite="")
    assert argv == ["github", "comment", "results/a", "results/b", "--pr", "7"]


def test_script_never_evaluates_input_text(tmp_path: Path) -> None:
    evil = '$(touch pwned) `touch pwned2`; touch pwned3 "quoted"'
    argv = run_action_script(tmp_path, command="check", args=evil, model="m1", config="c.yml")
    assert argv[:7] == ["check", "--config", "c.yml", "--model", "m1", "$(touch", "pwned)"]
    assert not list(tmp_path.glob("pwned*"))


def test_script_builds_runner_launch_arguments(tmp_path: Path) -> None:
    argv = run_action_script(
        tmp_path,
        command="runner launch",
        repo="acme/engine",
        instance_type="g6e.xlarge",
        ami="ami-1",
        security_groups="sg-1 sg-2",
        label="pb-1",
        run_id="42",
        ttl_minutes="",
    )
    assert argv == [
        "runner",
        "launch",
        "--repo",
        "acme/engine",
        "--instance-type",
        "g6e.xlarge",
        "--ami",
        "ami-1",
        "--label",
        "pb-1",
        "--run-id",
        "42",
        "--security-group",
        "sg-1",
        "--security-group",
        "sg-2",
    ]
