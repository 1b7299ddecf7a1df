"""The boot script: rendered content, and its behaviour when run by bash with the system commands stubbed."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from precisionbot.errors import ConfigError
from precisionbot.runners.records import RunnerSpec
from precisionbot.runners.userdata import render_user_data
from tests.runners.conftest import WORKFLOW_REF, runner_spec

JIT = "eyJydW5uZXJfaWQiOjEwMDF9"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(
    tmp_path: Path, script: str, tarball: Path | None = None, sudo_rules: str = "", instance_type: str = ""
) -> list[str]:
    """Run the script with shutdown/sudo/curl/... replaced by stubs that append what they were asked to do
    to a log, so the test sees the order of events without touching the machine."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "events.log"
    _stub(bin_dir, "shutdown", 'echo "shutdown $*" >> "$EVENTS"')
    _stub(
        bin_dir,
        "sudo",
        'if [ "$1" = -l ]; then echo "sudo -l $3" >> "$EVENTS"; printf "%s" "$SUDO_RULES"; exit 0; fi\n'
        'echo "sudo $*" >> "$EVENTS"; shift 2; while [ "${1#-}" != "$1" ]; do shift; done; exec "$@"',
    )
    # Never the machine's own /proc or firewall: the script's remount and rules are only logged here (the tests
    # further down apply them for real, in namespaces of their own).
    for name in ("mount", "iptables", "ip6tables"):
        _stub(bin_dir, name, f'echo "{name} $*" >> "$EVENTS"')
    _stub(bin_dir, "visudo", "exit 0")
    for name in ("gpasswd", "usermod", "getent"):
        _stub(bin_dir, name, "exit 0")
    _stub(bin_dir, "tee", "cat > /dev/null")
    _stub(bin_dir, "id", "exit 0")
    _stub(bin_dir, "chown", "exit 0")
    _stub(bin_dir, "useradd", 'echo "useradd $*" >> "$EVENTS"')
    # install -d -o root -g root -m 0755 DIR...: the folders only (ownership is the real machine's business)
    _stub(bin_dir, "install", 'shift 7; mkdir -p "$@"')
    _stub(
        bin_dir,
        "curl",
        # The instance metadata service (IMDSv2): a token, then the instance type; not an event of the job.
        'case "$*" in *169.254.169.254/latest/api/token*) echo tok; exit 0 ;; '
        '*169.254.169.254/latest/meta-data/instance-type*) printf "%s" "$ITYPE"; exit 0 ;; esac; '
        'echo "curl ${@: -1}" >> "$EVENTS"; while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done; '
        f'cp {tarball or "/nonexistent"} "$out"',
    )
    path = tmp_path / "user-data.sh"
    path.write_text(script)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "EVENTS": str(log),
        "HOME": str(tmp_path),
        "SUDO_RULES": sudo_rules,
        "ITYPE": instance_type,
    }
    subprocess.run(["bash", str(path)], env=env, cwd=tmp_path, timeout=30, check=False, capture_output=True)
    return log.read_text().splitlines() if log.exists() else []


def _runner_tarball(tmp_path: Path) -> Path:
    """A stand-in for actions-runner-linux-x64-*.tar.gz whose run.sh logs its arguments."""
    out = tmp_path / "runner.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for name, body in (
            (
                "run.sh",
                '#!/bin/bash\necho "run.sh [$*] hook=$ACTIONS_RUNNER_HOOK_JOB_STARTED'
                ' jit=$ACTIONS_RUNNER_INPUT_JITCONFIG" >> "$EVENTS"\n',
            ),
            ("bin/installdependencies.sh", "#!/bin/bash\nexit 0\n"),
        ):
            data = body.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return out


def local_spec(tmp_path: Path, **overrides: Any) -> RunnerSpec:
    """A spec whose root-owned folders (hook dir, PR workspace root, /etc) are under ``tmp_path``: the script
    really writes there when a test runs it."""
    (tmp_path / "etc").mkdir(exist_ok=True)
    fields: dict[str, Any] = dict(
        hook_dir=str(tmp_path / "hooks"), pr_root=str(tmp_path / "pr-root"), etc_dir=str(tmp_path / "etc")
    )
    return runner_spec(**{**fields, **overrides})


