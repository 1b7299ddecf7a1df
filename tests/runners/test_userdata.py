"""The boot script: rendered content, and its behaviour when run by bash with the system commands stubbed."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from precisionbot.errors import ConfigError
from precisionbot.runners.userdata import render_user_data
from tests.runners.conftest import runner_spec

JIT = "eyJydW5uZXJfaWQiOjEwMDF9"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(
    tmp_path: Path, script: str, tarball: Path | None = None, sudo_rules: str = "", instance_type: str = "g6e.xlarge"
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
        'echo "sudo $1 $2" >> "$EVENTS"; shift 3; exec "$@"',
    )
    for name in ("gpasswd", "usermod", "getent"):
        _stub(bin_dir, name, "exit 0")
    _stub(bin_dir, "tee", "cat > /dev/null")
    _stub(bin_dir, "id", "exit 0")
    _stub(bin_dir, "chown", "exit 0")
    _stub(bin_dir, "useradd", 'echo "useradd $*" >> "$EVENTS"')
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
            ("run.sh", '#!/bin/bash\necho "run.sh $*" >> "$EVENTS"\n'),
            ("bin/installdependencies.sh", "#!/bin/bash\nexit 0\n"),
        ):
            data = body.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return out


def test_rendered_script_has_the_watchdog_first_and_no_credentials() -> None:
    script = render_user_data(runner_spec(ttl_minutes=45), JIT)
    assert script.startswith("#!/bin/bash\n")
    lines = [line for line in script.splitlines() if line and not line.startswith("#")]
    commands = [line for line in lines if not line.startswith(("set ", "exec "))]
    assert commands[0].startswith("shutdown -h +45 ")
    assert f"./run.sh --jitconfig {JIT}" in script
    assert "runner_sha256" not in script and "sha256sum" not in script  # no checksum line when none given
    for secret in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "ghp_"):
        assert secret not in script


def test_values_are_shell_quoted() -> None:
    script = render_user_data(runner_spec(runner_dir="/opt/my runner;rm -rf /"), JIT)
    assert "RUNNER_DIR='/opt/my runner;rm -rf /'" in script


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
    script = render_user_data(runner_spec(ttl_minutes=30, runner_dir=str(runner_dir)), JIT)
    events = _run(tmp_path, script)
    assert events[0].startswith("shutdown -h +30 ")
    assert events[1:] == [
        "sudo -l precisionbot-runner",
        "sudo -u precisionbot-runner",
        f"run.sh --jitconfig {JIT}",
        "shutdown -h now",
    ]


def test_a_runner_user_with_sudo_rights_never_runs_the_job(tmp_path: Path) -> None:
    runner_dir = tmp_path / "actions-runner"
    runner_dir.mkdir()
    _extract(_runner_tarball(tmp_path), runner_dir)
    script = render_user_data(runner_spec(runner_dir=str(runner_dir)), JIT)
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
    spec = runner_spec(runner_dir=str(runner_dir), runner_version="2.400.1", runner_sha256=digest)
    events = _run(tmp_path, render_user_data(spec, JIT), tarball)
    assert events[1].startswith("curl https://github.com/actions/runner/releases/download/v2.400.1/")
    assert events[1].endswith("-2.400.1.tar.gz")
    assert events[-2:] == [f"run.sh --jitconfig {JIT}", "shutdown -h now"]


def test_a_bad_checksum_never_starts_the_runner_but_still_powers_off(tmp_path: Path) -> None:
    tarball = _runner_tarball(tmp_path)
    spec = runner_spec(runner_dir=str(tmp_path / "fresh"), runner_sha256="0" * 64)
    events = _run(tmp_path, render_user_data(spec, JIT), tarball)
    assert not any(e.startswith("run.sh") for e in events)
    assert events[0].startswith("shutdown -h +") and events[-1] == "shutdown -h now"


@pytest.mark.parametrize(("reported", "written"), [("g6e.xlarge", "g6e.xlarge"), ("p5.48xlarge;rm -rf /", None)])
def test_the_runner_tells_jobs_its_instance_type(tmp_path: Path, reported: str, written: str | None) -> None:
    """The check step reads PRECISIONBOT_INSTANCE_TYPE (the comment's GPU minutes and price) from the runner's
    .env file, which the user data writes from the instance metadata; anything but a plain type is dropped."""
    from precisionbot.commands.check import INSTANCE_TYPE_ENV

    runner_dir = tmp_path / "actions-runner"
    runner_dir.mkdir()
    _extract(_runner_tarball(tmp_path), runner_dir)
    _run(tmp_path, render_user_data(runner_spec(runner_dir=str(runner_dir)), JIT), instance_type=reported)
    env_file = runner_dir / ".env"
    lines = env_file.read_text().splitlines() if env_file.exists() else []
    assert lines == ([f"{INSTANCE_TYPE_ENV}={written}"] if written else [])
