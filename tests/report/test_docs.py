"""The docs against real runs: the README's demo excerpt is what ``precisionbot demo`` prints at the documented
sizes (``scripts/docs-figures`` writes it; this test cuts it again from the suite's own demo run), and the
README's cost table is the package's price table."""

from __future__ import annotations

import re

import pytest

from precisionbot.results.cost import PRICES, per_pr
from tests.report.conftest import SMALL, DemoRun
from tests.support.browser import ROOT
from tests.support.docs_excerpt import DEMO_ARGS, excerpt, readme_block

README = ROOT / "README.md"


def test_the_documented_sizes_are_the_test_runs_sizes() -> None:
    assert tuple(a for a in SMALL if a != "--quiet") == DEMO_ARGS
    assert "precisionbot demo " + " ".join(DEMO_ARGS) in " ".join(README.read_text(encoding="utf-8").split())


@pytest.mark.slow
def test_the_readme_excerpt_is_what_the_demo_prints(demo_run: DemoRun) -> None:
    printed = excerpt((demo_run.out / "comment.md").read_text(encoding="utf-8"))
    assert readme_block(README.read_text(encoding="utf-8")) == printed, (
        "README.md's demo excerpt differs from what `precisionbot demo` prints now: run scripts/docs-figures"
    )


def test_the_readme_cost_table_is_the_price_table() -> None:
    text = README.read_text(encoding="utf-8")
    block = text[text.index("<!-- cost-table:start -->") : text.index("<!-- cost-table:end -->")]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \|(.*)\|$", block, re.MULTILINE)}
    assert rows.keys() == PRICES.keys()
    for kind, cells in rows.items():
        price = PRICES[kind]
        want = [f"{price.gpus} × {price.gpu}", f"{price.usd_per_hour:.2f}"] + [
            f"{per_pr(kind, m):.2f}" for m in (15, 30, 60)
        ]
        assert [c.strip() for c in cells.split("|")] == want, kind