def test_rendered_script_has_the_watchdog_first_and_no_credentials() -> None:
    script = render_user_data(runner_spec(ttl_minutes=45), JIT)
    assert script.startswith("#!/bin/bash\n")
    lines = [line for line in script.splitlines() if line and not line.startswith("#")]
    commands = [line for line in lines if not line.startswith(("set ", "exec "))]
    assert commands[0].startswith("shutdown -h +45 ")
    # The JIT config is exported (a shell builtin: no process has it in argv), never a command's argument.
    assert [line for line in script.splitlines() if JIT in line] == [f"export ACTIONS_RUNNER_INPUT_JITCONFIG={JIT}"]
    assert "runner_sha256" not in script and "sha256sum" not in script  # no checksum line when none given
    for secret in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "ghp_"):
        assert secret not in script


def test_values_are_shell_quoted() -> None:
    script = render_user_data(runner_spec(), "abc'; rm -rf /;'")
    assert "export ACTIONS_RUNNER_INPUT_JITCONFIG='abc'\"'\"'; rm -rf /;'\"'\"''" in script


def test_a_runner_dir_the_sudo_rule_could_misread_is_refused() -> None:
    with pytest.raises(ConfigError, match="runner dir"):
        render_user_data(runner_spec(runner_dir="/opt/my runner,ALL"), JIT)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"runner_version": "latest"}, "runner version"),
        ({"runner_sha256": "abc"}, "sha256"),
        ({"ttl_minutes": 0}, "ttl-minutes"),
    ],
)
def test_bad_settings_are_config_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        render_user_data(runner_spec(**overrides), JIT)


def _extract(tarball: Path, dest: Path) -> None:
    """Extraction filters exist from Python 3.11.4 / 3.10.12 on; the README promises any 3.10."""
    with tarfile.open(tarball) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)  # our own tarball, built by this test


def test_extraction_works_on_pythons_without_extraction_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python 3.11.3's extractall: no filter keyword and no tarfile.data_filter.
    original = tarfile.TarFile.extractall

    def old_extractall(
        self: tarfile.TarFile, path: str | Path = ".", members: Any = None, *, numeric_owner: bool = False
    ) -> None:
        # "fully_trusted" is what old Pythons did, without 3.12's warning for a missing filter.
        original(self, path, members, numeric_owner=numeric_owner, filter="fully_trusted")

    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    monkeypatch.setattr(tarfile.TarFile, "extractall", old_extractall)
    _extract(_runner_tarball(tmp_path), tmp_path / "out")
    assert any((tmp_path / "out").iterdir())


def test_preinstalled_runner_runs_once_between_the_watchdog_and_power_off(tmp_path: Path) -> None:
    runner_dir = tmp_path / "actions-runner"
    runner_dir.mkdir()
    _extract(_runner_tarball(tmp_path), runner_dir)
    script = render_user_data(local_spec(tmp_path, ttl_minutes=30, runner_dir=str(runner_dir)), JIT)
    events = _run(tmp_path, script)
    assert events[0].startswith("shutdown -h +30 ")
    ipv6 = ["ip6tables -w -I OUTPUT -d fd00:ec2::254 -m owner --uid-owner precisionbot-pr -j REJECT"]
    assert events[1:] == [
        "sudo -l precisionbot-runner",
        "sudo -l precisionbot-pr",
        # /proc hidden and the metadata service closed to the PR user before the runner (and any job) starts.
        "mount -o remount,hidepid=2 /proc",
        "iptables -w -I OUTPUT -d 169.254.169.254 -m owner --uid-owner precisionbot-pr -j REJECT",
        *(ipv6 if Path("/proc/net/if_inet6").exists() else []),
        "sudo -u precisionbot-runner -H --preserve-env=ACTIONS_RUNNER_HOOK_JOB_STARTED,ACTIONS_RUNNER_INPUT_JITCONFIG"
        " ./run.sh",
        f"run.sh [] hook={tmp_path}/hooks/job-started.sh jit={JIT}",
        "shutdown -h now",
    ]
    # The runner's folder is its user's alone: the PR user can neither read nor write the job's files.
    assert stat.S_IMODE(runner_dir.stat().st_mode) == 0o700
    # The one sudo rule: the runner user may start the root-owned pr.sh with the workflow's arguments, nothing
    # else; PR code may not use cron.
    rule = (tmp_path / "etc" / "sudoers.d" / "precisionbot").read_text()
    pr_sh = f"{tmp_path}/hooks/pr.sh"
    assert rule == (
        f"precisionbot-runner ALL=(root) NOPASSWD: {pr_sh} run -- *, {pr_sh} end, "
        f"{pr_sh} collect results {runner_dir}/_work/_temp/precision-results\n"
    )
    assert (tmp_path / "etc" / "cron.deny").read_text() == "precisionbot-pr\n"


