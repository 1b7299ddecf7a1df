"""A real Slurm cluster for tests: Debian's ``munged``, ``slurmctld`` and ``slurmd``, started in a temp folder.

Two shapes:

* ``one_node``: one ``slurmd`` on 127.0.0.1, in this network namespace;
* ``two_nodes``: a bridge with the controller on 10.<n>.0.1 and two ``slurmd``, each in a network namespace of
  its own (its own address, loopback and ports) and a UTS namespace with its node name as host name: two hosts
  as far as Slurm, ``srun`` and the engine's sockets can tell.

Needs root (namespaces, munge's key, ``slurmd``) and the packages ``slurmctld slurmd slurm-client munge``.
GPUs are two character devices per node made with ``mknod`` (``/dev/null``'s numbers), so ``--gres=gpu:N`` is
scheduled for real without a GPU. Everything is stopped and removed on exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "srun")


def available() -> bool:
    return os.geteuid() == 0 and all(shutil.which(t) for t in (*TOOLS, "ip", "nsenter", "unshare", "mknod"))


@dataclass
class Cluster:
    root: Path
    conf: Path
    nodes: tuple[str, ...]
    addrs: tuple[str, ...]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **self.env}, timeout=60)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def logs(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.root.glob("log/*"))
        )


def _conf(root: Path, ctl_addr: str, nodes: list[tuple[str, str]], port_base: int) -> str:
    node_lines = "\n".join(
        f"NodeName={name} NodeAddr={addr} CPUs={os.cpu_count() or 2} RealMemory=1000 Gres=gpu:2 State=UNKNOWN"
        for name, addr in nodes
    )
    return f"""ClusterName=pbtest
SlurmctldHost=localhost({ctl_addr})
SlurmctldPort={port_base}
SlurmdPort={port_base + 1}
AuthType=auth/munge
AuthInfo=socket={root}/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
KillWait=5
GresTypes=gpu
{node_lines}
PartitionName=debug Nodes={",".join(n for n, _ in nodes)} Default=YES MaxTime=INFINITE State=UP
"""


@contextlib.contextmanager
def cluster(root: Path, *, two_nodes: bool, index: int = 0) -> Iterator[Cluster]:
    """A running cluster under ``root``; ``index`` keeps two clusters of one test run apart (ports, subnet)."""
    for sub in ("state", "log", "munge", "dev", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    tag = f"pb{os.getpid() % 10000}x{index}"
    subnet = 60 + (os.getpid() + index) % 150
    nodes = [(f"node{i}", f"10.{subnet}.0.{i + 1}") for i in (1, 2)] if two_nodes else [("node1", "127.0.0.1")]
    ctl_addr = f"10.{subnet}.0.1" if two_nodes else "127.0.0.1"
    port_base = 17000 + (os.getpid() % 500) * 4 + index * 2
    key = root / "munge" / "key"
    key.write_bytes(os.urandom(128))  # a key of this cluster's own: no other munged can sign for it
    key.chmod(0o600)
    for i in range(2):
        dev = root / "dev" / f"gpu{i}"
        if not dev.exists():
            subprocess.run(["mknod", str(dev), "c", "1", "3"], check=True)
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, ctl_addr, nodes, port_base))
    names = ",".join(n for n, _ in nodes)
    (root / "gres.conf").write_text(f"NodeName={names} Name=gpu File={root}/dev/gpu[0-1]\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    netns: list[str] = []
    daemons: list[subprocess.Popen[bytes]] = []
    bridge = f"{tag}br"
    try:
        # munged forks into the background itself (its pid file is how the cleanup below stops it); -f lets it
        # run as root, as it refuses to by default.
        subprocess.run(
            ["munged", "-f", f"--socket={root}/munge/sock", f"--key-file={key}", f"--log-file={root}/log/munged.log",
             f"--pid-file={root}/munge/pid", f"--seed-file={root}/munge/seed"],
            check=True,
        )  # fmt: skip
        _wait_for(lambda: (root / "munge" / "sock").exists(), "munged's socket", root)
        if two_nodes:
            _ip("link", "add", bridge, "type", "bridge")
            _ip("addr", "add", f"{ctl_addr}/24", "dev", bridge)
            _ip("link", "set", bridge, "up")
            for i, (_name, addr) in enumerate(nodes, start=1):
                ns = f"{tag}n{i}"
                _ip("netns", "add", ns)
                netns.append(ns)
                _ip("link", "add", f"{tag}v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("link", "set", f"{tag}v{i}", "master", bridge, "up")
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        daemons.append(_spawn(["slurmctld", "-D", "-c", "-i"], env))
        time.sleep(0.5)
        for i, (name, _addr) in enumerate(nodes, start=1):
            (root / "spool" / name).mkdir(exist_ok=True)
            argv = ["slurmd", "-D", "-N", name]
            if two_nodes:
                # nsenter, not `ip netns exec`: the latter remounts /sys, where slurmd reads the cgroup mount.
                argv = ["nsenter", f"--net=/run/netns/{tag}n{i}", "unshare", "--uts", "sh", "-c",
                        f"hostname {name} && exec slurmd -D -N {name}"]  # fmt: skip
            daemons.append(_spawn(argv, env))
        made = Cluster(root=root, conf=conf, nodes=tuple(n for n, _ in nodes), addrs=tuple(a for _, a in nodes))

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-o", "%T %D"], capture_output=True, text=True, env=env).stdout
            return out.strip() == f"idle {len(nodes)}"

        _wait_for(idle, f"{len(nodes)} idle node(s)", root)
        yield made
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(["scancel", "--user=root"], env=env, capture_output=True, timeout=20)
            _wait_for(lambda: not _processes_of(conf, stepd_only=True), "jobs to end after scancel", root, 20.0)
        for proc in reversed(daemons):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
        for proc in daemons:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
        pid = root / "munge" / "pid"
        if pid.exists():
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pid.read_text().strip()), 15)
        # What a job left behind when its slurmd went first (a step daemon, the job's own processes): every
        # process whose environment names this cluster's slurm.conf.
        for pid in _processes_of(conf):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        for ns in netns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if two_nodes:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)


def _processes_of(conf: Path, *, stepd_only: bool = False) -> list[int]:
    marker = f"SLURM_CONF={conf}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if stepd_only and not (entry / "comm").read_text().startswith("slurmstepd"):
                continue
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _wait_for(ready: object, what: str, root: Path, timeout_s: float = 60.0) -> None:
    assert callable(ready)
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            logs = "\n".join(
                f"== {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted(root.glob("log/*"))
            )
            raise AssertionError(f"no {what} within {timeout_s:g} s; logs:\n{logs}")
        time.sleep(0.2)


def _logs(root: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(root.glob("log/*")))
