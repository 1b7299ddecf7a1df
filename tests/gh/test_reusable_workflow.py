"""The reusable workflow (.github/workflows/precision*.yml, what a caller's one `uses:` line runs) against the
copy-in example (examples/workflows/): the same jobs, permissions, environments, secrets, trust gates and
runner labels, every action pinned by SHA; the callers (examples/callers/) at most 30 lines with one pinned
`uses:`; and precisionbot in a virtual environment of its own on the GPU runner, never the engine's."""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
REUSABLE = ROOT / ".github" / "workflows"
EXAMPLES = ROOT / "examples" / "workflows"
CALLERS = ROOT / "examples" / "callers"
# reusable workflow -> the example it must match
PAIRS = {
    "precision.yml": "precision.yml",
    "precision-gate.yml": "precision-pr.yml",
    "precision-reap.yml": "precision-reap.yml",
}
SHA = re.compile(r"^[0-9a-f]{40}$")
PINNED_ACTION = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
PR_SH = "sudo -n /usr/local/lib/precisionbot/pr.sh"
GPU_STEP = "Install and check the PR's engine, as the PR user"
ENGINE_KINDS = {"sglang", "vllm", "llamacpp", "openai"}


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def action_name(uses: str) -> str:
    return uses.split("@", 1)[0]


def clauses(condition: str | None) -> set[str]:
    """A job's `if:` as its top-level `&&` clauses, whitespace-normalised."""
    text = " ".join(str(condition or "").split())
    return {part.strip() for part in text.split(" && ") if part.strip()}


def boundary(job: dict[str, Any]) -> dict[str, Any]:
    """What decides who can reach what in a job: needs, permissions, environment, secrets it reads, the
    actions it runs (in order), and whether a `run:` step of its own touches PR code (pr.sh)."""
    steps = job.get("steps", [])
    return {
        "needs": job.get("needs"),
        "permissions": job.get("permissions"),
        "environment": job.get("environment"),
        "secrets": sorted(set(re.findall(r"secrets\.([A-Za-z_]+)", str(job)))),
        "actions": [action_name(s["uses"]) for s in steps if "uses" in s],
        "runs_pr_code": any(PR_SH + " run" in str(s.get("run", "")) for s in steps),
        "concurrency": job.get("concurrency"),
    }


def differences(example: dict[str, Any], reusable: dict[str, Any]) -> list[str]:
    """Every trust-boundary difference between the example and the reusable workflow; empty when equal. The
    reusable workflow may only add `if:` clauses (its `runner` input), never drop one."""
    found = []
    if set(example["jobs"]) != set(reusable["jobs"]):
        found.append(f"jobs: {sorted(example['jobs'])} vs {sorted(reusable['jobs'])}")
    if example.get("permissions") != reusable.get("permissions"):
        found.append("workflow permissions")
    for name in sorted(set(example["jobs"]) & set(reusable["jobs"])):
        ex, re_ = example["jobs"][name], reusable["jobs"][name]
        a, b = boundary(ex), boundary(re_)
        for key in a:
            if a[key] != b[key]:
                found.append(f"{name}.{key}: {a[key]!r} vs {b[key]!r}")
        missing = clauses(ex.get("if")) - clauses(re_.get("if"))
        if missing:
            found.append(f"{name}.if lacks {sorted(missing)}")
        if name != "gpu" and ex.get("runs-on") != re_.get("runs-on"):
            found.append(f"{name}.runs-on: {ex.get('runs-on')!r} vs {re_.get('runs-on')!r}")
    return found


@pytest.mark.parametrize(("reusable", "example"), PAIRS.items())
def test_the_reusable_workflow_keeps_the_example_s_trust_boundaries(reusable: str, example: str) -> None:
    assert differences(load(EXAMPLES / example), load(REUSABLE / reusable)) == []


def test_a_changed_trust_boundary_is_reported() -> None:
    """The comparison itself: a secret handed to the job that runs PR code, a wider permission, a dropped
    trust gate or a job without its environment each show up."""
    example, reusable = load(EXAMPLES / "precision.yml"), load(REUSABLE / "precision.yml")
    leaks = copy.deepcopy(reusable)
    leaks["jobs"]["gpu"]["steps"][3]["env"]["HF_TOKEN"] = "${{ secrets.HF_TOKEN }}"
    assert any(d.startswith("gpu.secrets") for d in differences(example, leaks))
    wider = copy.deepcopy(reusable)
    wider["jobs"]["gpu"]["permissions"]["pull-requests"] = "write"
    assert any(d.startswith("gpu.permissions") for d in differences(example, wider))
    ungated = copy.deepcopy(reusable)
    ungated["jobs"]["launch"]["if"] = "needs.plan.outputs.run == 'true'"
    assert any("launch.if lacks" in d for d in differences(example, ungated))
    homeless = copy.deepcopy(reusable)
    del homeless["jobs"]["publish-baseline"]["environment"]
    assert any(d.startswith("publish-baseline.environment") for d in differences(example, homeless))


