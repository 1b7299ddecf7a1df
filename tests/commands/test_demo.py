"""``precisionbot demo`` end to end: the real builtin engine, a real local store, the real checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precisionbot.errors import ConfigError
from tests.report import markdown
from tests.support.demo_run import SMALL, DemoRun, run_demo


@pytest.mark.slow
def test_demo_catches_the_broken_prefix_restore(demo_run: DemoRun) -> None:
    out = demo_run.out
    comment = (out / "comment.md").read_text(encoding="utf-8")
    assert demo_run.printed == comment
    result = json.loads((out / "result" / "result.json").read_text(encoding="utf-8"))
    verdicts = {c["name"]: c["verdict"] for c in result["checks"]}
    assert demo_run.code == 1, verdicts  # the demo's PR has a bug: exit = its verdict
    assert verdicts["match"] == "pass" and verdicts["prefill_cache_hit"] == "fail"
    assert result["diagnosis"][0]["code"] == "prefill_restore"
    assert (out / "summary.md").is_file()
    for group in markdown.raw_cell_counts(comment):
        assert len(set(group)) == 1


@pytest.mark.slow
def test_demo_writes_the_html_report(demo_run: DemoRun) -> None:
    page = (demo_run.out / "report.html").read_text(encoding="utf-8")
    # Lines for the four checks, golden's scatter, flips by margin, KL by depth, the prose/code CDF.
    assert page.count("<figure") == 8
    assert "prefill_cache_hit: per-position k3" in page and "golden: margin vs KL" in page
    assert "code (" in page and "prose (" in page  # the CDF is split by document kind


@pytest.mark.slow
def test_a_clean_pr_passes(tmp_path: Path) -> None:
    assert run_demo([*SMALL, "--fault", "none", "--checks", "match,prefill_cache_hit", "--out", str(tmp_path)]) == 0


def test_bad_fault_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown fault"):
        run_demo(["--fault", "no-such-fault", "--out", str(tmp_path)])
    with pytest.raises(ConfigError, match="none"):
        run_demo(["--fault", "none", "--fault", "attn-p-fp8", "--out", str(tmp_path)])
    with pytest.raises(ConfigError, match="--golden-depths"):
        run_demo(["--golden-depths", "a,b", "--out", str(tmp_path)])
    with pytest.raises(ConfigError, match="--checks"):
        run_demo(["--checks", "nope", "--out", str(tmp_path)])
