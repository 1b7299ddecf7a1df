"""The hardware/software parts of a signature: GPU name, driver, CUDA, torch.

The engine's own ``/server_info`` wins where it reports them (the builtin engine does); otherwise they come
from this host, which is the GPU runner the engine runs on. Missing tools are not errors: the part is
``None`` and shows as ``(unknown)`` on a mismatch.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from importlib import metadata
from typing import Any

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
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    try:
        done = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    rows = [r.split(",") for r in done.stdout.strip().splitlines() if r.strip()]
    if not rows or len(rows[0]) < 2:
        return None, None
    names = sorted({r[0].strip() for r in rows})
    return f"{len(rows)}x " + "+".join(names), rows[0][1].strip()


def _torch_cuda() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    version = getattr(torch.version, "cuda", None)
    return None if version is None else str(version)