def test_the_gpu_job_runs_pr_code_without_secrets_on_the_cell_s_label() -> None:
    jobs = load(REUSABLE / "precision.yml")["jobs"]
    gpu = jobs["gpu"]
    assert gpu["permissions"] == {"contents": "read"} and "environment" not in gpu
    assert "secrets." not in str(gpu)
    # ec2: the plan's random label only; pool: the config's labels, and then launch is skipped.
    assert gpu["runs-on"] == "${{ inputs.runner == 'pool' && matrix.runner.labels || matrix.label }}"
    assert {"needs.plan.outputs.run == 'true'", "github.event_name != 'pull_request'"} <= clauses(gpu["if"])
    assert "inputs.runner == 'ec2'" in clauses(jobs["launch"]["if"]) and "inputs.runner == 'ec2'" in clauses(
        jobs["terminate"]["if"]
    )
    # The steps after PR code are the example's, word for word: end, collect, upload the collected copy.
    example = load(EXAMPLES / "precision.yml")["jobs"]["gpu"]["steps"]
    assert gpu["steps"][-3:] == example[-3:]
    assert [s.get("uses") for s in gpu["steps"][:3]] == [s.get("uses") for s in example[:3]]
    assert [s["with"] for s in gpu["steps"][:2]] == [s["with"] for s in example[:2]]
    step = gpu["steps"][3]
    assert step["name"] == GPU_STEP
    # The stop-commands window and every pr.sh call have the example's shape (the sudo rule allows them).
    for line in ('echo "::add-mask::$resume"', 'echo "::stop-commands::$resume"', "printf '\\n::%s::\\n' \"$resume\""):
        assert line in step["run"]
    calls = sorted(
        re.split(r" -c |;| \|\| ", line.split(PR_SH, 1)[1])[0] for line in step["run"].splitlines() if PR_SH in line
    )
    assert calls == [" end", " run -- bash -euo pipefail"]
    assert all("secrets." not in str(value) for value in step["env"].values())


def workflow_uses(path: Path) -> list[str]:
    doc = load(path)
    found = []
    for job in doc["jobs"].values():
        if "uses" in job:
            found.append(job["uses"])
        found += [s["uses"] for s in job.get("steps", []) if "uses" in s]
    return found


@pytest.mark.parametrize("name", sorted(PAIRS), ids=str)
def test_every_action_is_pinned_by_sha_and_precisionbot_to_one_release_commit(name: str) -> None:
    text = (REUSABLE / name).read_text()
    for uses in workflow_uses(REUSABLE / name):
        assert uses.startswith("./") or PINNED_ACTION.match(uses), uses
    # The release sets every precisionbot pin to the same code commit (docs/github.md, Releasing).
    pins = set(re.findall(r"precisionbot/precisionbot@([0-9a-f]{40})", text))
    steps = [s for j in load(REUSABLE / name)["jobs"].values() for s in j.get("steps", [])]
    pins |= {str(s["with"]["ref"]) for s in steps if s.get("with", {}).get("repository") == "precisionbot/precisionbot"}
    assert len(pins) == 1, pins


def test_the_runner_token_is_minted_per_job_with_a_stored_token_as_fallback() -> None:
    """docs/runners.md recommends a short-lived App token minted in each job: every job that passes a token
    to `runner *` mints one first, scoped to Administration, and falls back to the stored secret only
    without an App."""
    for path in [REUSABLE / "precision.yml", REUSABLE / "precision-reap.yml", *EXAMPLES.glob("precision*.yml")]:
        for name, job in load(path)["jobs"].items():
            steps = job.get("steps", [])
            for i, step in enumerate(steps):
                if not str(step.get("with", {}).get("command", "")).startswith("runner "):
                    continue
                mint = [s for s in steps[:i] if action_name(s.get("uses", "")) == "actions/create-github-app-token"]
                assert len(mint) == 1, (path.name, name)
                assert mint[0]["id"] == "app" and mint[0]["with"]["permission-administration"] == "write"
                assert step["with"]["token"] == "${{ steps.app.outputs.token || secrets.PRECISIONBOT_RUNNER_TOKEN }}"
                assert job["environment"] == "precisionbot", (path.name, name)
    declared = load(REUSABLE / "precision.yml")[True]["workflow_call"]["secrets"]  # YAML 1.1 reads `on` as True
    assert set(declared) == {"PRECISIONBOT_APP_PRIVATE_KEY", "PRECISIONBOT_RUNNER_TOKEN"}


def caller_files() -> list[Path]:
    return sorted(CALLERS.glob("*.yml"))


