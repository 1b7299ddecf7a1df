"""The composition root: every documented command is registered, and planning/commenting needs no torch."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from precisionbot import __version__
from precisionbot.cli import build_parser, main


def test_every_contract_command_is_registered() -> None:
    # Against the documented list, not the tuple the parser is built from: a command dropped from both still fails.
    documented = {
        "serve", "check", "localize", "baseline", "report", "demo", "github", "runner", "calibrate", "thresholds",
        "bisect", "buildkite",
        "config", "init", "doctor",
    }  # fmt: skip
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == documented  # type: ignore[arg-type]
    for name in documented:
        assert main([name, "--help"]) == 0


def test_cli_starts_without_importing_heavy_dependencies() -> None:
    # The plan/comment jobs run on small hosted runners without torch: parsing must not import it.
    code = (
        "import sys; from precisionbot.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'boto3', 'github') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_python_dash_m_and_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "precisionbot", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"precisionbot {__version__}"


def test_setup_errors_are_one_line_and_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "/nonexistent/result-dir"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("precisionbot: error: ") and "Traceback" not in err[0]


@pytest.mark.parametrize(
    "argv",
    [["check", "--samples", "x"], ["nosuch"], [], ["runner", "launch", "--bogus"], ["baseline"]],
)
def test_usage_errors_exit_3_not_argparse_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # argparse's own code 2 would read as INCONCLUSIVE in a workflow.
    assert main(argv) == 3
    assert "error:" in capsys.readouterr().err


def test_help_still_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--help"]) == 0
    assert "usage: precisionbot check" in capsys.readouterr().out


def test_an_unexpected_exception_is_one_line_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from precisionbot.commands import report

    def boom(args: object) -> int:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(report, "run", boom)
    assert main(["report", "somewhere"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "precisionbot: internal error: ZeroDivisionError: division by zero "
        "(a bug in precisionbot: rerun with --debug for the traceback and report it)"
    ]


@pytest.mark.parametrize("where", ["first", "last"])
def test_debug_is_accepted_before_or_after_the_subcommand(
    where: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `precisionbot report DIR --debug` is what one types after an error: it must not be a usage error.
    from precisionbot.commands import report

    def boom(args: object) -> int:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(report, "run", boom)
    argv = ["--debug", "report", "somewhere"] if where == "first" else ["report", "somewhere", "--debug"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err and "unrecognized" not in err


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                out.extend(_parsers(child))
    return out


def test_help_is_plain_text_without_rst_markup() -> None:
    # Docstrings are RST; `--help` is read in a terminal, where ``x`` is noise.
    parsers = _parsers(build_parser())
    assert len(parsers) > 9  # the nine commands and their subcommands
    for parser in parsers:
        assert "``" not in parser.format_help(), parser.prog


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: a for a in parser._actions for flag in a.option_strings}


def test_every_engine_url_flag_is_also_base_url() -> None:
    # SGLang's and vLLM's benchmark tools call the server's address --base-url.
    parsers = [p for p in _parsers(build_parser()) if "--engine-url" in _options(p)]
    assert {p.prog for p in parsers} >= {
        "precisionbot check", "precisionbot localize", "precisionbot baseline record", "precisionbot thresholds suggest"
    }  # fmt: skip
    for parser in parsers:
        options = _options(parser)
        assert options.get("--base-url") is options["--engine-url"], parser.prog


@pytest.mark.parametrize(
    "argv",
    [
        ["check"],
        ["baseline", "record", "--store", "unused-store"],
        ["thresholds", "suggest"],
        ["localize"],
    ],
)
def test_engine_sglang_is_one_line_not_the_usage(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--engine sglang` is the natural guess for a running server: say how to name one, in one line.
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--engine", "sglang"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "precisionbot: error: --engine takes builtin or launch (got 'sglang'); for a running SGLang server pass "
        "--engine-url URL --engine-kind sglang"
    ]


def test_check_takes_output_as_report_does() -> None:
    parsers = {p.prog: p for p in _parsers(build_parser())}
    check, report = _options(parsers["precisionbot check"]), _options(parsers["precisionbot report"])
    assert "--output" in report and check["--output"] is check["--out"]


@pytest.mark.parametrize("command", ["precisionbot check", "precisionbot baseline record"])
def test_size_flags_say_their_defaults(command: str) -> None:
    parser = next(p for p in _parsers(build_parser()) if p.prog == command)
    options = _options(parser)
    samples, tokens = str(options["--samples"].help), str(options["--max-new-tokens"].help)
    assert "default: the suite's; 32 for consistency" in samples and "9 for sglang-unified" in samples
    assert "default: the suite's; 512 in every built-in suite" in tokens
