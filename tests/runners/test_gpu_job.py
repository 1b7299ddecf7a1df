"""The example workflow's `gpu` job against the runner it runs on: the PR step's output cannot command the
runner, results are collected and uploaded only after every PR process has ended, and every pr.sh call the
job makes is one the instance's sudo rule allows."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from precisionbot.runners.userdata import COLLECT_DIR, render_user_data
from tests.runners.test_userdata import JIT, _extract, _run, _runner_tarball, local_spec

ROOT = Path(__file__).resolve().parents[2]
PR_SH = "sudo -n /usr/local/lib/precisionbot/pr.sh"
GPU_STEP = "Install and check the PR's engine, as the PR user"


def _gpu_steps() -> list[dict[str, Any]]:
    doc = yaml.safe_load((ROOT / "examples" / "workflows" / "precision.yml").read_text())
    steps: list[dict[str, Any]] = doc["jobs"]["gpu"]["steps"]
    return steps


# PR code's attempts to command the runner: hide lines, install a matcher, forge an annotation, open its own
# stop window and close it, guess the resume token, and leave a last line without a newline.
HOSTILE = (
    "::add-mask::x\n::add-matcher::.github/m.json\n::error file=a.py::forged\n::stop-commands::mine\n::mine::\n"
    f"::{'0' * 32}::\n::warning::no newline"
)


def _run_step(tmp_path: Path, rc: int = 0, end_rc: int = 0) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The PR step's script as the runner user's bash runs it, with pr.sh replaced by a stand-in that prints
    HOSTILE for `run` (as PR code would), exits ``end_rc`` for `end` and records each call's argv and
    environment."""
    (step,) = [s for s in _gpu_steps() if s.get("name") == GPU_STEP]
    calls = tmp_path / "calls"
    fake = tmp_path / "pr.sh"
    fake.write_text(
        "#!/bin/bash\n"
        f'{{ printf "%s " "$@"; echo; env; }} >> {calls}\n'
        f'if [ "$1" = run ]; then printf "%s" {shlex.quote(HOSTILE)}; exit {rc}; fi\n'
        f'if [ "$1" = end ]; then exit {end_rc}; fi\n'
    )
    fake.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CELL": "0", "SUITE": "pr", "MODEL": "m", "PR": "7"}
    env |= {"CHECKS": "match", "SAMPLES": "4", "DEFAULT_BRANCH": "main", "SHA": "b" * 40, "MODE": "check"}
    env |= {"BISECT_GOOD": "", "ACCEPT_REASON": "", "ACCEPTED_BY": ""}
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"].replace(PR_SH, str(fake))],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return done, calls.read_text().splitlines()


def _obeyed(lines: list[str]) -> list[str]:
    """The workflow commands the runner acts on, by its rules: after `::stop-commands::T` it ignores every
    command until a line that is exactly `::T::`."""
    obeyed, stopped_by = [], None
    for line in lines:
        if stopped_by is not None:
            if line == f"::{stopped_by}::":
                obeyed.append(line)
                stopped_by = None
            continue
        if line.startswith("::"):
            obeyed.append(line)
            if line.startswith("::stop-commands::"):
                stopped_by = line.removeprefix("::stop-commands::")
    return obeyed


