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
        "bisect_good",
        "accept_reason",
        "accepted_by",
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
    for name in ("plan", "launch", "report", "comment", "terminate"):
        assert jobs[name]["steps"][0]["with"]["ref"] == "${{ github.event.pull_request.base.sha || github.sha }}"
    # Matrix jobs are named explicitly: the default name would list the matrix values, the label among them.
    assert jobs["launch"]["name"] == "launch ${{ matrix.name }}" and jobs["gpu"]["name"] == "gpu ${{ matrix.name }}"
    # The comment job is pinned to the plan's commit; the report judges with the base branch's config.
    comment_step = jobs["comment"]["steps"][-1]["with"]
    assert comment_step["sha"] == "${{ needs.plan.outputs.sha }}" and comment_step["config"] == ".github/precision.yml"
    report_step = next(step for step in jobs["report"]["steps"] if step.get("with", {}).get("command") == "report")
    assert report_step["with"]["config"] == ".github/precision.yml" and report_step["with"]["extras"] == "report"
    assert (ROOT / "requirements" / "report.txt").is_file()  # so the Action installs the extra hash-locked
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
    (tmp_path / "pinned" / "results" / "a").mkdir(parents=True)
    pinned = run_action_script(tmp_path / "pinned", command="github comment", results="results/a", pr="7", sha="2" * 40)
    assert pinned == ["github", "comment", "results/a", "--pr", "7", "--sha", "2" * 40]
    (tmp_path / "report" / "results" / "a").mkdir(parents=True)
    report = run_action_script(tmp_path / "report", command="report", results="results/a", config="base.yml")
    assert report == ["report", "results/a", "--config", "base.yml"]


def test_script_builds_bisect_comment_arguments(tmp_path: Path) -> None:
    for name in ("results/1", "results/0"):
        (tmp_path / name).mkdir(parents=True)
    argv = run_action_script(tmp_path, command="github bisect-comment", results="results/*", pr="7", sha="2" * 40)
    assert argv == ["github", "bisect-comment", "results/0", "results/1", "--pr", "7", "--sha", "2" * 40]
    (tmp_path / "empty").mkdir()  # no artifact at all: no DIR, and the command posts "no result"
    assert run_action_script(tmp_path / "empty", command="github bisect-comment", results="results/*", pr="7") == [
        "::warning::precisionbot: no result directory matches results/*",
        "github",
        "bisect-comment",
        "--pr",
        "7",
    ]


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
    assert 'lock="$PRECISIONBOT_ACTION_PATH/requirements/action.txt"' in install
    assert '--require-hashes -r "$lock"' in install
    assert '--no-deps --no-build-isolation --no-index "$PRECISIONBOT_ACTION_PATH"' in install
    check_lock(ROOT / "requirements" / "action.txt")


def test_the_report_extra_is_hash_locked_too() -> None:
    """The report job installs matplotlib: from requirements/report.txt, every file hash-checked, with the
    Action's own pins for what the two share."""
    pins = check_lock(ROOT / "requirements" / "report.txt")
    assert "matplotlib" in pins and "numpy" in pins
    action = check_lock(ROOT / "requirements" / "action.txt")
    assert {name: pins[name] for name in action} == action


def check_lock(path: Path) -> dict[str, str]:
    """The lock's pins; every one carries hashes and every [project] dependency is pinned."""
    lock = path.read_text()
    pins = dict(re.findall(r"^([a-z0-9_.-]+)==(\S+) \\$", lock, flags=re.MULTILINE))
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        name = re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pins, f"{name} is not in {path.name}: run scripts/lock-action and scripts/lock-report"
    assert "setuptools" in pins  # the build backend, for --no-build-isolation
    for block in re.split(r"\n(?=[a-z0-9_.-]+==)", lock)[1:]:
        assert "--hash=sha256:" in block, block.splitlines()[0]
    return pins


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


PR_SH = "sudo -n /usr/local/lib/precisionbot/pr.sh"


