"""The hardware/software parts of a signature (GPU name, driver, CUDA, torch) and of the environment
fingerprint (those plus the GPU count, the installed packages, the engine's version and precisionbot's).

The engine's own ``/server_info`` wins where it reports them (the builtin engine does); otherwise they come
from this host, which is the GPU runner the engine runs on. Missing tools are not errors: the part is
``None`` and shows as ``(unknown)`` on a mismatch.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from precisionbot import __version__
from precisionbot.baselines.fingerprint import build_fingerprint, engine_arg_list, mig_profile, packages_digest

_INFO_KEYS = {
    "gpu": ("gpu_name", "device_name", "gpu"),
    "driver": ("driver_version", "driver"),
    "cuda": ("cuda_version", "cuda"),
    "torch": ("torch_version", "torch"),
}


def host_parts(server_info: Mapping[str, Any]) -> dict[str, str | None]:
    """``{"gpu", "driver", "cuda", "torch"}`` for the signature."""
    out: dict[str, str | None] = {}
    for part, keys in _INFO_KEYS.items():
        value = next((server_info[k] for k in keys if server_info.get(k) not in (None, "")), None)
        out[part] = None if value is None else str(value)
    if out["gpu"] is None or out["driver"] is None:
        gpu, driver = _nvidia_smi()
        out["gpu"] = out["gpu"] or gpu
        out["driver"] = out["driver"] or driver
    if out["torch"] is None:
        try:
            out["torch"] = metadata.version("torch")
        except metadata.PackageNotFoundError:
            out["torch"] = None
    if out["cuda"] is None and out["gpu"] is not None:
        out["cuda"] = _torch_cuda()
    return out


def _nvidia_smi() -> tuple[str | None, str | None]:
    """``("<count>x <model>", driver)`` for the signature (None, None without a GPU)."""
    model, count, driver = gpu_inventory()
    return (None if model is None else f"{count}x {model}"), driver


def _torch_cuda() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    version = getattr(torch.version, "cuda", None)
    return None if version is None else str(version)


@functools.cache
def gpu_inventory() -> tuple[str | None, int | None, str | None]:
    """``(model, count, driver)`` of this host's GPUs by ``nvidia-smi``; ``(None, None, None)`` without one.
    Asked once per process (a GPU host's nvidia-smi takes a noticeable fraction of a second)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None, None
    try:
        done = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None, None
    rows = [[c.strip() for c in r.split(",")] for r in done.stdout.strip().splitlines() if r.strip()]
    rows = [r for r in rows if len(r) >= 2]
    if not rows:
        return None, None, None
    return "+".join(sorted({r[0] for r in rows})), len(rows), rows[0][1]


@functools.cache
def gpu_mig() -> str | None:
    """The MIG slice this process's GPU is (``3g.71gb``), from ``nvidia-smi -L`` and ``CUDA_VISIBLE_DEVICES``;
    None on whole GPUs or without ``nvidia-smi``. Asked once per process, like :func:`gpu_inventory`."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return mig_profile(done.stdout, os.environ.get("CUDA_VISIBLE_DEVICES"))


@functools.cache
def installed_packages() -> tuple[str, ...]:
    """``name==version`` of every distribution in this Python environment (what ``pip freeze`` lists, read
    from the package metadata without starting pip). Read once per process (the environment does not change
    under a run), and from each METADATA file's header lines only: ``importlib.metadata``'s full parse of
    every file (descriptions included) took 0.1 s of every job, the header lines take 16 ms."""
    out = []
    for dist in metadata.distributions():
        name, version = _name_version(dist)
        if name:
            out.append(f"{name}=={version}")
    return tuple(out)


def _name_version(dist: metadata.Distribution) -> tuple[str | None, str | None]:
    """``Name`` and ``Version`` from the metadata's header block (it ends at the first blank line; a
    description below it may contain lines that look like headers). The full parse where the file is odd."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    if text:
        fields: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip():
                break
            key, sep, value = line.partition(":")
            if sep and key in ("Name", "Version") and key not in fields:
                fields[key] = value.strip()
            if len(fields) == 2:
                return fields["Name"], fields["Version"]
    meta = dist.metadata
    return (meta["Name"] if meta is not None else None), dist.version


def gather_fingerprint(server_info: Mapping[str, Any], engine_args: str | None) -> dict[str, Any]:
    """The environment fingerprint of a run on this host against an engine that reports ``server_info``.

    The engine's own report wins for what it knows (its version, torch, the GPU it runs on); this host fills
    in the rest. ``engine_args`` are the configured launch arguments, else the engine's reported ones."""
    parts = host_parts(server_info)
    model, count, driver = gpu_inventory()
    if engine_args is None:
        reported = server_info.get("server_args") or server_info.get("engine_args")
        args: list[str] | None = engine_arg_list(reported) if isinstance(reported, (str, list)) else None
    else:
        args = engine_arg_list(engine_args)
    return build_fingerprint(
        gpu_model=model or parts["gpu"],
        gpu_count=count,
        gpu_mig=gpu_mig(),
        driver=parts["driver"] or driver,
        cuda=parts["cuda"],
        torch=parts["torch"],
        engine_version=None if server_info.get("version") is None else str(server_info["version"]),
        engine_args=args,
        packages_sha256=packages_digest(installed_packages()),
        precisionbot=__version__,
    )
