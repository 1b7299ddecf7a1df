"""The instance's confinement of PR code, tried for real by two uids (the runner user's and the PR user's), as
the killdemo test does: the PR uid's attempts must fail where another uid's succeed.

Nothing here touches the machine's own /proc, firewall, sudo rules or accounts: each test works in a private
mount namespace (its own /proc, /etc/passwd and /etc/sudoers bound over the real ones) or a private network
namespace (its own loopback carrying the metadata service's addresses), all gone when the test ends. They need
root allowed to make namespaces (not root in an unprivileged container), util-linux's
``unshare``/``setpriv``/``runuser`` and, for the firewall and sudo tests, iptables, iproute2 and sudo; each
skips, naming what is missing, where those are absent."""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from precisionbot.runners.userdata import COLLECT_DIR, render_user_data
from tests.runners.test_userdata import JIT, _extract, _run, _runner_tarball, local_spec

ROOT_TOOLS = ("bash", "unshare", "setpriv", "mount")
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or any(shutil.which(tool) is None for tool in ROOT_TOOLS),
    reason=f"needs root and {', '.join(ROOT_TOOLS)} to act as two users in private namespaces",
)

RUNNER, PR = "precisionbot-runner", "precisionbot-pr"
REQUIRE_ENV = "PRECISIONBOT_REQUIRE_CONFINEMENT"
"""Set by scripts/test once it has installed every tool these tests use: a missing tool, or namespaces the
machine refuses, then fails these tests."""


