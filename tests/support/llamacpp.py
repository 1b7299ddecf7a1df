"""A real llama.cpp ``llama-server`` for the ``llamacpp`` tests: built once, serving the tiny GGUF models.

``scripts/build-llama-server.sh`` builds the binary into ``.cache/llama.cpp-<version>/`` (scripts/test starts
it in the background before linting, so here it is usually done or nearly done; its lock makes us wait). The
tests skip, with the reason, only when the build cannot run on this machine (exit 3: no compiler or cmake);
any other build failure fails them. ``LLAMA_SERVER`` (a binary) and ``LLAMA_VOCAB`` (the vocab GGUF) point
at an existing build instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from precisionbot.engines.launcher import Launcher
from tests.support.tiny_gguf import write_tiny_llama

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.3.36"
CACHE = Path(os.environ.get("LLAMACPP_CACHE", ROOT / ".cache" / f"llama.cpp-{VERSION}"))
BUILD_TIMEOUT_S = 3600
# -fa off and an f32 KV cache: the quietest configuration (match mean_k3 ~1e-10), so a clean run passes
# the default thresholds with room; --no-repack: quantised models crash at warm-up on AMX CPUs without it
# (llama.cpp #20824); one thread per request batch keeps the shared CI cores usable.
QUIET_ARGS = "-fa off -ctk f32 -ctv f32 --no-repack"
LAUNCH = "{binary} -m {{model}} --host 127.0.0.1 --port {{port}} -c 4096 --parallel 4 -t 2 --no-webui {{args}}"


@dataclass(frozen=True)
class LlamaBuild:
    server: Path
    vocab: Path

    def launch_template(self) -> str:
        return LAUNCH.format(binary=self.server)

    def model(self, quantize: str | None = None) -> Path:
        """The tiny llama (f32, or ``quantize="q8_0"``), written once into the cache directory."""
        path = CACHE / f"tiny-llama-{quantize or 'f32'}.gguf"
        if not path.exists():
            write_tiny_llama(self.vocab, path, quantize=quantize)
        return path


def build() -> LlamaBuild:
    """The built server (building it now if needed), or a pytest skip/fail saying why not."""
    server, vocab = os.environ.get("LLAMA_SERVER"), os.environ.get("LLAMA_VOCAB")
    if server and vocab:
        return LlamaBuild(Path(server), Path(vocab))
    script = ROOT / "scripts" / "build-llama-server.sh"
    env = {**os.environ, "PYTHON": sys.executable, "LLAMACPP_CACHE": str(CACHE)}
    done = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env, check=False
    )
    if done.returncode == 3:
        why = (done.stderr.strip().splitlines() or ["exit 3"])[-1]
        pytest.skip(f"llama-server cannot be built here: {why}")
    if done.returncode != 0:
        pytest.fail(f"scripts/build-llama-server.sh failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return LlamaBuild(CACHE / "llama-server", CACHE / "ggml-vocab-llama-spm.gguf")


@contextmanager
def llama_server(build: LlamaBuild, model: Path, log_dir: Path, args: str = QUIET_ARGS) -> Iterator[str]:
    """A running llama-server on 127.0.0.1 (through precisionbot's own launcher); yields its URL."""
    log_dir.mkdir(parents=True, exist_ok=True)
    launcher = Launcher(
        build.launch_template(),
        model=str(model),
        args=args,
        log_path=log_dir / "llama-server.log",
        health_timeout_s=120,
        stop_grace_s=10,
    )
    with launcher:
        yield launcher.url
