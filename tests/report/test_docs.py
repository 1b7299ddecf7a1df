"""The docs against real runs: the README's demo excerpt is what ``precisionbot demo`` prints at the documented
sizes (``scripts/docs-figures`` writes it; this test cuts it again from the suite's own demo run and compares with
``docs_excerpt.drift``: exact structure, figures within a tolerance), and the README's cost table is the package's
price table. ``demo_excerpt_sample.md`` is a real excerpt, frozen, for the tests that the comparison can fail."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from precisionbot.results.cost import PRICES, per_pr
from tests.support.browser import ROOT
from tests.support.demo_run import SMALL, DemoRun
from tests.support.docs_excerpt import DEMO_ARGS, drift, excerpt, parse, readme_block, shape

README = ROOT / "README.md"
SAMPLE = (Path(__file__).parent / "demo_excerpt_sample.md").read_text(encoding="utf-8")


def test_the_documented_sizes_are_the_test_runs_sizes() -> None:
    assert tuple(a for a in SMALL if a != "--quiet") == DEMO_ARGS
    assert "precisionbot demo " + " ".join(DEMO_ARGS) in " ".join(README.read_text(encoding="utf-8").split())


@pytest.mark.slow
def test_the_readme_excerpt_is_what_the_demo_prints(demo_run: DemoRun) -> None:
    printed = excerpt((demo_run.out / "comment.md").read_text(encoding="utf-8"))
    assert drift(readme_block(README.read_text(encoding="utf-8")), printed) == [], (
        "README.md's demo excerpt says something else than `precisionbot demo` prints now: run scripts/docs-figures"
    )


def _edit(old: str, new: str, text: str = SAMPLE) -> str:
    assert old in text, old  # the edit must hit, or the test would compare the sample with itself
    return text.replace(old, new, 1)


def _row(name: str) -> str:
    return next(line for line in SAMPLE.splitlines() if line.startswith(f"| {name} |"))


def test_the_sample_is_a_whole_excerpt() -> None:
    sample = parse(SAMPLE)
    assert [r[0] for r in sample.rows] == ["match", "prefill\\_cache\\_hit", "decode\\_cache\\_hit", "golden"]
    assert all(len(r) == 6 for r in sample.rows) and len(sample.bullets) == 5
    assert drift(SAMPLE, SAMPLE) == []


def test_last_digit_drift_passes() -> None:
    # The drift seen between two machines: match's mean_k3 5.51e-05 -> 5.12e-05, prefill's flips 78 -> 77.
    drifted = _edit("k3 5.5e-05 · 0.00071", "k3 5.1e-05 · 0.00068")
    drifted = _edit("mean\\_k3 5.51e-05", "mean\\_k3 5.12e-05", drifted)
    drifted = _edit("| 78 |", "| 77 |", drifted)
    drifted = _edit("9.1 nats", "8.7 nats", drifted)
    # Golden's positions include its decode rows' generated tokens: a near tie flipped can end a sample elsewhere.
    drifted = _edit("| golden | ❌ fail | 1,030 |", "| golden | ❌ fail | 1,048 |", drifted)
    assert drift(SAMPLE, drifted) == []


def test_data_dependent_wording_of_a_finding_passes() -> None:
    # diagnosis.py says "in 3 of 4" or "in 4 of 4", names another worst position and token, and drops the
    # "N such flips" clause when there is one.
    varied = _edit("in 3 of 4 diverging samples", "in 4 of 4 diverging samples")
    varied = _edit(
        "sample 2, position 79 (scored token “·the”, gap 5.73 nats; 9 such flips among its worst positions)",
        "sample 1, position 70 (scored token “↵”, gap 4.1 nats)",
        varied,
    )
    assert drift(SAMPLE, varied) == []
    assert shape("x (median at generated token 9, range 3–17): y") == shape(
        "x (at generated token 5 in every such sample): y"
    )
    one = "1 of 4 samples carry the divergence — sample 2 (prompt 70 tokens, max k3 8.07); the rest match."
    two = "2 of 4 samples carry the divergence — sample 1 (prompt 9 tokens, 8 cached, max k3 1), sample 3 (prompt 7 "
    assert shape(one) == shape(two + "tokens, max k3 2) and 1 more; the rest match.")


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ("**❌ precisionbot: FAIL**", "**✅ precisionbot: PASS**", "verdict line"),
        ("| match | ✅ pass |", "| match | ❌ fail |", "match Verdict"),
        ("| 288 · 4/4 cache hits | k3 0.33", "| 288 · 3/4 cache hits | k3 0.33", "prefill\\_cache\\_hit Positions"),
        ("k3 0.33 · 4.7 · 8.1", "k3 0.033 · 4.7 · 8.1", "prefill\\_cache\\_hit Mean"),  # 10x
        ("k3 0.5 · 7.3 · 10", "k3 0.8 · 7.3 · 10", "decode\\_cache\\_hit Mean"),  # a mean 1.6x, past FIGURE_FACTOR
        ("k3 0.5 · 7.3 · 10", "k3 0.5 · 7.3 · 26", "decode\\_cache\\_hit Mean"),  # a tail 2.6x, past TAIL_FACTOR
        ("KL 0.005 · 0 · 1.9", "KL 0.005 · 0.17 · 1.9", "golden Mean"),  # a zero is not a small figure
        ("| 78 |", "| 95 |", "prefill\\_cache\\_hit Flips"),  # 17 more, past max(2, 15 % of 95)
        ("| 1 | mean", "| 4 | mean", "match Flips"),  # 3 more, past the slack of 2
        ("4 (3 confident)", "4 (0 confident)", "golden Flips"),
        ("| golden | ❌ fail | 1,030 |", "| golden | ❌ fail | 2,060 |", "golden Positions"),  # twice the rows
        ("confident-flip margin 1 nat (+2 more below)", "confident-flip margin 1 nat", "golden Why"),
        (_row("decode\\_cache\\_hit") + "\n", "", "checks in the table"),
        (
            "- prefill\\_cache\\_hit: every sample diverges (4 of 4): a shift shared by all requests (a common "
            "state or kernel), not a trigger in a few.\n",
            "",
            "diagnosis bullets",
        ),
        (
            "every sample diverges (4 of 4): a shift shared by all requests (a common state or kernel), not a trigger "
            "in a few.",
            "3 of 4 samples carry the divergence — sample 2 (prompt 70 tokens, 64 cached, max k3 8.07); "
            "the rest match. Compare their prompt lengths, cached tokens and page or chunk remainders.",
            "diagnosis bullets",
        ),  # another finding (concentrated, not global)
    ],
)
def test_a_real_change_fails(old: str, new: str, what: str) -> None:
    found = drift(SAMPLE, _edit(old, new))
    assert len(found) == 1 and found[0].startswith(what), found


def test_a_cut_readme_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError, match="not a demo excerpt"):
        drift("", SAMPLE)
    assert drift(SAMPLE.split("| match |")[0] + "\n", SAMPLE) != []


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