def test_a_runner_user_with_sudo_rights_never_runs_the_job(tmp_path: Path) -> None:
    runner_dir = tmp_path / "actions-runner"
    runner_dir.mkdir()
    _extract(_runner_tarball(tmp_path), runner_dir)
    script = render_user_data(local_spec(tmp_path, runner_dir=str(runner_dir)), JIT)
    rules = "User precisionbot-runner may run the following commands:\n    (ALL) NOPASSWD: ALL\n"
    events = _run(tmp_path, script, sudo_rules=rules)
    assert not any(e.startswith("run.sh") for e in events)
    assert events[-1] == "shutdown -h now"


@pytest.mark.parametrize("user", ["ubuntu", "root", "ec2-user", "Bad User"])
def test_runner_users_with_sudo_or_bad_names_are_refused(user: str) -> None:
    with pytest.raises(ConfigError, match="runner user"):
        render_user_data(runner_spec(runner_user=user), JIT)


def test_downloads_the_pinned_runner_and_verifies_its_checksum(tmp_path: Path) -> None:
    tarball = _runner_tarball(tmp_path)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    runner_dir = tmp_path / "fresh"
    spec = local_spec(tmp_path, runner_dir=str(runner_dir), runner_version="2.400.1", runner_sha256=digest)
    events = _run(tmp_path, render_user_data(spec, JIT), tarball)
    assert events[1].startswith("curl https://github.com/actions/runner/releases/download/v2.400.1/")
    assert events[1].endswith("-2.400.1.tar.gz")
    assert events[-2:] == [f"run.sh [] hook={tmp_path}/hooks/job-started.sh jit={JIT}", "shutdown -h now"]


def test_a_bad_checksum_never_starts_the_runner_but_still_powers_off(tmp_path: Path) -> None:
    tarball = _runner_tarball(tmp_path)
    spec = local_spec(tmp_path, runner_dir=str(tmp_path / "fresh"), runner_sha256="0" * 64)
    events = _run(tmp_path, render_user_data(spec, JIT), tarball)
    assert not any(e.startswith("run.sh") for e in events)
    assert events[0].startswith("shutdown -h +") and events[-1] == "shutdown -h now"


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """The hook folder as the user-data leaves it on a booted instance (run with the system commands stubbed)."""
    runner_dir = tmp_path / "actions-runner"
    runner_dir.mkdir()
    _extract(_runner_tarball(tmp_path), runner_dir)
    events = _run(tmp_path, render_user_data(local_spec(tmp_path, runner_dir=str(runner_dir)), JIT))
    assert any(e.startswith("run.sh") for e in events)
    return tmp_path / "hooks"


def _hook(hooks: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(hooks / "job-started.sh")], env={"PATH": os.environ["PATH"], **env}, capture_output=True,
        text=True, timeout=30, check=False,
    )  # fmt: skip


GPU_JOB = {"GITHUB_WORKFLOW_REF": WORKFLOW_REF, "GITHUB_RUN_ID": "4242", "GITHUB_JOB": "gpu"}


