"""``precisionbot localize`` end to end against the builtin engine: every op-level fault is named by its module,
each of the five dumper settings set wrong is a refusal naming it (never an empty "no difference"), the disk
floor stops dumping, and the JSONL report is the comparator's shape."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from precisionbot.builtin.dumper_config import DumperConfig, RuntimeFlags
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.server import BuiltinServer
from precisionbot.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# (path, fault, extra flags, the module it must name)
FAULT_TABLE = [
    ("golden", "attn-p-fp8", [], "model.layers.0.self_attn"),
    ("golden", "attn-p-fp8-scaled", [], "model.layers.0.self_attn"),
    ("golden", "attn-p-bf16", [], "model.layers.0.self_attn"),
    ("golden", "state-mantissa=4", [], "model.layers.1.linear_attn"),
    ("golden", "mlp-bf16=0", [], "model.layers.0.mlp"),
    ("golden", "mlp-bf16=2", [], "model.layers.2.mlp"),
    ("golden", "mantissa=10", [], "model.layers.0"),
    ("decode", "state-bf16-decode", [], "model.layers.1.linear_attn"),
    (
        "decode",
        "swa-decode-window",
        ["--sliding-window-size", "16", "--max-new-tokens", "20"],
        "model.layers.2.self_attn",
    ),
    ("prefill-cache-hit", "restore-stale-page", ["--prompt-tokens", "160"], "model.layers.0.self_attn"),
    ("prefill-cache-hit", "restore-layer0-only", ["--prompt-tokens", "160"], "model.layers.1.linear_attn"),
    ("prefill-cache-hit", "mamba-stale-checkpoint", ["--prompt-tokens", "160"], "model.layers.1.linear_attn"),
    ("prefill-cache-hit", "conv-state-shift", ["--prompt-tokens", "160"], "model.layers.1.linear_attn"),
    ("prefill-cache-hit", "swa-early-evict", ["--prompt-tokens", "160"], "model.layers.2.self_attn"),
    (
        "decode-cache-hit",
        "cache-decode-kv-rounded",
        ["--prompt-tokens", "120", "--max-new-tokens", "24"],
        "model.layers.0.self_attn",
    ),
]


@pytest.mark.parametrize(("path", "fault", "extra", "module"), FAULT_TABLE, ids=[f[1] for f in FAULT_TABLE])
def test_every_op_level_fault_is_named_by_its_module(
    path: str, fault: str, extra: list[str], module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["localize", "--engine", "builtin", "--fault", fault, "--path", path, "--out", str(tmp_path), *extra]
    assert main(argv) == 1
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(f"first diverging op: {module} (")
    found = json.loads((tmp_path / "localization.json").read_text())["first_diverging_op"]
    assert found["module"] == module


def test_the_clean_engine_has_no_diverging_op_and_the_report_is_comparator_shaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["localize", "--engine", "builtin", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("first diverging op: none: all 103 aligned positions")
    records = [json.loads(line) for line in (tmp_path / "comparison.jsonl").read_text().splitlines()]
    tensors = [r for r in records if r["type"] == "comparison_tensor"]
    assert tensors and all(r["diff"]["passed"] and r["diff"]["rel_diff"] == 0.0 for r in tensors)
    assert records[-1] == {"type": "summary", "total": len(tensors), "passed": len(tensors), "failed": 0, "skipped": 0}
    assert records[-2]["type"] == "log" and records[-2]["infos"][0]["message"].startswith("first diverging op: none")


@contextmanager
def _engine(deterministic: bool = True, graphs_off: bool = True, **dumper: object) -> Iterator[str]:
    settings = {"server_port": "reuse", "non_intrusive_mode": "all", **dumper}
    runtime = RuntimeFlags(graphs_off, graphs_off, DumperConfig(**settings))  # type: ignore[arg-type]
    options = EngineOptions(preset="tiny", enable_deterministic_inference=deterministic)
    with BuiltinServer(options, flags=runtime) as server:
        yield server.url


@pytest.mark.parametrize(
    ("engine", "setting"),
    [
        ({"server_port": "-1"}, "DUMPER_SERVER_PORT=reuse"),
        ({"enable": True}, "DUMPER_ENABLE=0"),
        ({"non_intrusive_mode": "core"}, "DUMPER_NON_INTRUSIVE_MODE=all"),
        ({"graphs_off": False}, "--disable-cuda-graph"),
        ({"graphs_off": False}, "--disable-prefill-cuda-graph"),
        ({"deterministic": False}, "--enable-deterministic-inference"),
    ],
)
def test_each_setting_set_wrong_is_a_refusal_naming_it(
    engine: dict[str, object], setting: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _engine(**engine) as url:  # type: ignore[arg-type]
        assert main(["localize", "--engine-url", url, "--out", str(tmp_path / "o")]) == 3
    err = capsys.readouterr().err
    assert err.startswith("precisionbot: error: localize refuses: ") and setting in err
    assert "first diverging op" not in err


def test_disk_below_the_floor_stops_dumping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _engine() as url:
        argv = ["localize", "--engine-url", url, "--disk-floor-gib", "1e9", "--out", str(tmp_path)]
        assert main(argv) == 3
    assert "below the floor" in capsys.readouterr().err
    assert not list((tmp_path / "dumps").rglob("*.pt"))


def _config(tmp_path: Path, launch: str) -> Path:
    cfg = tmp_path / "precision.yml"
    cfg.write_text(f"engine:\n  launch: {launch}\n  health_timeout_s: 60\nmodels:\n  - name: toy\n    path: toy\n")
    return cfg


@pytest.mark.parametrize(
    ("launch", "setting"),
    [
        (
            "env DUMPER_NON_INTRUSIVE_MODE=core {py} -m precisionbot serve --port {{port}} {{args}}",
            "DUMPER_NON_INTRUSIVE_MODE=all",
        ),
        ("env DUMPER_ENABLE=1 {py} -m precisionbot serve --port {{port}} {{args}}", "DUMPER_ENABLE=0"),
        ("env DUMPER_SERVER_PORT=-1 {py} -m precisionbot serve --port {{port}} {{args}}", "DUMPER_SERVER_PORT=reuse"),
        ("{py} -m precisionbot serve --port {{port}}", "--disable-cuda-graph"),
        ("{py} -m precisionbot serve --port {{port}}", "--disable-prefill-cuda-graph"),
    ],
)
def test_a_launch_template_that_defeats_a_setting_is_refused_before_launch(
    launch: str, setting: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, launch.format(py=sys.executable))
    assert main(["localize", "--engine", "launch", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 3
    err = capsys.readouterr().err
    assert "refuses this launch template" in err and setting in err
    assert not (tmp_path / "o" / "engine.log").exists()


def test_launch_sets_the_dumper_environment_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    launch = f"{sys.executable} -m precisionbot serve --port {{port}} --enable-deterministic-inference {{args}}"
    cfg = _config(tmp_path, launch)
    argv = ["localize", "--engine", "launch", "--config", str(cfg), "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("first diverging op: none")


def test_check_localizes_a_failing_helper_and_the_comment_names_the_op(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "precision.yml"
    cfg.write_text("localize:\n  enabled: true\n")
    out = tmp_path / "run"
    argv = [
        "check", "--engine", "builtin", "--enable-deterministic-inference", "--fault", "state-bf16-decode",
        "--checks", "match", "--samples", "2", "--max-new-tokens", "16", "--prompt-tokens", "96",
        "--profile", "deterministic", "--config", str(cfg), "--out", str(out), "--quiet",
    ]  # fmt: skip
    assert main(argv) == 1
    (found,) = json.loads((out / "result.json").read_text())["localization"]
    assert found["check"] == "match" and found["first_diverging_op"]["module"] == "model.layers.1.linear_attn"
    # The failing sample itself was re-run, cut just past its onset, and decoded the same tokens as the check.
    assert found["path"] == "decode" and found["same_tokens_as_the_check"] is True
    assert found["focus_position"] >= 96 and found["tokens"] <= found["focus_position"] + 9
    capsys.readouterr()
    main(["report", str(out), "--format", "markdown"])  # its exit code re-judges with the default profile
    comment = capsys.readouterr().out
    points = comment[comment.index("**What it points to**") :]
    assert points.splitlines()[1].startswith(r"- first diverging op: model.layers.1.linear\_attn (recurrent mixer)")
    assert f"of match's sample {found['sample']}:" in points.splitlines()[1]
