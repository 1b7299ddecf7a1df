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
        elif name == "token":
            assert "&& inputs.token ||" in env_values
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
        "region",
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
        if uses and not uses.startswith("./"):
            assert PINNED.match(uses), uses  # precisionbot itself too: a tag can be moved


def jobs_of(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc["jobs"])


def test_example_workflow_is_least_privilege_and_never_pull_request_target() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "workflows" / "precision.yml").read_text())
    on = doc[True]  # YAML 1.1 reads the key `on` as True
    # PRs arrive through the workflow_run consumer (and /precision comments), never on pull_request* here.
    assert "pull_request_target" not in on and "pull_request" not in on
    assert on["workflow_run"] == {"workflows": ["precision-pr"], "types": ["completed"]}
    assert doc["permissions"] == {}
    # Concurrency only where a GPU is launched: a comment that launches nothing never joins a group.
    assert "concurrency" not in doc and "concurrency" not in jobs_of(doc)["plan"]
    jobs = doc["jobs"]
    assert jobs["launch"]["concurrency"]["cancel-in-progress"] is False
    assert jobs["gpu"]["permissions"] == {"contents": "read"}
    assert "secrets" not in str(jobs["gpu"]) and "environment" not in jobs["gpu"]
    assert jobs["terminate"]["if"].startswith("always()")
    # Secrets and AWS roles only in jobs bound to the default-branch-only environment, never on pull_request.
    for name, job in jobs.items():
        if "secrets." in str(job) or "id-token" in str(job.get("permissions")):
            assert job.get("environment") == "precisionbot", name
    assert "github.event_name != 'pull_request'" in jobs["launch"]["if"]
    # The GPU job selects exactly its cell's random label; it ends before the instance's TTL.
    assert jobs["gpu"]["runs-on"] == "${{ matrix.label }}"
    assert jobs["launch"]["steps"][-1]["with"]["label"] == "${{ matrix.label }}"
    assert jobs["gpu"]["timeout-minutes"] < 120
    # Config decisions from the base branch, never the PR's merge commit.
    for name in ("plan", "launch", "comment", "terminate"):
        assert jobs[name]["steps"][0]["with"]["ref"] == "${{ github.event.pull_request.base.sha || github.sha }}"
    # No JavaScript action after PR code before the leftovers are ended.
    gpu_steps = [step.get("name") or step.get("uses", "") for step in jobs["gpu"]["steps"]]
    assert gpu_steps.index("End the processes the PR code left behind") == len(gpu_steps) - 2
    for name, job in jobs.items():
        assert "permissions" in job, name
        writes = {k for k, v in job["permissions"].items() if v == "write"}
        assert writes <= {"pull-requests", "id-token"}, name
    checkout = jobs["gpu"]["steps"][0]
    assert (
        checkout["with"]["ref"] == "${{ needs.plan.outputs.sha }}" and checkout["with"]["persist-credentials"] is False
    )


def test_pr_workflow_only_runs_the_gate_without_secrets() -> None:
    """precision-pr.yml runs the PR's own copy of itself: nothing in it may matter to the consumer, and it
    holds nothing worth stealing."""
    doc = yaml.safe_load((ROOT / "examples" / "workflows" / "precision-pr.yml").read_text())
    assert doc["name"] == "precision-pr" and list(doc[True]) == ["pull_request"]
    assert doc["permissions"] == {}
    text = str(doc["jobs"])  # the comments may name what is absent
    assert "secrets." not in text and "id-token" not in text and "environment" not in doc["jobs"]["gate"]
    (job,) = jobs_of(doc).values()
    assert all(level == "read" for level in job["permissions"].values())
    assert [step["with"].get("command") for step in job["steps"] if "with" in step] == [None, "github plan"]
    assert "upload-artifact" not in text  # no artifact: the consumer would have nothing to trust anyway


RUN_SCRIPT = ACTION["runs"]["steps"][2]["run"]


def run_action_script(tmp_path: Path, **inputs: str) -> list[str]:
    """Execute the composite's run step with a stub ``precisionbot`` that prints its argv, one per line."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    stub = venv / "precisionbot"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        'if [ -n "${STUB_PRINTS_TOKEN:-}" ]; then echo "${PRECISIONBOT_GITHUB_TOKEN:-<no token>}"; fi\n'
        'printf "%s\\n" "$@"\n'
    )
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    # As in Actions: every variable the step maps is set, empty unless given.
    env = {name: "" for name in ACTION["runs"]["steps"][2]["env"]}
    env.update({"PATH": os.environ["PATH"], "PRECISIONBOT_VENV": str(tmp_path / "venv")})
    if inputs.pop("stub_prints_token", None):
        env["STUB_PRINTS_TOKEN"] = "1"
    env.update({f"PRECISIONBOT_{k.upper()}": v for k, v in inputs.items()})
    done = subprocess.run(["bash", "-c", RUN_SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_script_builds_comment_arguments_and_expands_globs(tmp_path: Path) -> None:
    for name in ("results/b", "results/a"):
        (tmp_path / name).mkdir(parents=True)
    argv = run_action_script(tmp_path, command="github comment", results="results/*", pr="7", config="", suite="")
    assert argv == ["github", "comment", "results/a", "results/b", "--pr", "7"]


@pytest.mark.parametrize(
    ("command", "sees_token"),
    [("check", False), ("baseline record", False), ("report", False), ("github comment", True), ("runner reap", True)],
)
def test_token_reaches_only_commands_that_talk_to_github(tmp_path: Path, command: str, sees_token: bool) -> None:
    # The step's env expression blanks it for other commands; the script also unsets what is left.
    expression = ACTION["runs"]["steps"][2]["env"]["PRECISIONBOT_GITHUB_TOKEN"]
    assert "startsWith(inputs.command, 'github')" in expression and "startsWith(inputs.command, 'runner')" in expression
    argv = run_action_script(tmp_path, command=command, github_token="ghs_secret", stub_prints_token="1")
    assert argv[0] == ("ghs_secret" if sees_token else "<no token>")


def test_install_is_hash_locked_and_the_lock_covers_every_dependency() -> None:
    install = ACTION["runs"]["steps"][1]["run"]
    assert '--require-hashes -r "$PRECISIONBOT_ACTION_PATH/requirements/action.txt"' in install
    assert '--no-deps --no-build-isolation --no-index "$PRECISIONBOT_ACTION_PATH"' in install
    lock = (ROOT / "requirements" / "action.txt").read_text()
    pins = dict(re.findall(r"^([a-z0-9_.-]+)==(\S+) \\$", lock, flags=re.MULTILINE))
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        name = re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pins, f"{name} is not in requirements/action.txt: run scripts/lock-action"
    assert "setuptools" in pins  # the build backend, for --no-build-isolation
    for block in re.split(r"\n(?=[a-z0-9_.-]+==)", lock)[1:]:
        assert "--hash=sha256:" in block, block.splitlines()[0]


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