@pytest.mark.parametrize(
    ("who", "env"),
    [
        # The label scrape: a returning contributor's fork workflow read the label and queued runs-on: <label>.
        (
            "a fork's workflow",
            {**GPU_JOB, "GITHUB_WORKFLOW_REF": "mallory/engine/.github/workflows/x.yml@refs/heads/x"},
        ),
        ("this workflow on another branch", {**GPU_JOB, "GITHUB_WORKFLOW_REF": WORKFLOW_REF.replace("main", "dev")}),
        ("another run of this workflow", {**GPU_JOB, "GITHUB_RUN_ID": "4243"}),
        ("another job of this run", {**GPU_JOB, "GITHUB_JOB": "report"}),
        ("a job that names nothing", {}),
    ],
)
def test_the_job_started_hook_fails_every_other_job(installed: Path, who: str, env: dict[str, str]) -> None:
    refused = _hook(installed, **env)
    assert refused.returncode == 1, who
    assert refused.stdout.startswith("::error::precisionbot: this runner serves only job gpu of run 4242")


def test_the_job_started_hook_lets_the_expected_job_run(installed: Path) -> None:
    assert _hook(installed, **GPU_JOB).returncode == 0


def _pr_sh(installed: Path, cwd: Path, *args: str, pgrep_rc: int = 1, **env: str) -> subprocess.CompletedProcess[str]:
    """Run pr.sh as sudo would (root, environment reset), with runuser/pgrep/chown/kill stubbed: runuser drops
    its ``-u USER --`` and runs the command (a kill only logged), pgrep answers ``pgrep_rc`` (1: no process of
    the PR user left)."""
    bin_dir = installed.parent / "pr-bin"
    bin_dir.mkdir(exist_ok=True)
    # Never a real kill: as root, `kill -KILL -1` ends every process on the machine. runuser only logs a kill,
    # and a `kill` program first on the PATH catches anything else that would exec one.
    _stub(
        bin_dir,
        "runuser",
        'echo "runuser $*" >> "$EVENTS"; shift 3; case "$1" in *kill*) exit 0 ;; esac; exec "$@"',
    )
    _stub(bin_dir, "kill", 'echo "kill $*" >> "$EVENTS"')
    _stub(bin_dir, "pgrep", f"exit {pgrep_rc}")
    _stub(bin_dir, "chown", "exit 0")
    _stub(bin_dir, "sleep", "exit 0")
    _stub(bin_dir, "getent", "echo precisionbot-pr:x:1001:1001::/home/precisionbot-pr:/bin/bash")
    # The instance metadata service as root sees it: absent unless the test serves a role ($IMDS_ROLE).
    _stub(
        bin_dir,
        "curl",
        '[ -n "${IMDS_ROLE:-}" ] || exit 7; case "$*" in *api/token*) echo tok ;; *placement/region*) echo us-east-1 ;;'
        ' *security-credentials/) echo "$IMDS_ROLE" ;; *security-credentials/*) printf "%s" "$IMDS_CREDS" ;;'
        " *) exit 22 ;; esac",
    )
    return subprocess.run(
        ["bash", str(installed / "pr.sh"), *args],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "EVENTS": str(installed.parent / "pr-events.log"), **env},
        cwd=cwd, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def _workspace(tmp_path: Path) -> Path:
    """The job's workspace where the runner puts it (RUNNER_DIR/_work/<repo>/<repo>): the only place pr.sh
    runs from."""
    workspace = tmp_path / "actions-runner" / "_work" / "engine" / "engine"
    workspace.mkdir(parents=True, exist_ok=True)
    return workspace


