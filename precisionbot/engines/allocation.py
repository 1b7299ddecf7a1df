"""The nodes an engine launches on: one (this host), or every node of the Slurm allocation it runs in.

A multi-node engine (TP x PP over two nodes) starts one process per node, each told the node count, its rank
and where rank 0 listens for the others: SGLang's ``--nnodes``, ``--node-rank`` and ``--dist-init-addr``, which
the launch template reaches as ``{nnodes}``, ``{node_rank}`` and ``{dist_init_addr}``. Rank 0 runs here (the
batch host, first node of the allocation) and serves HTTP; the other ranks start through ``srun``, so Slurm
places them on their nodes and ends them with the job.

Rank 0's address is the first node's ``NodeAddr`` from ``scontrol show node``: the address Slurm itself uses to
reach that node, where a host name may not resolve on the other nodes.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from precisionbot.errors import EngineStartError

_NODE_ADDR = re.compile(r"\bNodeAddr=(\S+)")
_HOST_RE = re.compile(r"^[A-Za-z0-9._:-]+$")


@dataclass(frozen=True)
class Allocation:
    """The nodes of one Slurm job, first node first."""

    nodes: tuple[str, ...]
    first_addr: str
    """The first node's address, where rank 0 listens (``{dist_init_addr}``'s host)."""

    @property
    def nnodes(self) -> int:
        return len(self.nodes)


def parse_hostnames(text: str) -> tuple[str, ...]:
    """``scontrol show hostnames NODELIST``: one node name per line."""
    names = tuple(line.strip() for line in text.splitlines() if line.strip())
    bad = [n for n in names if not _HOST_RE.match(n)]
    if bad or not names:
        raise EngineStartError(f"scontrol show hostnames printed {text.strip()[:120]!r}, not node names")
    return names


def parse_node_addr(text: str, node: str) -> str:
    """The ``NodeAddr=`` of ``scontrol show node NODE``."""
    found = _NODE_ADDR.search(text)
    if found is None or not _HOST_RE.match(found.group(1)):
        raise EngineStartError(f"scontrol show node {node} gave no NodeAddr: is {node} a node of this cluster?")
    return found.group(1)


def slurm_allocation(env: Mapping[str, str]) -> Allocation | None:
    """The allocation this process runs in when it spans more than one node; None outside Slurm or on one node."""
    if not env.get("SLURM_JOB_ID"):
        return None
    count = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or "1"
    if not count.isdigit() or int(count) <= 1:
        return None
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise EngineStartError("SLURM_JOB_NUM_NODES is above 1 but SLURM_JOB_NODELIST is unset: run inside the job")
    nodes = parse_hostnames(_scontrol(["show", "hostnames", nodelist], dict(env)))
    addr = parse_node_addr(_scontrol(["show", "node", nodes[0]], dict(env)), nodes[0])
    return Allocation(nodes=nodes, first_addr=addr)


def _scontrol(args: list[str], env: dict[str, str]) -> str:
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, env=env, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineStartError(f"cannot run scontrol {' '.join(args)} to find the job's nodes: {exc}") from exc
    if done.returncode != 0:
        raise EngineStartError(f"scontrol {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[:200]}")
    return done.stdout


def rank_argv(rank: int, argv: list[str]) -> list[str]:
    """How rank ``rank`` (> 0) starts: one task on the allocation's node number ``rank``, the whole step ended
    when any task fails (a dead rank must not leave rank 0 waiting on it)."""
    return ["srun", "--nodes=1", "--ntasks=1", f"--relative={rank}", "--kill-on-bad-exit=1", *argv]