def test_the_gpu_job_runs_pr_code_only_as_the_pr_user() -> None:
    """The killdemo, in the workflow's shape. PR code used to run as the runner user and could bypass the
    step that ended its processes before upload-artifact (which holds the run's token): BASH_ENV through
    $GITHUB_ENV, a fake `id` first on $GITHUB_PATH, an edited upload-artifact under _work/_actions. Now every
    step that runs PR code goes through the root-owned pr.sh as the PR user (who cannot reach RUNNER_DIR, where
    those files live: tests/runners/test_userdata.py), its processes are ended by an absolute-path root helper,
    and upload-artifact reads a root-made copy of the results."""
    from precisionbot.runners.records import RunnerSpec

    doc = yaml.safe_load((ROOT / "examples" / "workflows" / "precision.yml").read_text())
    steps = doc["jobs"]["gpu"]["steps"]
    hook_dir = RunnerSpec(repo="o/r", name="n", label="l").hook_dir
    assert f"sudo -n {hook_dir}/pr.sh" == PR_SH  # where the user-data puts it
    runs = [(i, step) for i, step in enumerate(steps) if "run" in step]
    first_pr = runs[0][0]
    # Before it: checkouts only (data; persist-credentials false). No step of ours runs anything else.
    assert all(str(step.get("uses", "")).startswith("actions/checkout@") for step in steps[:first_pr])
    assert all(step["with"]["persist-credentials"] is False for step in steps[:first_pr])
    for _, step in runs:
        script = step["run"]
        # Outside the single-quoted script handed to pr.sh nothing builds, installs or runs workspace code.
        code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
        outside = re.sub(r"-c '[^']*'", "-c ''", code)
        assert PR_SH in outside, step["name"]
        for word in ("python", "pip ", "./", "bash -c", "source ", ". ", "make"):
            assert word not in outside.replace("bash -euo pipefail -c ''", ""), (step["name"], word)
    names = [step.get("name") or step.get("uses", "") for step in steps]
    end, collect = names.index("End the PR user's processes"), names.index("Collect the results")
    assert steps[end]["run"].strip() == f"{PR_SH} end" and steps[end]["if"] == "always()"
    assert steps[collect]["run"].strip().startswith(f"{PR_SH} collect results ") and collect == end + 1
    # The only action after PR code is upload-artifact, last, reading the collected copy (not the workspace).
    (upload,) = steps[collect + 1 :]
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"]["path"] == "${{ runner.temp }}/precision-results/"
    assert "$RUNNER_TEMP/precision-results" in steps[collect]["run"]


GPU_STEP = "Install and check the PR's engine, as the PR user"


def _precision_jobs() -> dict[str, Any]:
    return jobs_of(yaml.safe_load((ROOT / "examples" / "workflows" / "precision.yml").read_text()))