def test_pr_code_runs_with_none_of_the_runner_s_environment(installed: Path, tmp_path: Path) -> None:
    """The BASH_ENV and fake-`id` repros need the job's GITHUB_ENV / GITHUB_PATH files: PR code gets neither
    their paths nor (as PR_USER) any access to RUNNER_DIR, and starts from a clean environment."""
    workspace = _workspace(tmp_path)
    (workspace / "python").mkdir(parents=True)
    (workspace / "python" / "setup.py").write_text("print('pr code')\n")
    hostile = {
        "BASH_ENV": "/tmp/evil",
        "GITHUB_ENV": "/runner/_work/_temp/_runner_file_commands/set_env",
        "GITHUB_PATH": "/runner/_work/_temp/_runner_file_commands/add_path",
        "ACTIONS_RUNTIME_TOKEN": "secret",
    }
    result = _pr_sh(installed, workspace, "run", "--", "env", **hostile)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        "AWS_EC2_METADATA_DISABLED=true",  # boto3 would only knock on the closed metadata service
        "HOME=/home/precisionbot-pr",
        "LANG=C.UTF-8",
        "PATH=/usr/local/bin:/usr/bin:/bin",
    ]
    ws = tmp_path / "pr-root" / "ws"
    assert (ws / "python" / "setup.py").read_text() == "print('pr code')\n"  # its own copy of the workspace
    assert stat.S_IMODE(ws.stat().st_mode) == 0o700
    # Read as the runner user, written as the PR user, run as the PR user: root itself copies nothing.
    events = (tmp_path / "pr-events.log").read_text().splitlines()
    extract, create = sorted(events[:2])  # the two ends of one pipe: either may log first
    assert create == "runuser -u precisionbot-runner -- tar -cf - ."
    # Into a fresh folder beside WS, moved into place once the copy is complete.
    copy = rf"{re.escape(str(ws))}\.\w{{6}}"
    assert re.fullmatch(rf"runuser -u precisionbot-pr -- tar -xf - -C {copy} --no-same-owner", extract), extract
    assert sorted(path.name for path in ws.parent.iterdir()) == ["ws"]
    assert events[2:] == [
        "runuser -u precisionbot-pr -- env -i HOME=/home/precisionbot-pr PATH=/usr/local/bin:/usr/bin:/bin "
        "LANG=C.UTF-8 AWS_EC2_METADATA_DISABLED=true env"
    ]


def test_results_come_back_as_data_only_and_only_after_the_pr_processes_ended(installed: Path, tmp_path: Path) -> None:
    ws = tmp_path / "pr-root" / "ws"
    (ws / "results" / "0").mkdir(parents=True)
    (ws / "results" / "0" / "result.json").write_text("{}")
    (ws / "results" / "0" / "runner-credentials").symlink_to("/etc/hostname")  # would read as the runner user
    os.mkfifo(ws / "results" / "0" / "pipe")
    (tmp_path / "actions-runner" / "_work" / "_temp").mkdir(parents=True)
    dest = tmp_path / "actions-runner" / "_work" / "_temp" / "precision-results"
    assert _pr_sh(installed, tmp_path, "collect", "results", str(dest), pgrep_rc=0).returncode == 1  # still running
    assert not dest.exists()
    done = _pr_sh(installed, tmp_path, "collect", "results", str(dest))
    assert done.returncode == 0, done.stderr
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["0", "0/result.json"]
    for bad in ("../etc", "/etc", ""):
        assert _pr_sh(installed, tmp_path, "collect", bad, str(dest)).returncode == 2


def test_pr_sh_copies_only_from_a_job_workspace(installed: Path, tmp_path: Path) -> None:
    """``pr.sh run`` runs as root and copies its directory for the PR user: from /etc, the runner's _temp (the
    job's own files) or a link out of the work folder it refuses, before copying anything."""
    work = tmp_path / "actions-runner" / "_work"
    (work / "_temp").mkdir(parents=True)
    (work / "engine" / "engine" / "deeper").mkdir(parents=True)
    (work / "engine" / "out").symlink_to("/etc")
    # WORK/<repo>/<repo> exactly: not the folder above it, not one below it (nor _temp's own folders).
    (work / "_temp" / "x").mkdir()
    refused_dirs = [Path("/etc"), work / "_temp", work / "_temp" / "x", work, work / "engine"]
    for cwd in (*refused_dirs, work / "engine" / "out", work / "engine" / "engine" / "deeper", tmp_path):
        refused = _pr_sh(installed, cwd, "run", "--", "id")
        assert refused.returncode == 2 and "is not a job workspace" in refused.stderr, cwd
    assert not (tmp_path / "pr-root" / "ws").exists()
    assert _pr_sh(installed, _workspace(tmp_path), "run", "--", "true").returncode == 0


