"""The builtin engine on CUDA (marked ``gpu``; skipped without a GPU): the same invariance and fault catalogue
must hold there, since users run it on the GPU runners to sanity-check the pipeline."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from precisionbot.cli import main
from precisionbot.results.directory import read_result
from tests.support.engine_server import running_engine

pytestmark = pytest.mark.gpu

SMALL = ["--samples", "4", "--max-new-tokens", "16", "--prompt-tokens", "96..160", "--quiet"]


def test_runs_on_cuda_and_the_clean_engine_is_bit_exact(tmp_path: Path) -> None:
    with running_engine() as url:
        assert httpx.get(f"{url}/server_info", timeout=10).json()["device"] == "cuda"
    assert main(["check", "--engine", "builtin", *SMALL, "--out", str(tmp_path / "clean")]) == 0
    run = read_result(tmp_path / "clean")
    assert [c.stats["mean_k3"] for c in run.checks] == [0.0, 0.0, 0.0]  # decode, prefill and cache hit agree


def test_restore_fault_is_caught_on_cuda(tmp_path: Path) -> None:
    args = ["check", "--engine", "builtin", "--fault", "restore-layer0-only", *SMALL, "--out", str(tmp_path / "bad")]
    assert main(args) == 1
