"""Start an engine from the config's command template, wait until it generates, keep its log, stop it.

The template (``engine.launch``) has ``{model}``, ``{tp}``, ``{port}`` and ``{args}``, e.g.
``python -m sglang.launch_server --model-path {model} --tp {tp} --port {port} {args}``. The engine runs in
its own process group so that stopping it (SIGTERM, then SIGKILL after a grace period) also ends the worker
processes a tensor-parallel server spawns.

A multi-node engine's template also names ``{nnodes}``, ``{node_rank}`` and ``{dist_init_addr}``: inside a
Slurm allocation of several nodes (``engines.allocation``), rank 0 runs here and every other rank through
``srun`` on its own node; elsewhere they render as one node, rank 0, a free local port.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import string
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

from precisionbot.engines.allocation import Allocation, rank_argv
from precisionbot.errors import EngineStartError

LOG_TAIL_LINES = 40


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def render_command(
    template: str,
    *,
    model: str,
    tp: int,
    port: int,
    args: str = "",
    nnodes: int = 1,
    node_rank: int = 0,
    dist_init_addr: str = "127.0.0.1:0",
) -> list[str]:
    """The argv for a template; each placeholder's value is split like shell words (``{args}`` into several)."""
    try:
        text = template.format(
            model=shlex.quote(model),
            tp=tp,
            port=port,
            args=args,
            nnodes=nnodes,
            node_rank=node_rank,
            dist_init_addr=shlex.quote(dist_init_addr),
        )
    except (KeyError, IndexError, ValueError) as exc:
        raise EngineStartError(
            f"engine.launch template {template!r} is invalid ({exc}); use only {{model}} {{tp}} {{port}} {{args}} "
            "{nnodes} {node_rank} {dist_init_addr}"
        ) from exc
    argv = shlex.split(text)
    if not argv:
        raise EngineStartError("engine.launch renders to an empty command; set engine.launch in the config")
    return argv


def uses_ranks(template: str) -> bool:
    """Whether the template starts one process per node (it names ``{node_rank}``)."""
    with contextlib.suppress(ValueError):
        return any(field[1] == "node_rank" for field in string.Formatter().parse(template))
    return False


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


_PYTHON_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit): \S")
_ERROR_WORDS = re.compile(
    r"\berror\b|\bfailed\b|\binvalid\b|not a directory|no such file|\bcannot\b|unable to|out of memory", re.I
)
LOG_SCAN_BYTES = 256 * 1024