def test_a_failed_copy_leaves_no_half_workspace_for_the_next_run(installed: Path, tmp_path: Path) -> None:
    """``pr.sh run`` copies the workspace once: a copy that failed half-way (here: tar wrote every file, then
    failed) must not become the workspace that the next ``run`` takes as copied and runs in."""
    workspace = _workspace(tmp_path)
    (workspace / "setup.py").write_text("print('pr code')\n")
    bin_dir = installed.parent / "pr-bin"
    bin_dir.mkdir()
    real_tar = shutil.which("tar")
    assert real_tar is not None
    _stub(bin_dir, "tar", f'{real_tar} "$@" || exit; case "$1 ${{TAR_FAILS:-}}" in "-xf 1") exit 2 ;; esac')
    failed = _pr_sh(installed, workspace, "run", "--", "touch", "ran", TAR_FAILS="1")
    assert failed.returncode == 1 and "could not be copied" in failed.stderr, failed.stderr
    pr_root = tmp_path / "pr-root"
    assert not any(pr_root.iterdir())  # neither WS nor the partial copy is left
    (workspace / "later.txt").write_text("copied by the second run\n")
    assert _pr_sh(installed, workspace, "run", "--", "touch", "ran").returncode == 0
    assert sorted(path.name for path in (pr_root / "ws").iterdir()) == ["later.txt", "ran", "setup.py"]


def test_pr_sh_collects_only_into_a_new_folder_of_runner_temp(installed: Path, tmp_path: Path) -> None:
    """``pr.sh collect results /etc`` once made /etc the runner user's; any destination but a plain folder
    directly in RUNNER_TEMP is refused, and so are extra arguments."""
    (tmp_path / "pr-root" / "ws" / "results").mkdir(parents=True)
    temp = tmp_path / "actions-runner" / "_work" / "_temp"
    temp.mkdir(parents=True)
    (temp / "planted").symlink_to("/etc")
    for dest in ("/etc", f"{temp}/../../../etc", f"{temp}/planted", f"{temp}/planted/x", f"{temp}/a/b", f"{temp}/.x"):
        refused = _pr_sh(installed, tmp_path, "collect", "results", dest)
        assert refused.returncode == 2, dest
    assert _pr_sh(installed, tmp_path, "collect", "results", f"{temp}/out", "extra").returncode == 2
    assert _pr_sh(installed, tmp_path, "end", "now").returncode == 2
    assert _pr_sh(installed, tmp_path, "collect", "results", f"{temp}/out").returncode == 0


def test_pr_code_gets_the_instance_profile_s_credentials_from_root(installed: Path, tmp_path: Path) -> None:
    """The PR user cannot reach the metadata service, so root hands the PR code what it would have read there
    (the instance profile's read-only credentials) as a file in the root-owned PR root, never as argv."""
    # Pretty-printed, one key a line, as IMDS answers.
    creds = '{\n  "Code" : "Success",\n  "AccessKeyId" : "ASIAEXAMPLE",\n  "SecretAccessKey" : "s3cr/t+",\n'
    creds += '  "Token" : "tok=="\n}'
    result = _pr_sh(
        installed, _workspace(tmp_path), "run", "--", "env", IMDS_ROLE="precisionbot-runner", IMDS_CREDS=creds
    )
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in result.stdout.splitlines())
    path = tmp_path / "pr-root" / "aws-credentials"
    assert env["AWS_SHARED_CREDENTIALS_FILE"] == str(path) and env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert path.read_text().splitlines() == [
        "[default]",
        "aws_access_key_id = ASIAEXAMPLE",
        "aws_secret_access_key = s3cr/t+",
        "aws_session_token = tok==",
    ]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "s3cr/t+" not in (tmp_path / "pr-events.log").read_text()  # in no command line pr.sh starts


def test_end_kills_every_pr_process_and_fails_when_some_survive(installed: Path, tmp_path: Path) -> None:
    assert _pr_sh(installed, tmp_path, "end").returncode == 0
    assert "runuser -u precisionbot-pr -- kill -KILL -1" in (tmp_path / "pr-events.log").read_text()
    stubborn = _pr_sh(installed, tmp_path, "end", pgrep_rc=0)
    assert stubborn.returncode == 1 and "survived" in stubborn.stderr


