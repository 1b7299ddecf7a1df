"""One diagnosis for every output: the PR comment, the job summary, ``report --format json`` and the HTML report
of one result directory list the same findings, in the same order, the localized op first.

Each output is produced by the real ``precisionbot report`` command from a directory written with
``write_result`` and read back the way a reader would: the Markdown through a CommonMark parser, the page
through an HTML parser, the JSON as JSON. (The JSON once dropped ``first_diverging_op``, which the comment showed.)
"""

from __future__ import annotations

import dataclasses
import html.parser
import json
from pathlib import Path

import pytest

from precisionbot.cli import main
from precisionbot.report.findings import findings
from precisionbot.results.directory import write_result
from tests.report import markdown, scenarios

LOCALIZATION = {
    "check": "prefill_cache_hit",
    "first_diverging_op": {
        "module": "model.layers.1.linear_attn",
        "kind": "recurrent mixer",
        "where": "position 1541",
        "rel_diff": 0.0412,
    },
    "aligned_positions": 103,
}
OP = "first diverging op: model.layers.1.linear_attn (recurrent mixer) at position 1541"


class _Findings(html.parser.HTMLParser):
    """The text of each ``<li>`` of the page's ``<ul class="diag">`` lists, entities decoded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.items: list[str] = []
        self._in_list = False
        self._item: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "ul" and ("class", "diag") in attrs:
            self._in_list = True
        elif tag == "li" and self._in_list:
            self._item = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "li" and self._item is not None:
            self.items.append("".join(self._item))
            self._item = None
        elif tag == "ul":
            self._in_list = False

    def handle_data(self, data: str) -> None:
        if self._item is not None:
            self._item.append(data)


def _page_findings(page: str) -> list[str]:
    parser = _Findings()
    parser.feed(page)
    return parser.items


@pytest.fixture
def localized(tmp_path: Path) -> tuple[Path, Path]:
    """A failing run whose failure was localized to an op, and a previous (clean) run of it."""
    (section,) = scenarios.prefill_restore()
    run = dataclasses.replace(section.run, extra={**section.run.extra, "localization": LOCALIZATION})
    current, previous = tmp_path / "run", tmp_path / "previous"
    write_result(current, run, dict(section.records))
    write_result(previous, scenarios.all_pass()[0].run)
    return current, previous


def _report(capsys: pytest.CaptureFixture[str], fmt: str, dirs: tuple[Path, Path], out: Path | None = None) -> str:
    current, previous = dirs
    argv = ["report", str(current), "--previous", str(previous), "--format", fmt]
    assert main([*argv, "--out", str(out)] if out else argv) == 0
    printed = capsys.readouterr().out
    return out.read_text(encoding="utf-8") if out else printed


def test_every_output_lists_the_same_findings_with_the_localized_op_first(
    localized: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")  # the HTML report's charts (the report extra)
    data = json.loads(_report(capsys, "json", localized))
    (section,) = data["sections"]
    from_json = [d["text"] for d in section["result"]["diagnosis"]]
    codes = [d["code"] for d in section["result"]["diagnosis"]]
    outputs = {
        "comment": markdown.list_after(_report(capsys, "markdown", localized), "What it points to"),
        "summary": markdown.list_after(_report(capsys, "summary", localized), "What it points to"),
        "html": _page_findings(_report(capsys, "html", localized, tmp_path / "report.html")),
        "json": from_json,
    }
    assert codes[0] == "first_diverging_op" and from_json[0].startswith(OP)
    assert section["result"]["diagnosis"][0]["check"] == "prefill_cache_hit"
    # More than the op: the helper that diverged and the move since the previous run are findings too.
    assert {"prefill_restore", "vs_previous"} <= set(codes)
    for name, found in outputs.items():
        assert found == from_json, f"{name} lists other findings than the JSON"


def test_the_localized_op_comes_in_front_of_the_other_findings() -> None:
    (section,) = scenarios.prefill_restore()
    run = dataclasses.replace(section.run, extra={"localization": LOCALIZATION})
    found = findings(dataclasses.replace(section, run=run))
    assert found[0].code == "first_diverging_op" and found[0].text.startswith(OP)
    assert found[1:] == findings(section)  # nothing else changes
