"""``precisionbot report`` on real result directories (written with precisionbot.results.write_result)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from precisionbot.commands import report as report_command
from precisionbot.errors import ConfigError, DataError
from precisionbot.results.directory import write_result
from tests.report import markdown, scenarios


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    report_command.register(parser.add_subparsers())
    return parser.parse_args(["report", *argv])


def run(argv: list[str]) -> int:
    args = parse(argv)
    code: int = args.handler(args)
    return code


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("prefill_restore", "all_pass", "inconclusive"):
        (section,) = scenarios.SCENARIOS[name]()
        out[name] = tmp_path / name
        write_result(out[name], section.run, dict(section.records))
    return out


def test_markdown_to_stdout_with_strips_from_the_arrays(
    dirs: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_REPOSITORY", "o/r")
    monkeypatch.setenv("GITHUB_RUN_ID", "42")
    monkeypatch.delenv("GITHUB_SERVER_URL", raising=False)
    assert run([str(dirs["prefill_restore"])]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<!-- precisionbot:comment -->")
    assert "### ❌ Qwen/Qwen3-8B tp2: FAIL" in out
    assert "prefill\\_cache\\_hit  sample" in out or "prefill_cache_hit  sample" in out  # the heat strip
    assert "[workflow run](https://github.com/o/r/actions/runs/42)" in out


def test_matrix_json_and_verdict_exit(dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(dirs["all_pass"]), str(dirs["inconclusive"]), "--format", "json", "--verdict-exit"]
    argv += ["--label", "A", "--label", "B"]
    assert run(argv) == 2
    data = json.loads(capsys.readouterr().out)
    assert [s["label"] for s in data["sections"]] == ["A", "B"]
    assert data["verdict"] == "inconclusive"


def test_summary_to_a_file_with_a_previous_run(dirs: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    argv = [str(dirs["prefill_restore"]), "--previous", str(dirs["all_pass"]), "--format", "summary"]
    assert run([*argv, "--output", str(target)]) == 0
    text = target.read_text(encoding="utf-8")
    assert "vs previous" in text and "pass → fail" in text
    for group in markdown.raw_cell_counts(text):
        assert len(set(group)) == 1


def test_same_labels_get_the_directory_name(dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run([str(dirs["prefill_restore"]), str(dirs["all_pass"])])
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-8B tp2 (prefill\\_restore)" in out and "Qwen/Qwen3-8B tp2 (all\\_pass)" in out


def test_suite_marker(dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run([str(dirs["all_pass"]), "--suite", "nightly"])
    assert capsys.readouterr().out.startswith("<!-- precisionbot:comment suite=nightly -->")


def test_bad_input_is_a_clear_error(dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DataError, match="not found"):
        run([str(tmp_path / "nope")])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "result.json").write_text("{", encoding="utf-8")
    # A damaged directory is one damaged cell (INCONCLUSIVE with the reason), not an abort of the report.
    assert run([str(tmp_path / "bad"), "--verdict-exit"]) == 2
    assert "not a valid precisionbot result" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="--previous given 2 times"):
        run([str(dirs["all_pass"]), "--previous", str(dirs["all_pass"]), "--previous", str(dirs["all_pass"])])
    with pytest.raises(ConfigError, match="--max-chars"):
        run([str(dirs["all_pass"]), "--max-chars", "10"])


def test_damaged_arrays_make_a_damaged_cell_the_others_render(
    dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    (dirs["prefill_restore"] / "match.npz").write_bytes(b"not a zip")
    assert run([str(dirs["prefill_restore"]), str(dirs["all_pass"]), "--verdict-exit"]) == 2
    out = capsys.readouterr().out
    assert "match.npz is not a valid position-record archive" in out and "damaged result directory" in out
    assert "### ⚠️ prefill\\_restore: INCONCLUSIVE" in out and "### ✅" in out


def test_through_the_cli_root(dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from precisionbot.cli import main

    assert main(["report", str(dirs["all_pass"]), "--format", "summary"]) == 0
    assert capsys.readouterr().out.startswith("## ✅ precisionbot: PASS")
    assert main(["report", str(tmp_path / "missing")]) == 3
    err = capsys.readouterr().err
    assert err.startswith("precisionbot: error: ") and "Traceback" not in err and len(err.splitlines()) == 1
