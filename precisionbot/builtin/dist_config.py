"""Where a process sits in a multi-node builtin engine (``serve --nnodes --node-rank --dist-init-addr``).

Imports without torch: ``serve`` checks its flags before it loads torch. The ranks' protocol is in
tensor_parallel.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from precisionbot.errors import ConfigError


@dataclass(frozen=True)
class DistConfig:
    """Where this process sits in a multi-node engine (``serve --nnodes --node-rank --dist-init-addr``)."""

    nnodes: int
    node_rank: int
    host: str
    port: int
    timeout_s: float = 300.0

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"


def parse_dist_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) -> ``(host, port)``; anything else is a ``ConfigError``."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--dist-init-addr must be HOST:PORT with a port 1..65535, e.g. node001:29500 (got {text!r})")
    return host, int(port)
