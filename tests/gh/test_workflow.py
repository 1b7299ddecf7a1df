from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from precisionbot.gh.workflow import (
    SUMMARY_LIMIT_BYTES,
    command,
    escape,
    fit_summary,
    format_outputs,
    write_outputs,
)


def runner_unescape(value: str, *, property: bool = False) -> str:
    """The Actions runner's own unescaping (ActionCommand.Unescape), written independently."""
    pairs = [("%0D", "\r"), ("%0A", "\n")] + ([("%3A", ":"), ("%2C", ",")] if property else [])
    for code, char in pairs:
        value = value.replace(code, char)
    return value.replace("%25", "%")


def parse_outputs(text: str) -> dict[str, str]:
    """How the runner reads $GITHUB_OUTPUT: name<<DELIM ... DELIM, or name=value."""
    out: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines) and lines[i]:
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
        else:
            name, value = line.split("=", 1)
            out[name] = value
            i += 1
    return out


@pytest.mark.parametrize(
    ("raw", "data", "prop"),
    [
        ("plain", "plain", "plain"),
        ("50% done", "50%25 done", "50%25 done"),
        ("a\r\nb", "a%0D%0Ab", "a%0D%0Ab"),
        ("k: v, w", "k: v, w", "k%3A v%2C w"),
        ("%0A", "%250A", "%250A"),
        ("::error::x", "::error::x", "%3A%3Aerror%3A%3Ax"),
    ],
)
def test_escape_table(raw: str, data: str, prop: str) -> None:
    assert escape(raw) == data
    assert escape(raw, property=True) == prop


@given(st.text())
def test_escape_round_trips_and_stays_one_line(raw: str) -> None:
    for prop in (False, True):
        escaped = escape(raw, property=prop)
        assert "\n" not in escaped and "\r" not in escaped
        assert runner_unescape(escaped, property=prop) == raw


def test_command_escapes_message_and_properties() -> None:
    line = command("warning", "line1\nline2 100%", title="a:b,c")
    assert line == "::warning title=a%3Ab%2Cc::line1%0Aline2 100%25"


@given(st.dictionaries(st.from_regex(r"[a-z][a-z-]{0,10}", fullmatch=True), st.text(), max_size=5))
def test_outputs_round_trip_through_the_runner_parser(values: dict[str, str]) -> None:
    values = {k: v.replace("\r", "") for k, v in values.items()}  # the runner splits on \n
    assert parse_outputs(format_outputs(values)) == values


def test_heredoc_delimiter_is_random_per_value_and_cannot_be_injected() -> None:
    text = format_outputs({"a": "x", "b": "y"})
    delims = re.findall(r"^[ab]<<(\S+)$", text, flags=re.M)
    assert len(set(delims)) == 2 and all(len(d) > 30 for d in delims)
    # a value that tries to close the block and define another output
    evil = "x\nEOF\nrun<<EOF\ntrue\nEOF"
    assert parse_outputs(format_outputs({"reason": evil, "run": "false"})) == {"reason": evil, "run": "false"}
    with pytest.raises(ValueError):
        format_outputs({"reason": "contains DELIM"}, delimiter="DELIM")


def test_write_outputs_appends_to_github_output(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.write_text("earlier=1\n")
    matrix = json.dumps({"include": [{"a": 1}]}, indent=2)
    write_outputs({"run": "true", "matrix": matrix}, str(target))
    parsed = parse_outputs(target.read_text())
    assert parsed == {"earlier": "1", "run": "true", "matrix": matrix}


def test_summary_is_cut_below_one_mebibyte() -> None:
    small = "# ok\n"
    assert fit_summary(small) == small
    big = "é" * SUMMARY_LIMIT_BYTES
    cut = fit_summary(big)
    assert len(cut.encode("utf-8")) < SUMMARY_LIMIT_BYTES
    assert cut.endswith("artifact)*\n")