def test_there_is_a_caller_for_each_engine_kind_and_the_two_companions() -> None:
    assert {p.stem for p in caller_files()} == ENGINE_KINDS | {"precision-pr", "precision-reap"}


@pytest.mark.parametrize("path", caller_files(), ids=lambda p: p.name)
def test_a_caller_is_at_most_30_lines_with_one_pinned_uses(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= 30
    uses_lines = [line for line in text.splitlines() if re.match(r"^\s*(- )?uses:", line)]
    assert len(uses_lines) == 1, uses_lines
    (uses,) = workflow_uses(path)
    target, ref = uses.split("@", 1)
    assert SHA.match(ref) or re.fullmatch(r"v\d+\.\d+\.\d+", ref), ref
    owner_repo, _, workflow = target.partition("/.github/workflows/")
    assert owner_repo == "precisionbot/precisionbot" and (REUSABLE / workflow).is_file()
    check_the_call(load(path), load(REUSABLE / workflow))


def check_the_call(caller: dict[str, Any], called: dict[str, Any]) -> None:
    """What GitHub checks when it starts the call, and what we add: the inputs exist and the required ones
    are given; the caller's job grants every permission the called jobs ask for (a called job can only get
    less); no secret is passed (the environment's secrets reach the jobs that name it), `inherit` included."""
    (job,) = caller["jobs"].values()
    spec = called[True]["workflow_call"]
    inputs = spec.get("inputs", {})
    given = job.get("with", {})
    assert set(given) <= set(inputs), set(given) - set(inputs)
    assert {k for k, v in inputs.items() if v.get("required")} <= set(given)
    assert "secrets" not in job
    order = {"read": 1, "write": 2}
    for name, called_job in called["jobs"].items():
        for scope, level in called_job.get("permissions", {}).items():
            granted = job["permissions"].get(scope)
            assert granted is not None and order[granted] >= order[level], (name, scope)
    if "engine-kind" in given:
        assert given["engine-kind"] in ENGINE_KINDS and given["runner"] in {"ec2", "pool"}


@pytest.mark.parametrize("kind", sorted(ENGINE_KINDS))
def test_an_engine_caller_has_the_example_s_triggers_and_companions(kind: str) -> None:
    caller, example = load(CALLERS / f"{kind}.yml"), load(EXAMPLES / "precision.yml")
    assert caller["name"] == "precision" and caller["permissions"] == {}
    assert set(caller[True]) == set(example[True])
    assert "pull_request" not in caller[True] and "pull_request_target" not in caller[True]
    assert caller[True]["workflow_run"] == example[True]["workflow_run"]
    assert caller[True]["workflow_run"]["workflows"] == [load(CALLERS / "precision-pr.yml")["name"]]
    assert set(caller[True]["workflow_dispatch"]["inputs"]) == set(example[True]["workflow_dispatch"]["inputs"])
    gate = load(CALLERS / "precision-pr.yml")
    assert (
        list(gate[True]) == ["pull_request"]
        and gate["concurrency"] == load(EXAMPLES / "precision-pr.yml")["concurrency"]
    )


def stub_python(tmp_path: Path) -> Path:
    """A `python3` that logs every call with the venv it belongs to and, for `-m venv DIR`, makes DIR a venv
    of stubs (python, an activate script, a precisionbot that logs its venv and the python on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "python3"
    stub.write_text(
        "#!/bin/bash\n"
        'venv="$(cd "$(dirname "$0")/.." && pwd)"\n'
        'echo "python $venv CCACHE_DIR=${CCACHE_DIR:-} HF_HOME=${HF_HOME:-} $*" >> "$LOG"\n'
        'if [ "$1 $2" = "-m venv" ]; then\n'
        '  mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; cp "$0" "$3/bin/python3"\n'
        '  printf "export VIRTUAL_ENV=%s\\nexport PATH=%s/bin:\\$PATH\\n" "$3" "$3" > "$3/bin/activate"\n'
        '  out="$3/bin/precisionbot"\n'
        '  fmt="#!/bin/bash\\necho \\"precisionbot %s \\$(command -v python) \\$*\\" >> \\"\\$LOG\\"\\n"\n'
        '  printf "$fmt" "$3" > "$out"\n'
        '  chmod +x "$3/bin/precisionbot"\n'
        "fi\n"
    )
    stub.chmod(0o755)
    return bin_dir


def run_pr_step(tmp_path: Path, workflow: Path, **env: str) -> list[str]:
    """The gpu job's PR step, with pr.sh replaced by a stand-in that runs the command as this user."""
    (step,) = [s for s in load(workflow)["jobs"]["gpu"]["steps"] if s.get("name") == GPU_STEP]
    fake = tmp_path / "pr.sh"
    fake.write_text('#!/bin/bash\nif [ "$1" = run ]; then shift 2; exec "$@"; fi\nexit 0\n')
    fake.chmod(0o755)
    log = tmp_path / "log"
    home = tmp_path / "home"
    home.mkdir()
    values = {name: "" for name in step["env"]}
    values |= {"MODE": "check", "SHA": "b" * 40, "PR": "7", "DEFAULT_BRANCH": "main", "SUITE": "pr", "MODEL": "m"}
    values |= {"CHECKS": "match", "SAMPLES": "4", "CELL": "0", "CONFIG": ".github/precision.yml"}
    values |= {"ENGINE_KIND": "sglang", "INSTALL": "python -m pip install -e .", "RUNNER_PYTHON": "python3"}
    values |= env
    path = f"{stub_python(tmp_path)}:{os.environ['PATH']}"
    subprocess.run(
        ["bash", "-e", "-c", step["run"].replace(PR_SH, str(fake))],
        cwd=tmp_path, env=values | {"PATH": path, "HOME": str(home), "LOG": str(log)},
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return log.read_text().splitlines()


@pytest.mark.parametrize(
    "workflow", [EXAMPLES / "precision.yml", REUSABLE / "precision.yml"], ids=["example", "reusable"]
)
def test_precisionbot_runs_from_its_own_venv_with_the_engine_s_python_on_path(tmp_path: Path, workflow: Path) -> None:
    """Friction 11: precisionbot's hash-locked pins (numpy and others) used to go into the engine's own
    environment, where they could downgrade the engine's. Now the engine is built in one venv, precisionbot
    installed into another, and precisionbot runs from its own with the engine's python first on PATH (the
    launch template and engine.install run the engine's)."""
    log = run_pr_step(tmp_path, workflow)
    (lock,) = [line.split()[1] for line in log if "--require-hashes -r .precisionbot/requirements/action.txt" in line]
    (engine,) = [line.split()[1] for line in log if re.search(r"-m pip install -e ", line)]
    (ours,) = [line.split() for line in log if line.startswith("precisionbot ")]
    assert lock != engine
    assert ours[1] == lock and ours[2] == f"{engine}/bin/python"
    assert ours[3:5] == ["check", "--config"]


def test_the_build_cache_serves_checks_but_never_a_baseline(tmp_path: Path) -> None:
    """Friction 12: the engine's caches come from the runner's folders the caller names; a baseline or accept
    run builds without the build cache, so what a PR left there never reaches a recorded baseline."""
    cache = {"BUILD_CACHE": str(tmp_path / "cache"), "MODEL_CACHE": "/opt/models", "STORE": "s3://b/p"}
    (check_dir := tmp_path / "check").mkdir()
    log = run_pr_step(check_dir, REUSABLE / "precision.yml", **cache)
    (install,) = [line for line in log if "-m pip install -e ." in line]
    assert f"CCACHE_DIR={tmp_path}/cache/ccache" in install and "HF_HOME=/opt/models" in install
    (ours,) = [line.split() for line in log if line.startswith("precisionbot ")]
    assert ours[ours.index("--engine-kind") + 1] == "sglang" and ours[ours.index("--store") + 1] == "s3://b/p"
    for mode in ("baseline", "accept"):
        (mode_dir := tmp_path / mode).mkdir()
        log = run_pr_step(mode_dir, REUSABLE / "precision.yml", MODE=mode, ACCEPT_REASON="r", ACCEPTED_BY="a", **cache)
        (install,) = [line for line in log if "-m pip install -e ." in line]
        assert "CCACHE_DIR= " in install and "HF_HOME=/opt/models" in install
        (ours,) = [line.split() for line in log if line.startswith("precisionbot ")]
        assert ours[3:5] == ["baseline", "record"] and ours[ours.index("--store") + 1] == "results/0/store"
        if mode == "accept":
            assert ours[ours.index("--replaces-from") + 1] == "s3://b/p"


def test_bad_inputs_are_refused_by_name(tmp_path: Path) -> None:
    (step,) = [
        s for s in load(REUSABLE / "precision.yml")["jobs"]["plan"]["steps"] if s.get("name") == "Check the inputs"
    ]
    good = {"RUNNER": "ec2", "CONFIG": ".github/precision.yml", "ENGINE_KIND": "vllm", "PATH": os.environ["PATH"]}
    assert subprocess.run(["bash", "-e", "-c", step["run"]], env=good, capture_output=True, text=True).returncode == 0
    for name, value, says in (
        ("RUNNER", "ec3", "input runner is 'ec3'; use ec2 or pool"),
        ("CONFIG", "precision.yml", "input config 'precision.yml' must be under .github/"),
        ("ENGINE_KIND", "sglang-server", "input engine-kind is 'sglang-server'"),
    ):
        done = subprocess.run(
            ["bash", "-e", "-c", step["run"]], env=good | {name: value}, capture_output=True, text=True
        )
        assert done.returncode == 1 and says in done.stdout
