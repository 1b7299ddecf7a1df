"""The launcher: a real subprocess from a command template, health polling with a deadline, log tail, stop."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from precisionbot.engines.launcher import Launcher, render_command
from precisionbot.engines.sglang import SGLangEngine
from precisionbot.errors import EngineStartError

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = f"{sys.executable} -m tests.support.fake_sglang --port {{port}} {{args}}"


def test_render_command_splits_args_and_quotes_model() -> None:
    argv = render_command(
        "serve --model-path {model} --tp {tp} --port {port} {args}", model="a b", tp=2, port=9, args="--x 1 --y"
    )
    assert argv == ["serve", "--model-path", "a b", "--tp", "2", "--port", "9", "--x", "1", "--y"]
    with pytest.raises(EngineStartError, match="invalid"):
        render_command("serve {gpus}", model="m", tp=1, port=1)


def test_launch_wait_healthy_and_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    with Launcher(TEMPLATE, model="m", log_path=tmp_path / "engine.log", health_timeout_s=30) as launched:
        engine = SGLangEngine(launched.url)
        assert engine.health()
        engine.close()
        proc = launched.process
        assert proc is not None and proc.poll() is None
    assert proc.poll() is not None  # stopped on exit
    assert "fake engine starting" in (tmp_path / "engine.log").read_text()


def test_engine_that_exits_reports_code_and_log_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    launcher = Launcher(TEMPLATE, model="m", args="--die", log_path=tmp_path / "engine.log", health_timeout_s=30)
    with pytest.raises(EngineStartError) as info:
        launcher.start()
    message = str(info.value)
    assert "engine exited with code 7 before it was healthy" in message
    assert "RuntimeError: CUDA out of memory" in message


def test_engine_never_healthy_times_out_and_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    launcher = Launcher(
        TEMPLATE,
        model="m",
        args="--never-healthy",
        log_path=tmp_path / "e.log",
        health_timeout_s=0.5,
        stop_grace_s=2,
    )
    t0 = time.monotonic()
    with pytest.raises(EngineStartError, match=r"not healthy \(/health_generate\) within 0.5 s"):
        launcher.start()
    assert time.monotonic() - t0 < 60  # the fake sleeps an hour: a bound far from both, never a speed limit
    assert launcher.process is not None and launcher.process.poll() is not None


def test_missing_program_is_a_start_error(tmp_path: Path) -> None:
    launcher = Launcher("/nonexistent/engine --port {port}", model="m", log_path=tmp_path / "e.log")
    with pytest.raises(EngineStartError, match="cannot run '/nonexistent/engine'"):
        launcher.start()