def log_error_line(path: Path) -> str | None:
    """The line of an engine's log that says why it stopped, or None: a Python engine's last exception line
    (``OSError: ... is not a valid model identifier``), else the first line that reads as an error
    (llama-server: ``gguf_init_from_file_impl: invalid magic characters ...``, ``error while handling argument
    "--slot-save-path": not a directory: /tmp/slots``). The first, because what follows is consequences
    (``failed to load model``, ``exiting due to model loading error``) or a usage text."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_SCAN_BYTES))
            lines = [line.strip() for line in f.read().decode("utf-8", errors="replace").splitlines()]
    except OSError:
        return None
    exceptions = [line for line in lines if _PYTHON_EXCEPTION.match(line)]
    found = exceptions[-1] if exceptions else next((line for line in lines if _ERROR_WORDS.search(line)), None)
    if found is None:
        return None
    return found if len(found) <= 300 else found[:297] + "..."


class Launcher:
    """A launched engine. Use as a context manager; ``url`` is valid once ``start()`` returned."""

    def __init__(
        self,
        template: str,
        *,
        model: str,
        tp: int = 1,
        args: str = "",
        log_path: str | Path,
        health_timeout_s: float = 1200.0,
        host: str = "127.0.0.1",
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        stop_grace_s: float = 30.0,
        cwd: str | Path | None = None,
        allocation: Allocation | None = None,
    ) -> None:
        self.port = port or free_port(host)
        self.allocation = allocation if uses_ranks(template) else None
        nnodes = self.allocation.nnodes if self.allocation else 1
        dist_host = self.allocation.first_addr if self.allocation else "127.0.0.1"
        dist = f"{dist_host}:{free_port('0.0.0.0' if self.allocation else '127.0.0.1')}"
        self.argv, *ranks = (
            render_command(
                template, model=model, tp=tp, port=self.port, args=args, nnodes=nnodes, node_rank=r, dist_init_addr=dist
            )
            for r in range(nnodes)
        )
        self.rank_argvs = [rank_argv(r, argv) for r, argv in enumerate(ranks, start=1)]
        """``srun`` commands of ranks 1.. (empty on one node)."""
        self.url = f"http://{host}:{self.port}"
        self.log_path = Path(log_path)
        self.health_timeout_s = health_timeout_s
        self.stop_grace_s = stop_grace_s
        self.env = None if env is None else {**os.environ, **env}
        self.cwd = None if cwd is None else Path(cwd)
        """Where the command runs: an engine commit's checkout when bisecting or running an A/B."""
        self.process: subprocess.Popen[bytes] | None = None
        self.ranks: list[subprocess.Popen[bytes]] = []

    def rank_log(self, rank: int) -> Path:
        return self.log_path.with_name(f"{self.log_path.stem}-rank{rank}{self.log_path.suffix}")

    def start(self) -> str:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.process = self._popen(self.argv, self.log_path)
            for rank, argv in enumerate(self.rank_argvs, start=1):
                self.ranks.append(self._popen(argv, self.rank_log(rank)))
        except BaseException:
            self.stop()
            raise
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _popen(self, argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        log = log_path.open("ab")
        try:
            return subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise EngineStartError(f"cannot run {argv[0]!r}: {exc.strerror or exc}; check engine.launch") from exc
        finally:
            log.close()

    def _dead_rank(self) -> str | None:
        for rank, proc in enumerate(self.ranks, start=1):
            code = proc.poll()
            if code is not None:
                return (
                    f"engine rank {rank} of {len(self.ranks) + 1} exited with code {code} before the engine was "
                    f"healthy ({shlex.join(self.rank_argvs[rank - 1])}); log tail ({self.rank_log(rank)}):\n"
                    f"{log_tail(self.rank_log(rank))}"
                )
        return None

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.health_timeout_s
        delay = 0.05
        with httpx.Client(timeout=10.0, trust_env=False) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise EngineStartError(
                        f"engine exited with code {code} before it was healthy ({shlex.join(self.argv)})"
                        f"{self._says()}; log tail ({self.log_path}):\n{log_tail(self.log_path)}"
                    )
                dead = self._dead_rank()
                if dead is not None:
                    raise EngineStartError(dead)
                try:
                    status = client.get(f"{self.url}/health_generate").status_code
                    # llama-server has no /health_generate; its /health answers 200 once the model is loaded.
                    if status == 404:
                        status = client.get(f"{self.url}/health").status_code
                    if status == 200:
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise EngineStartError(
                        f"engine not healthy (/health_generate) within {self.health_timeout_s:g} s{self._says()}; "
                        f"raise engine.health_timeout_s if it loads slowly; log tail ({self.log_path}):\n"
                        f"{log_tail(self.log_path)}"
                    )
                time.sleep(delay)
                delay = min(delay * 1.5, 2.0)

    def _says(self) -> str:
        line = log_error_line(self.log_path)
        return f"; its log says: {line}" if line else ""

    def stop(self) -> int | None:
        """SIGTERM the process group (and the other ranks' ``srun``), SIGKILL after the grace period; returns
        rank 0's exit code."""
        for rank in self.ranks:
            _stop(rank, signal.SIGTERM)
        code = self._stop_rank0()
        for rank in self.ranks:
            with contextlib.suppress(subprocess.TimeoutExpired):
                rank.wait(timeout=self.stop_grace_s)
            _stop(rank, signal.SIGKILL)
            rank.wait(timeout=30)
        return code

    def _stop_rank0(self) -> int | None:
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                proc.wait(timeout=30)
        else:
            self._signal(signal.SIGKILL)  # workers of an exited parent may linger in the group
        return proc.returncode

    def _signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        _stop(self.process, sig)

    def __enter__(self) -> Launcher:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _stop(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