def _setup_lines(script: str) -> str:
    """The user-data's own lines that give the runner's folder away: the commands the test replays."""
    lines = [line for line in script.splitlines() if line.endswith('"$RUNNER_DIR"') and line.startswith("ch")]
    assert len(lines) == 2 and lines[0] == 'chown -R "$RUNNER_USER" "$RUNNER_DIR"', lines
    return "\n".join(lines)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to act as two users"
)
def test_the_killdemo_fails_against_the_runner_folder_as_the_user_data_leaves_it() -> None:
    """The killdemo's three moves, made for real by another uid (the PR user) against a runner folder set up by
    the user-data's own chown/chmod lines: BASH_ENV into the job's env file, a fake `id` onto the job's path
    file, an edited upload-artifact. Each is refused; the PR user can still write its own workspace beside it
    (so the refusals come from the folder's mode, not from an unreachable path). No process is signalled."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="precisionbot-killdemo-", dir="/tmp"))
    try:
        base.chmod(0o755)
        runner_uid, pr_uid = 47_000 + os.getpid() % 1000 * 2, 47_001 + os.getpid() % 1000 * 2
        runner_dir = base / "actions-runner"
        commands = runner_dir / "_work" / "_temp" / "_runner_file_commands"
        action = runner_dir / "_work" / "_actions" / "actions" / "upload-artifact" / "v4" / "dist"
        for folder in (commands, action):
            folder.mkdir(parents=True)
        files = {
            "env": commands / "set_env_1",
            "path": commands / "add_path_1",
            "action": action / "index.js",
            "run": runner_dir / "run.sh",
        }
        for target in files.values():
            target.write_text("original\n")
            target.chmod(0o666)  # even world-writable files: the folder's mode alone must keep the PR user out
        workspace = base / "pr-ws"
        workspace.mkdir()
        os.chown(workspace, pr_uid, pr_uid)
        script = render_user_data(runner_spec(runner_dir=str(runner_dir)), JIT)
        env = {"PATH": os.environ["PATH"], "RUNNER_DIR": str(runner_dir), "RUNNER_USER": str(runner_uid)}
        subprocess.run(["bash", "-c", _setup_lines(script)], env=env, check=True, timeout=30)
        attack = (
            f'echo "BASH_ENV={workspace}/evil.sh" >> {files["env"]}; echo "1 $?" >> {workspace}/log\n'
            f'echo "{workspace}/fake-bin" >> {files["path"]}; echo "2 $?" >> {workspace}/log\n'
            f'echo "steal(process.env)" >> {files["action"]}; echo "3 $?" >> {workspace}/log\n'
            f'echo "sleep infinity" >> {files["run"]}; echo "4 $?" >> {workspace}/log\n'
            f'ls {runner_dir} >/dev/null 2>&1; echo "5 $?" >> {workspace}/log\n'
        )
        subprocess.run(
            ["setpriv", f"--reuid={pr_uid}", f"--regid={pr_uid}", "--clear-groups", "bash", "-c", attack],
            env={"PATH": os.environ["PATH"]}, capture_output=True, timeout=30, check=False,
        )  # fmt: skip
        results = dict(line.split() for line in (workspace / "log").read_text().splitlines())
        assert results == {"1": "1", "2": "1", "3": "1", "4": "1", "5": "2"}, results  # all refused
        assert all(target.read_text() == "original\n" for target in files.values())
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize(("reported", "passed"), [("g6e.xlarge", "g6e.xlarge"), ("p5.48xlarge;rm -rf /", None)])
def test_the_pr_steps_learn_the_instance_type(tmp_path: Path, reported: str, passed: str | None) -> None:
    """The check reads PRECISIONBOT_INSTANCE_TYPE for the comment's GPU minutes and price: the user data reads it
    from the instance metadata, and pr.sh passes it (a plain type only) with the rest of the clean environment."""
    from precisionbot.envvars import INSTANCE_TYPE

    runner_dir = tmp_path / "actions-runner"
    runner_dir.mkdir()
    _extract(_runner_tarball(tmp_path), runner_dir)
    spec = local_spec(tmp_path, runner_dir=str(runner_dir))
    _run(tmp_path, render_user_data(spec, JIT), instance_type=reported)
    result = _pr_sh(tmp_path / "hooks", _workspace(tmp_path), "run", "--", "env")
    assert result.returncode == 0, result.stderr
    found = [line for line in result.stdout.splitlines() if line.startswith(INSTANCE_TYPE)]
    assert found == ([f"{INSTANCE_TYPE}={passed}"] if passed else [])
