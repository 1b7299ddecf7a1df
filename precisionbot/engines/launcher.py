"""Start an engine from the config's command template, wait until it generates, keep its log, stop it.

The template (``engine.launch``) has ``{model}``, ``{tp}``, ``{port}`` and ``{args}``, e.g.
``python -m sglang.launch_server --model-path {model} --tp {tp} --port {port} {args}``. The engine runs in
its own process group so that stopping it (SIGTERM, then SIGKILL after a grace period) also ends the worker
processes a tensor-parallel server spawns.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

from precisionbot.errors import EngineStartError

LOG_TAIL_LINES = 40


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def render_command(template: str, *, model: str, tp: int, port: int, args: str = "") -> list[str]:
    """The argv for a template; each placeholder's value is split like shell words (``{args}`` into several)."""
    try:
        text = template.format(model=shlex.quote(model), tp=tp, port=port, args=args)
    except (KeyError, IndexError, ValueError) as exc:
        raise EngineStartError(
            f"engine.launch template {template!r} is invalid ({exc}); use only {{model}} {{tp}} {{port}} {{args}}"
        ) from exc
    argv = shlex.split(text)
    if not argv:
        raise EngineStartError("engine.launch renders to an empty command; set engine.launch in the config")
    return argv


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
    ) -> None:
        self.port = port or free_port(host)
        self.argv = render_command(template, model=model, tp=tp, port=self.port, args=args)
        self.url = f"http://{host}:{self.port}"
        self.log_path = Path(log_path)
        self.health_timeout_s = health_timeout_s
        self.stop_grace_s = stop_grace_s
        self.env = None if env is None else {**os.environ, **env}
        self.cwd = None if cwd is None else Path(cwd)
        """Where the command runs: an engine commit's checkout when bisecting or running an A/B."""
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise EngineStartError(f"cannot run {self.argv[0]!r}: {exc.strerror or exc}; check engine.launch") from exc
        finally:
            log.close()
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self.url

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
        """SIGTERM the process group, SIGKILL it after the grace period; returns the exit code."""
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
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    def __enter__(self) -> Launcher:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
