"""The HTML report without a browser: structure, escaping, determinism, size, the CLI, the optional extra."""

from __future__ import annotations

import html.parser
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from precisionbot.cli import main
from precisionbot.errors import ConfigError
from precisionbot.report import ReportLinks, render_comment
from precisionbot.report.chart_svg import inline_svg
from precisionbot.report.escape import ZWJ, cap, markdown_plain, markdown_text, visible
from precisionbot.report.html import CSP, render_html
from precisionbot.results.directory import write_result
from tests.report import html_scenarios, scenarios


class Elements(html.parser.HTMLParser):
    """Every start tag with its attributes, and the text, as the browser's parser would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Elements:
    p = Elements()
    p.feed(page)
    return p


@pytest.fixture(scope="module")
def charts_page() -> str:
    return render_html(html_scenarios.charts())


@given(st.text())
def test_markdown_plain_undoes_markdown_text(text: str) -> None:
    for spaces in (True, False):
        assert markdown_plain(markdown_text(text, spaces=spaces)).replace(ZWJ, "") == visible(text, spaces=spaces)


def test_every_chart_is_inline_svg_with_marks(charts_page: str) -> None:
    page = charts_page
    p = parse(page)
    figures = [a for t, a in p.tags if t == "figure"]
    assert len(figures) == 7  # three checks' lines, scatter, buckets, depth, CDF
    assert page.count("<svg") == len(figures)
    assert page.count("<path") > 200
    assert "<?xml" not in page and "<!DOCTYPE svg" not in page
    ids = [a["id"] for t, a in p.tags if a.get("id")]
    assert len(ids) == len(set(ids)), "element ids collide between charts"


def test_page_has_no_script_and_a_strict_policy(charts_page: str) -> None:
    p = parse(charts_page)
    tags = {t for t, _ in p.tags}
    assert not tags & {"script", "iframe", "object", "embed", "link", "img", "foreignobject"}
    csp = [a["content"] for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == [CSP] and "default-src 'none'" in CSP and "script-src" not in CSP
    for _, attrs in p.tags:
        assert not any(name.startswith("on") for name in attrs), attrs
        for name in ("href", "xlink:href", "src"):
            assert (attrs.get(name) or "#").startswith("#"), attrs


def test_hostile_text_is_text() -> None:
    base = "http://127.0.0.1:9"
    page = render_html(html_scenarios.hostile(base))
    p = parse(page)
    tags = [t for t, _ in p.tags]
    assert not set(tags) & {"script", "img", "iframe", "link", "a", "image", "object", "embed", "foreignobject"}
    assert tags.count("style") == 1 + tags.count("svg")  # the page's own and matplotlib's, one per chart
    assert not any(a.get("http-equiv") == "refresh" for t, a in p.tags if t == "meta")
    for _, attrs in p.tags:
        assert not any(base in (v or "") for v in attrs.values()), attrs
        assert not any(name.startswith("on") for name in attrs), attrs
    text = "".join(p.text).replace(ZWJ, "")
    for hostile in html_scenarios.hostile_texts(base):
        assert cap(visible(hostile)) in text  # the token cell: shown, literally
        assert visible(hostile) in text  # its neighbours' context: in full
    assert "window.__pwned=1;fetch(" in text
    depth_chart = page[page.index('id="s0-depth"') :].split("</figure>")[0]
    assert "$\\frac{1}{0}$" in depth_chart  # a depth label drawn as it is, not as math text


def test_the_comment_view_and_the_page_say_the_same() -> None:
    sections = scenarios.prefill_restore()
    page = "".join(parse(render_html(sections)).text)
    for sentence in (
        "prefill_cache_hit diverged while match passes",
        "prefill_cache_hit at sample 0, position 1541",
        "mean k3 0.081 ≥ kl_div 0.0025",
    ):
        assert sentence in page
    for cell in ("×250,000 ↑ (baseline 2.5e-06)", "32/32 cache hits", "2 (0 confident)"):
        assert cell in page


def test_render_is_deterministic(charts_page: str) -> None:
    assert render_html(html_scenarios.charts()) == charts_page


def test_a_large_golden_run_stays_small() -> None:
    (section,) = html_scenarios.charts()
    big = html_scenarios.golden_record(n_samples=4, n_pos=8000)  # 32,000 positions: thinned to 3,000
    page = render_html([type(section)(section.label, section.run, records={**section.records, "golden": big})])
    assert len(page.encode()) < 2_000_000


def test_full_report_link_in_the_comment_not_in_the_page() -> None:
    links = ReportLinks(run_url="https://github.com/o/r/actions/runs/1", report_url="https://example.test/a/1")
    comment = render_comment(scenarios.all_pass(), links=links)
    assert "[full report (HTML, with charts)](https://example.test/a/1)" in comment
    page = render_html(scenarios.all_pass(), links=links)
    assert "https://example.test/a/1" not in page and 'href="https://github.com/o/r/actions/runs/1"' in page


def test_inline_svg_refuses_active_content() -> None:
    assert inline_svg('<?xml version="1.0"?>\n<svg><path d="M0 0"/></svg>') == '<svg><path d="M0 0"/></svg>'
    for bad in (
        "<svg><script>x</script></svg>",
        '<svg onload="x"></svg>',
        '<svg><a href="https://x">y</a></svg>',
        '<svg><use xlink:href="https://x/#a"/></svg>',
        '<svg><rect style="fill: url(https://x)"/></svg>',
    ):
        with pytest.raises(ValueError, match="active content"):
            inline_svg(bad)


def test_report_command_writes_html(tmp_path: Path) -> None:
    (section,) = html_scenarios.charts()
    write_result(tmp_path / "run", section.run, section.records)
    out = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "run"), "--format", "html", "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.count("<figure") == 7


def test_without_matplotlib_html_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (section,) = scenarios.prefill_restore()
    write_result(tmp_path / "run", section.run, section.records)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'precisionbot\[report\]'"):
        render_html([section])
    assert main(["report", str(tmp_path / "run"), "--format", "html", "-o", str(tmp_path / "x.html")]) == 3
    assert "precisionbot[report]" in capsys.readouterr().err
    # The Markdown comment needs no matplotlib.
    assert main(["report", str(tmp_path / "run"), "-o", str(tmp_path / "c.md")]) == 0


def test_comment_path_never_imports_matplotlib(tmp_path: Path) -> None:
    (section,) = scenarios.prefill_restore()
    write_result(tmp_path / "run", section.run, section.records)
    run, md = str(tmp_path / "run"), str(tmp_path / "c.md")
    code = (
        "import sys\n"
        "from precisionbot.cli import main\n"
        f"assert main(['report', {run!r}, '-o', {md!r}]) == 0\n"
        f"assert main(['report', {run!r}, '--format', 'summary', '-o', {md!r}]) == 0\n"
        "assert 'matplotlib' not in sys.modules, 'the Markdown report imported matplotlib'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_context_round_trips_and_is_capped() -> None:
    from precisionbot.results import CONTEXT_MAX_CHARS, WorstPosition

    w = WorstPosition(0, 1, 2, "t", -1.0, -2.0, 1.0, 0.7, context_before="ab", context_after="cd")
    assert WorstPosition.from_dict(w.to_dict()) == w
    data = {**w.to_dict(), "context_before": "x" * 10_000, "context_after": "y" * 10_000}
    back = WorstPosition.from_dict(data)
    assert len(back.context_before) == len(back.context_after) == CONTEXT_MAX_CHARS
    assert "context_before" not in WorstPosition(0, 1, 2, "t", -1.0, -2.0, 1.0, 0.7).to_dict()
    assert np.isfinite(back.k3)


def test_a_matrix_is_one_page_with_a_section_each() -> None:
    page = render_html(scenarios.matrix())
    p = parse(page)
    anchors = [a["href"] for t, a in p.tags if t == "a" and (a.get("href") or "").startswith("#section-")]
    assert anchors == ["#section-0", "#section-1"]
    assert [a["id"] for t, a in p.tags if t == "section"] == ["section-0", "section-1"]
    assert "2 configurations: 1 pass, 1 fail" in "".join(p.text)
