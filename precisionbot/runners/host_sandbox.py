"""A ``ContainerRuntime`` made of bubblewrap: fresh mount, pid, net, ipc, uts and cgroup namespaces.

For hosts (and CI machines) where no container daemon runs. Each sandbox is a folder under ``root``:
``home/`` (the job's only writable place, mounted at ``/home/runner``), ``labels.json``, and the two files
bubblewrap writes itself: ``info.json`` (``--info-fd``: the pid of the sandbox's first process, as the host
sees it) and ``status.json`` (``--json-status-fd``: the exit code, written when the sandbox ends). The root
file system is a private tmpfs holding read-only binds of the image folder's top-level entries and of the
host's ``/usr`` (what an OCI image would hold): nothing of the host but those, and no network but loopback.

bubblewrap runs in a session of its own, so a sandbox outlives a killed agent as a container outlives a
killed ``docker`` client; the restarted agent finds it by its folder. ``stop`` signals the command, then
SIGKILLs the namespace's first process: when pid 1 of a pid namespace dies the kernel kills every other
process in it, so nothing survives ``stop``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from precisionbot.errors import CloudError
from precisionbot.runners.host_containers import ContainerSpec, ContainerState

SYSTEM_DIRS = ("/usr",)
_LINKS = (("usr/bin", "/bin"), ("usr/sbin", "/sbin"), ("usr/lib", "/lib"), ("usr/lib64", "/lib64"))


class BwrapRuntime:
    def __init__(self, root: Path, bwrap: str = "bwrap") -> None:
        found = shutil.which(bwrap)
        if found is None:
            raise CloudError(f"{bwrap} is not installed (apt-get install bubblewrap), or use --runtime docker")
        self.root, self.bwrap = root, found
        self._started: dict[str, subprocess.Popen[bytes]] = {}
        """The bubblewrap processes this runtime started, collected on ``remove``."""
        _become_subreaper()

    def _dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise CloudError(f"sandbox name {name!r} must be a plain folder name")
        return self.root / name

    def argv(self, spec: ContainerSpec, home: Path, info_fd: int = 3, status_fd: int = 4) -> list[str]:
        argv = [self.bwrap, "--unshare-all", "--new-session", "--info-fd", str(info_fd)]
        argv += ["--json-status-fd", str(status_fd)]
        image = Path(spec.image)
        for entry in sorted(image.iterdir()):
            argv += ["--ro-bind", str(entry), f"/{entry.name}"]
        for system in SYSTEM_DIRS:
            if not (image / system.lstrip("/")).exists():
                argv += ["--ro-bind", system, system]
        for target, link in _LINKS:
            if Path("/", target).exists() and not (image / link.lstrip("/")).exists():
                argv += ["--symlink", target, link]
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", str(home), "/home/runner"]
        for host, inside in spec.binds:
            argv += ["--ro-bind", host, inside]
        argv += ["--chdir", "/home/runner", "--hostname", spec.name[:60]]
        return [*argv, "--", *spec.command]

    def start(self, spec: ContainerSpec) -> None:
        folder = self._dir(spec.name)
        folder.mkdir(parents=True)
        home = folder / "home"
        home.mkdir()
        (folder / "labels.json").write_text(json.dumps(dict(spec.labels)))
        devices = ",".join(str(g) for g in spec.gpus) or "void"
        env = {"PATH": "/usr/bin:/bin", "HOME": "/home/runner", "NVIDIA_VISIBLE_DEVICES": devices, **spec.env}
        with (
            open(folder / "info.json", "wb") as info,
            open(folder / "status.json", "wb") as status,
            open(folder / "log", "wb") as log,
        ):
            process = subprocess.Popen(
                self.argv(spec, home, info.fileno(), status.fileno()),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(info.fileno(), status.fileno()),
            )
        self._started[spec.name] = process
        (folder / "bwrap.pid").write_text(str(process.pid))
        deadline = time.monotonic() + 10
        while self._pid(folder) is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise CloudError(f"bubblewrap did not start sandbox {spec.name}: {(folder / 'log').read_text()[:300]}")
            time.sleep(0.01)

    def _pid(self, folder: Path) -> int | None:
        return _read_pid(folder)

    def _exit_code(self, folder: Path) -> int | None:
        for line in (folder / "status.json").read_text().splitlines():
            if "exit-code" in line:
                return int(json.loads(line)["exit-code"])
        return None

    def inspect(self, name: str) -> ContainerState | None:
        folder = self._dir(name)
        if not folder.is_dir():
            return None
        labels = json.loads((folder / "labels.json").read_text())
        pid = self._pid(folder)
        alive = pid is not None and _alive(pid)
        code = None if alive else self._exit_code(folder)
        return ContainerState(name=name, running=alive, exit_code=code, labels=labels)

    def list(self) -> list[ContainerState]:
        if not self.root.is_dir():
            return []
        found = (self.inspect(p.name) for p in sorted(self.root.iterdir()) if (p / "labels.json").exists())
        return [s for s in found if s is not None]

    def stop(self, name: str, grace_s: float) -> None:
        folder = self._dir(name)
        pid = self._pid(folder) if folder.is_dir() else None
        if pid is None or not _alive(pid):
            return
        for child in _children(pid):
            _signal(child, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(pid):
            if time.monotonic() > deadline:
                raise CloudError(f"sandbox {name} (pid {pid}) survived SIGKILL")
            time.sleep(0.02)

    def remove(self, name: str) -> None:
        folder = self._dir(name)
        state = self.inspect(name)
        if state is not None and state.running:
            raise CloudError(f"sandbox {name} still runs: stop it before removing it")
        process = self._started.pop(name, None)
        if process is not None:
            process.wait(timeout=10)
        if folder.is_dir():
            _reap_bwrap(folder, name)
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            raise CloudError(f"cannot remove sandbox folder {folder}")


def _read_pid(folder: Path) -> int | None:
    """The sandbox's first process (bubblewrap's init: pid 1 in the new pid namespace), as the host sees it."""
    try:
        text = (folder / "info.json").read_text()
        return int(json.loads(text)["child-pid"]) if text.strip() else None
    except (OSError, ValueError, KeyError):
        return None


def _become_subreaper() -> None:
    """The sandbox's pid 1 can outlive the outer bubblewrap by a moment and is then reparented: to this
    process as a child subreaper (``PR_SET_CHILD_SUBREAPER``), which collects it, instead of to a host pid 1
    that may never reap zombies (a container's shell, say)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def _reap_bwrap(folder: Path, name: str) -> None:
    """Wait for the outer bubblewrap process (it reaps the sandbox's pid 1, then exits): ours to collect when
    this agent started it, init's when a killed agent left it."""
    pids: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        pids.append(int((folder / "bwrap.pid").read_text()))
    inner = _read_pid(folder)
    if inner is not None:
        pids.append(inner)
    deadline = time.monotonic() + 10
    for pid in pids:
        while Path(f"/proc/{pid}").exists():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if time.monotonic() > deadline:
                raise CloudError(f"process {pid} of sandbox {name} did not exit")
            time.sleep(0.01)


def _alive(pid: int) -> bool:
    """Running and not a zombie: a sandbox whose agent died is reaped by init, ours by nobody until wait."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