def test_bisect_runs_on_the_gpu_runner_as_the_pr_user_and_posts_from_a_job_without_pr_code() -> None:
    """/precision bisect (docs/github.md): the gpu job (launched and terminated like any run) builds each
    commit as the PR user, with full history; a separate job that runs no engine code renders the comment
    from bisect.json with our command."""
    jobs = _precision_jobs()
    plan = jobs["plan"]["outputs"]
    assert plan["bisect_good"] == "${{ steps.plan.outputs.bisect_good }}"
    gpu = jobs["gpu"]
    checkout = gpu["steps"][0]["with"]
    assert checkout["fetch-depth"] == "${{ needs.plan.outputs.mode == 'bisect' && '0' || '1' }}"
    (step,) = [s for s in gpu["steps"] if s.get("name") == "Install and check the PR's engine, as the PR user"]
    assert step["env"]["BISECT_GOOD"] == "${{ needs.plan.outputs.bisect_good }}"
    script = step["run"]
    bisect_case = script[script.index("bisect)") : script.index(";;", script.index("bisect)"))]
    for flag in ('--good "$good"', '--bad "$SHA"', '--out "results/$CELL/bisect.json"', "--cache"):
        assert flag in bisect_case, flag
    assert "--comment" not in bisect_case  # the comment is rendered from bisect.json: no bisect.md is written
    assert 'git merge-base "origin/$DEFAULT_BRANCH" "$SHA"' in bisect_case  # no good= in the comment
    assert script.index(PR_SH) > script.index("esac")  # every mode runs through pr.sh as the PR user
    # Launch and terminate do not depend on the mode: a bisect gets its instance and always gives it back.
    assert "mode" not in jobs["launch"]["if"] and "mode" not in jobs["terminate"]["if"]

    post = jobs["bisect-comment"]
    assert post["needs"] == ["plan", "gpu"]
    assert post["if"] == "always() && needs.plan.outputs.run == 'true' && needs.plan.outputs.mode == 'bisect'"
    assert post["permissions"] == {"pull-requests": "write"}
    assert "environment" not in post and "secrets." not in str(post)
    # No checkout and no script: the job downloads the artifact and our command renders the comment from
    # bisect.json (bisect.md, written by PR code, is never posted).
    assert not [s for s in post["steps"] if "run" in s] and "bisect.md" not in str(post["steps"])
    download, poster = post["steps"]
    assert download["uses"].startswith("actions/download-artifact@")
    assert poster["uses"].startswith("precisionbot/precisionbot@")
    assert poster["with"] == {
        "command": "github bisect-comment",
        "results": "results/*",
        "pr": "${{ needs.plan.outputs.pr }}",
        "sha": "${{ needs.plan.outputs.sha }}",
    }
    # The sticky check comment and the report are for check runs only.
    for name in ("report", "comment"):
        assert "needs.plan.outputs.mode == 'check'" in jobs[name]["if"], name


def test_accept_records_the_merge_commit_through_env_and_publishes_only_from_our_code() -> None:
    """/precision accept: the reason is comment text, so it reaches `baseline record` as an environment
    variable and argv, never spliced into a script; the store is written only by the publish job, which runs
    on the plan's accept (or baseline) decision and runs no engine code."""
    jobs = _precision_jobs()
    plan = jobs["plan"]["outputs"]
    assert plan["accept_reason"] == "${{ steps.plan.outputs.accept_reason }}"
    assert plan["accepted_by"] == "${{ steps.plan.outputs.accepted_by }}"
    for path in WORKFLOWS:
        for job in jobs_of(yaml.safe_load(path.read_text())).values():
            for s in job.get("steps", []):
                assert "accept_reason" not in s.get("run", ""), path
                assert "ACCEPT_REASON }}" not in s.get("run", ""), path
    (step,) = [s for s in jobs["gpu"]["steps"] if s.get("name") == GPU_STEP]
    assert step["env"]["ACCEPT_REASON"] == "${{ needs.plan.outputs.accept_reason }}"
    assert step["env"]["ACCEPTED_BY"] == "${{ needs.plan.outputs.accepted_by }}"
    script = step["run"]
    accept_case = script[script.index("accept)") : script.index(";;", script.index("accept)"))]
    for flag in (
        '--accept-reason "$ACCEPT_REASON"',
        '--accepted-by "$ACCEPTED_BY"',
        '--pr "$PR"',
        '--engine-commit "$SHA"',
        '--store "results/$CELL/store"',  # staged: the gpu job's role cannot write the store
        "--replaces-from",  # the audit names the reference in baselines.store, not in the empty staging store
    ):
        assert flag in accept_case, flag
    publish = jobs["publish-baseline"]
    assert publish["needs"] == ["plan", "gpu"]
    assert "needs.plan.outputs.run == 'true'" in publish["if"]
    assert "needs.plan.outputs.mode == 'accept'" in publish["if"]
    assert "always()" not in publish["if"]  # a failed recording publishes nothing
    assert publish["environment"] == "precisionbot"
    assert publish["steps"][-1]["with"]["command"] == "baseline publish"
    assert all("run" not in s for s in publish["steps"])  # only actions: checkout, download, AWS, precisionbot
    # Only the publish job may assume the writer role.
    writers = [n for n, j in jobs.items() if "PRECISIONBOT_BASELINE_WRITER_ROLE_ARN" in str(j)]
    assert writers == ["publish-baseline"]