@functools.cache
def _namespaces_refused() -> str | None:
    """Why this machine refuses private mount and network namespaces, or None when it allows them. Root alone is
    not enough: root in an unprivileged container lacks CAP_SYS_ADMIN. Tried once per test process."""
    try:
        done = subprocess.run(["unshare", "-m", "-n", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else done.stderr.strip() or f"exit status {done.returncode}"


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    """The probe, before any other fixture builds a test's files: skipped where namespaces are refused (an
    unprivileged container), failed instead where scripts/test requires these tests to run."""
    refused = _namespaces_refused()
    if refused is not None and os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but `unshare -m -n true` fails: {refused}")
    if refused is not None:
        pytest.skip(f"needs private mount and network namespaces (CAP_SYS_ADMIN); `unshare -m -n true`: {refused}")


def _needs(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing and os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {', '.join(missing)} missing: scripts/test installs them as root")
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder both uids can traverse (pytest's own tmp folders are root's alone), with the boot script's
    files written by the user-data itself (system commands stubbed, as in test_userdata)."""
    folder = Path(tempfile.mkdtemp(prefix="precisionbot-confine-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        runner_dir = folder / "actions-runner"
        runner_dir.mkdir()
        _extract(_runner_tarball(folder), runner_dir)
        _run(folder, render_user_data(local_spec(folder, runner_dir=str(runner_dir)), JIT))
        yield folder
    finally:
        shutil.rmtree(folder)


def _uids() -> tuple[int, int]:
    """Two uids no one else uses, different per test process (as the killdemo test picks them)."""
    first = 48_000 + os.getpid() % 1000 * 2
    return first, first + 1


def _as(uid: int, *argv: str) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]


def _results(text: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


def _accounts(base: Path, runner_uid: int, pr_uid: int) -> str:
    """/etc/passwd and /etc/group with the two accounts added, and the bash lines that bind them over the real
    ones inside a private mount namespace (runuser, pgrep and sudo then know the names)."""
    lines = []
    for name in ("passwd", "group"):
        text = Path(f"/etc/{name}").read_text()
        for user, uid in ((RUNNER, runner_uid), (PR, pr_uid)):
            text += f"{user}:x:{uid}:{uid}::/nonexistent:/bin/bash\n" if name == "passwd" else f"{user}:x:{uid}:\n"
        (base / name).write_text(text)
        lines.append(f"mount --bind {base / name} /etc/{name}")
    return "\n".join(lines)


def test_the_pr_user_can_read_neither_the_runner_s_jit_config_nor_its_processes(base: Path) -> None:
    """P3: the runner gets its JIT config in its environment (readable by its own uid only), not in argv
    (readable by every uid in /proc/PID/cmdline); with /proc mounted as the user-data remounts it the PR uid
    does not even see the runner's processes, while the runner uid still sees its own."""
    runner_uid, pr_uid = _uids()
    script = render_user_data(local_spec(base, runner_dir=str(base / "actions-runner")), JIT)
    (option,) = re.findall(r"^mount -o remount,(hidepid=\w+) /proc ", script, flags=re.MULTILINE)
    env = {"PATH": os.environ["PATH"], "ACTIONS_RUNNER_INPUT_JITCONFIG": JIT}  # as the user-data exports it
    runner = subprocess.Popen(_as(runner_uid, "sleep", "120"), env=env)
    try:
        pid = runner.pid
        # One line: whether /proc/PID/cmdline could be read, whether it held the JIT config, whether the
        # environment could be read.
        probe = (
            f'c=$(tr "\\0" " " < /proc/{pid}/cmdline 2>/dev/null); r=$?; '
            f'case "$c" in *{JIT}*) leak=yes ;; *) leak=no ;; esac; '
            f'cat /proc/{pid}/environ > /dev/null 2>&1; echo "cmdline=$r leak=$leak environ=$?"'
        )
        # Without hidepid: the command line is visible but holds no JIT config; the environment is refused.
        host = subprocess.run(_as(pr_uid, "bash", "-c", probe), capture_output=True, text=True, timeout=30)
        assert host.stdout.strip() == "cmdline=0 leak=no environ=1", host
        # With the user-data's hidepid, in a /proc of a private mount namespace (the machine's stays as it is).
        hidden = (
            f"mount -t proc -o {option} proc /proc || exit 9\n"
            f"{shlex.join(_as(pr_uid, 'bash', '-c', probe))} | sed 's/^/pr /'\n"
            f"{shlex.join(_as(runner_uid, 'bash', '-c', probe))} | sed 's/^/runner /'\n"
            f"{shlex.join(_as(pr_uid, 'bash', '-c', 'ls /proc | grep -c ^[0-9]'))} | sed 's/^/pr-sees /'\n"
        )
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "bash", "-c", hidden],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        seen = _results(done.stdout)
        assert seen["pr"] == "cmdline=1 leak=no environ=1"  # no such process, for the PR uid
        assert seen["runner"] == "cmdline=0 leak=no environ=0"  # its own process: still there for its own uid
        assert int(seen["pr-sees"]) <= 3  # only its own: the probe's bash, ls and grep
    finally:
        runner.kill()
        runner.wait()


_LISTEN = """
import socket, sys
servers = []
for family, address in ((socket.AF_INET, "169.254.169.254"), (socket.AF_INET6, "fd00:ec2::254")):
    try:
        server = socket.socket(family, socket.SOCK_STREAM)
        server.bind((address, 80))
        server.listen(8)
        servers.append(server)
        print(address, flush=True)
    except OSError:
        pass
print("ready", flush=True)
sys.stdin.read()
"""


def test_the_metadata_service_refuses_the_pr_user_but_not_another_uid(base: Path) -> None:
    """P3: the user-data's own iptables rules, applied in a private network namespace whose loopback carries
    the metadata service's addresses (no traffic leaves it): the PR uid's connection is refused, the runner
    uid's is accepted by the same listener."""
    _needs("iptables", "ip")
    runner_uid, pr_uid = _uids()
    script = render_user_data(local_spec(base, runner_dir=str(base / "actions-runner")), JIT)
    rules = [
        line.rstrip(" \\").replace('"$PR_USER"', str(pr_uid))
        for line in script.splitlines()
        if line.lstrip().startswith(("iptables -w -I OUTPUT", "ip6tables -w -I OUTPUT"))
    ]
    assert len(rules) == 2 and all("--uid-owner" in rule and "-j REJECT" in rule for rule in rules), rules
    ipv4, ipv6 = (rule.strip() for rule in rules)
    attempt = 'timeout 10 bash -c "exec 3<>/dev/tcp/$0/80" 2>/dev/null; echo "$0 $?"'
    driver = f"""
set -u
ip link set lo up
ip addr add 169.254.169.254/32 dev lo
ip -6 addr add fd00:ec2::254/128 dev lo nodad 2>/dev/null
{ipv4} || exit 9
{ipv6} 2>/dev/null || ip -6 addr del fd00:ec2::254/128 dev lo 2>/dev/null
coproc LISTEN {{ {shlex.join([sys.executable, "-c", _LISTEN])}; }}
served=""
while read -r -t 30 line <&"${{LISTEN[0]}}"; do [ "$line" = ready ] && break; served="$served $line"; done
for address in $served; do
  {shlex.join(_as(pr_uid, "bash", "-c", attempt))} "$address" | sed 's/^/pr /'
  {shlex.join(_as(runner_uid, "bash", "-c", attempt))} "$address" | sed 's/^/runner /'
done
kill "$LISTEN_PID"
"""
    done = subprocess.run(["unshare", "-n", "bash", "-c", driver], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    outcomes = [line.split() for line in done.stdout.splitlines()]
    by_who = {(who, address): rc for who, address, rc in outcomes}
    assert ("pr", "169.254.169.254") in by_who, done.stdout
    for (who, address), rc in by_who.items():
        # bash: 1 = connection refused (the REJECT); 0 = connected; 124 would be a timeout (a DROP).
        assert rc == ("1" if who == "pr" else "0"), (who, address, rc)


def test_the_sudo_rule_lets_the_runner_user_run_the_workflow_s_commands_only(base: Path) -> None:
    """P5: the rendered rule parses (visudo), and sudo itself, reading it in place of the machine's sudoers,
    allows the three commands the workflow runs and refuses pr.sh with other arguments."""
    _needs("sudo", "visudo")
    runner_uid, pr_uid = _uids()
    rule = base / "etc" / "sudoers.d" / "precisionbot"
    checked = subprocess.run(["visudo", "-c", "-f", str(rule)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    sudoers = base / "sudoers"
    sudoers.write_text("root ALL=(ALL:ALL) ALL\n" + rule.read_text())
    sudoers.chmod(0o440)
    pr_sh = base / "hooks" / "pr.sh"
    temp = base / "actions-runner" / "_work" / "_temp"
    commands = {
        "end": f"{pr_sh} end",
        "collect": f"{pr_sh} collect results {temp}/{COLLECT_DIR}",
        "run": f"{pr_sh} run -- bash -euo pipefail -c x precisionbot check",
        "collect-etc": f"{pr_sh} collect results /etc",
        "collect-up": f"{pr_sh} collect results {temp}/{COLLECT_DIR}/../../../../etc",
        "collect-other": f"{pr_sh} collect /etc {temp}/{COLLECT_DIR}",
        "run-no-dashes": f"{pr_sh} run bash",
        "end-args": f"{pr_sh} end now",
        "bare": f"{pr_sh}",
        "shell": "/bin/sh",
    }
    checks = "\n".join(f"sudo -n -l -U {RUNNER} {cmd} > /dev/null 2>&1; echo {key} $?" for key, cmd in commands.items())
    driver = f"{_accounts(base, runner_uid, pr_uid)}\nmount --bind {sudoers} /etc/sudoers\n{checks}\n"
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", driver],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    allowed = {key for key, rc in _results(done.stdout).items() if rc == "0"}
    assert allowed == {"end", "collect", "run"}, done.stdout


def test_pr_sh_as_root_serves_two_real_uids_and_refuses_every_other_folder(base: Path) -> None:
    """P5, for real: pr.sh (as root, as sudo starts it) refuses to run from /etc, copies a workspace with the
    runner uid's rights only (a root-only file in it is not handed over), runs the command as the PR uid, and
    collects into RUNNER_TEMP as the runner uid, refusing /etc and a link planted there."""
    _needs("runuser", "pgrep", "realpath", "tar")
    runner_uid, pr_uid = _uids()
    runner_dir = base / "actions-runner"
    workspace = runner_dir / "_work" / "engine" / "engine"
    temp = runner_dir / "_work" / "_temp"
    for folder in (workspace, temp):
        folder.mkdir(parents=True)
    (workspace / "setup.py").write_text("print('pr code')\n")
    secret = workspace / "root-only"
    secret.write_text("root secret\n")
    secret.chmod(0o600)  # stands in for a hard link to a root-only file
    for path in [runner_dir, *runner_dir.rglob("*")]:
        if path != secret:
            os.lchown(path, runner_uid, runner_uid)
    rootonly = base / "rootonly"
    rootonly.mkdir(mode=0o700)
    (temp / "planted").symlink_to(rootonly)
    ws = base / "pr-root" / "ws"
    pr_sh = base / "hooks" / "pr.sh"
    make_results = "mkdir -p results/0 && echo {} > results/0/result.json && id -u > results/0/uid"
    driver = f"""
{_accounts(base, runner_uid, pr_uid)}
cd /etc && bash {pr_sh} run -- id -u > /dev/null 2>&1; echo "run-etc $?"
cd {workspace}
bash {pr_sh} run -- true > /dev/null 2>&1; echo "run-unreadable $?"
[ -e {ws} ]; echo "half-copy-kept $?"
rm -f {secret}
bash {pr_sh} run -- bash -c {shlex.join([make_results])} > /dev/null 2>&1; echo "run $?"
bash {pr_sh} end > /dev/null 2>&1; echo "end $?"
cd /
bash {pr_sh} collect results /etc > /dev/null 2>&1; echo "collect-etc $?"
bash {pr_sh} collect results {temp}/planted > /dev/null 2>&1; echo "collect-planted $?"
bash {pr_sh} collect results {temp}/{COLLECT_DIR} > /dev/null 2>&1; echo "collect $?"
"""
    # Its own network namespace too: pr.sh's metadata lookups fail at once instead of leaving the machine.
    done = subprocess.run(
        ["unshare", "-m", "-n", "--propagation", "private", "bash", "-c", driver],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = _results(done.stdout)
    # tar, as the runner uid, cannot read the root-only file: that run fails and the file is not handed over.
    assert results.pop("run-unreadable") != "0", done.stdout
    assert results == {
        "run-etc": "2",  # not a job workspace: refused before anything is copied
        "half-copy-kept": "1",  # the next run copies afresh (the secret removed), and runs in that copy
        "run": "0",
        "end": "0",
        "collect-etc": "2",
        "collect-planted": "2",
        "collect": "0",
    }, done.stdout
    out = temp / COLLECT_DIR
    assert (out / "0" / "uid").read_text().strip() == str(pr_uid)  # the PR code ran as the PR uid
    assert (out / "0" / "result.json").stat().st_uid == runner_uid  # written by the runner uid, not root
    assert (ws / "setup.py").stat().st_uid == pr_uid and not (ws / "root-only").exists()
    assert sorted(path.name for path in ws.parent.iterdir()) == ["ws"]  # no partial copy left beside it
    assert not any(rootonly.iterdir())  # nothing written through the planted link
    assert Path("/etc").stat().st_uid == 0