def _token(lines: list[str]) -> str:
    """The resume token, from the step's first two lines: masked first, then the stop line. The runner always
    echoes a stop line into the job's log (anyone may watch it live on a public repository), never an add-mask
    line, and the masker then hides the token in the echoed stop line."""
    (token,) = re.fullmatch(r"::add-mask::([0-9a-f]{32})", lines[0]).groups()  # type: ignore[union-attr]
    assert lines[1] == f"::stop-commands::{token}"
    return token


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("rc", [0, 1])
def test_pr_output_cannot_command_the_runner(tmp_path: Path, rc: int) -> None:
    done, calls = _run_step(tmp_path, rc)
    assert done.returncode == rc, done.stderr  # the PR step's own verdict still decides the step
    lines = done.stdout.splitlines()
    start = _token(lines)
    # The stop window opens before any PR output and closes last, on a line of its own (the PR's last line had
    # no newline), after pr.sh end has ended the PR user's leftover processes (the calls' order, below).
    assert lines[-1] == f"::{start}::" and "::warning::no newline" in lines
    assert _obeyed(lines) == [f"::add-mask::{start}", f"::stop-commands::{start}", f"::{start}::"]
    # The token is in nothing PR code can see: not pr.sh's arguments or environment, not stderr; and in the
    # step's output only in the mask line, the stop line and the resume line.
    assert not any(start in call for call in calls) and start not in done.stderr
    assert [n for n, line in enumerate(lines) if start in line] == [0, 1, len(lines) - 1]
    assert [call.split()[0] for call in calls if call.startswith(("run ", "end "))] == ["run", "end"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("rc", [0, 1])
def test_commands_stay_stopped_when_end_fails(tmp_path: Path, rc: int) -> None:
    """A PR process that survived `pr.sh end` may still be printing into the step's log: commands do not resume
    in this step, and it fails whatever the PR step's own verdict was."""
    done, calls = _run_step(tmp_path, rc, end_rc=1)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    start = _token(lines)
    assert f"::{start}::" not in lines and not any(start in line for line in lines[2:])
    assert _obeyed(lines) == [f"::add-mask::{start}", f"::stop-commands::{start}"]
    assert [call.split()[0] for call in calls if call.startswith(("run ", "end "))] == ["run", "end"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_resume_token_is_fresh_every_run(tmp_path: Path) -> None:
    tokens = set()
    for n in range(3):
        (tmp_path / str(n)).mkdir()
        tokens.add(_token(_run_step(tmp_path / str(n))[0].stdout.splitlines()))
    assert len(tokens) == 3


def test_results_are_collected_and_uploaded_only_after_end_succeeded() -> None:
    """P9: a PR process that survived `pr.sh end` could still be rewriting the results, or racing the upload,
    which holds the run's artifact token: then nothing is collected or uploaded."""
    steps = _gpu_steps()
    names = [step.get("name") or step.get("uses", "") for step in steps]
    end = steps[names.index("End the PR user's processes")]
    collect = steps[names.index("Collect the results")]
    (upload,) = [step for step in steps if str(step.get("uses", "")).startswith("actions/upload-artifact@")]
    assert end["id"] == "end" and end["if"] == "always()"  # ends the processes even after a failure or cancel
    assert collect["id"] == "collect" and collect["if"] == "always() && steps.end.outcome == 'success'"
    assert upload["if"] == "always() && steps.end.outcome == 'success' && steps.collect.outcome == 'success'"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_every_pr_sh_call_of_the_job_is_one_the_sudo_rule_allows(tmp_path: Path) -> None:
    """The sudo rule pins pr.sh's arguments: the job's own calls must match it (with RUNNER_TEMP where the
    runner puts it, RUNNER_DIR/_work/_temp), or the job would fail on every instance."""
    runner_dir = tmp_path / "actions-runner"
    runner_dir.mkdir()
    _extract(_runner_tarball(tmp_path), runner_dir)
    _run(tmp_path, render_user_data(local_spec(tmp_path, runner_dir=str(runner_dir)), JIT))
    rule = (tmp_path / "etc" / "sudoers.d" / "precisionbot").read_text().strip()
    allowed = rule.split(" NOPASSWD: ", 1)[1].split(", ")
    pr_sh = f"{tmp_path}/hooks/pr.sh"
    # Each call's arguments: after PR_SH, up to the end of the command (`;`, `||`) or of the pinned part.
    calls = [
        re.split(r" -c |;| \|\| ", line.split(PR_SH, 1)[1])[0]
        for step in _gpu_steps()
        for line in step.get("run", "").splitlines()
        if PR_SH in line
    ]
    temp = f"{runner_dir}/_work/_temp"
    assert sorted(calls) == sorted(
        [" run -- bash -euo pipefail", " end", " end", f' collect results "$RUNNER_TEMP/{COLLECT_DIR}"']
    )
    for call in calls:
        # sudo matches a rule's arguments as fnmatch does (`*` spans spaces too).
        argv = pr_sh + call.replace('"$RUNNER_TEMP', temp).replace('"', "")
        assert any(fnmatch.fnmatchcase(argv, entry) for entry in allowed), (argv, allowed)