def test_plan_outputs_for_bisect_and_accept_are_declared_by_the_action() -> None:
    for name in ("bisect_good", "accept_reason", "accepted_by"):
        assert ACTION["outputs"][name]["value"] == "${{ steps.run.outputs." + name + " }}"


def run_gpu_step(tmp_path: Path, **env: str) -> list[str]:
    """Runs the gpu job's PR-user step with pr.sh replaced by a script that records its argv: what precisionbot
    would receive, as the PR user, after the runner user's bash has seen every value."""
    (step,) = [s for s in _precision_jobs()["gpu"]["steps"] if s.get("name") == GPU_STEP]
    argv_file = tmp_path / "argv"
    fake = tmp_path / "pr.sh"
    # The step also ends the PR user's processes (`pr.sh end`) before workflow commands resume: not recorded.
    fake.write_text(f'#!/bin/sh\n[ "$1" = end ] && exit 0\nfor a in "$@"; do printf "%s\\0" "$a"; done > {argv_file}\n')
    fake.chmod(0o755)
    script = step["run"].replace(PR_SH, str(fake))
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CELL": "0", "SUITE": "pr", "MODEL": "m"}
    base |= {"CHECKS": "match,golden", "SAMPLES": "4", "PR": "7", "DEFAULT_BRANCH": "main", "SHA": "b" * 40}
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=base | env, check=True)
    argv = argv_file.read_bytes().split(b"\0")[:-1]
    assert [a.decode() for a in argv[:5]] == ["run", "--", "bash", "-euo", "pipefail"]
    assert argv[5] == b"-c" and argv[7] == b"precisionbot"
    return [a.decode() for a in argv[8:]]


def test_the_accept_reason_reaches_baseline_record_as_one_argument_unevaluated(tmp_path: Path) -> None:
    reason = "fp32 router GEMM\"; touch pwned; $(touch pwned2) `touch pwned3` '"
    args = run_gpu_step(tmp_path, MODE="accept", ACCEPT_REASON=reason, ACCEPTED_BY="alice", BISECT_GOOD="")
    assert args[:2] == ["baseline", "record"]
    assert args[args.index("--accept-reason") + 1] == reason
    assert args[args.index("--accepted-by") + 1] == "alice" and args[args.index("--pr") + 1] == "7"
    assert args[args.index("--engine-commit") + 1] == "b" * 40 and "--replaces-from" in args
    assert not list(tmp_path.glob("pwned*"))


def test_bisect_defaults_good_to_the_merge_base_with_the_default_branch(tmp_path: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    for n in range(3):
        subprocess.run([*git, "-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", f"c{n}"], check=True)
    base = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD~1"], capture_output=True, text=True)
    subprocess.run(["git", "-C", str(tmp_path), "update-ref", "refs/remotes/origin/main", "HEAD~1"], check=True)
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True)
    sha = head.stdout.strip()

    args = run_gpu_step(tmp_path, MODE="bisect", SHA=sha, BISECT_GOOD="", ACCEPT_REASON="", ACCEPTED_BY="")
    assert args[0] == "bisect" and args[args.index("--good") + 1] == base.stdout.strip()
    assert args[args.index("--bad") + 1] == sha and args[args.index("--model") + 1] == "m"
    assert "--comment" not in args
    assert args[args.index("--cache") + 1] == "results/0/bisect-cache"
    assert (tmp_path / "results" / "0").is_dir()  # bisect writes its files there; pr.sh copies the workspace

    args = run_gpu_step(tmp_path, MODE="bisect", SHA=sha, BISECT_GOOD="abc1234", ACCEPT_REASON="", ACCEPTED_BY="")
    assert args[args.index("--good") + 1] == "abc1234"


def test_check_mode_is_unchanged(tmp_path: Path) -> None:
    args = run_gpu_step(tmp_path, MODE="check", BISECT_GOOD="", ACCEPT_REASON="", ACCEPTED_BY="")
    assert args[:2] == ["check", "--config"] and "--accept-reason" not in args and "--good" not in args
    assert args[args.index("--out") + 1] == "results/0"
