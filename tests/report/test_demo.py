"""``precisionbot demo`` end to end: the real builtin engine, a real local store, the real checks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from precisionbot.commands import demo
from precisionbot.errors import ConfigError
from tests.report import markdown

SMALL = [
    "--samples",
    "4",
    "--max-new-tokens",
    "16",
    "--prompt-tokens",
    "64..128",
    "--golden-depths",
    "128,256",
    "--quiet",
]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    demo.register(parser.add_subparsers())
    args = parser.parse_args(["demo", *argv])
    code: int = args.handler(args)
    return code


@pytest.mark.slow
def test_demo_catches_the_broken_prefix_restore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    code = run([*SMALL, "--out", str(out)])
    printed = capsys.readouterr().out
    comment = (out / "comment.md").read_text(encoding="utf-8")
    assert printed == comment
    result = json.loads((out / "result" / "result.json").read_text(encoding="utf-8"))
    verdicts = {c["name"]: c["verdict"] for c in result["checks"]}
    assert code == 1, verdicts  # the demo's PR has a bug: exit = its verdict
    assert verdicts["match"] == "pass" and verdicts["prefill_cache_hit"] == "fail"
    assert result["diagnosis"][0]["code"] == "prefill_restore"
    assert (out / "summary.md").is_file()
    for group in markdown.raw_cell_counts(comment):
        assert len(set(group)) == 1


@pytest.mark.slow
def test_a_clean_pr_passes(tmp_path: Path) -> None:
    assert run([*SMALL, "--fault", "none", "--checks", "match,prefill_cache_hit", "--out", str(tmp_path)]) == 0


def test_bad_fault_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown fault"):
        run(["--fault", "no-such-fault", "--out", str(tmp_path)])
    with pytest.raises(ConfigError, match="none"):
        run(["--fault", "none", "--fault", "attn-p-fp8", "--out", str(tmp_path)])
    with pytest.raises(ConfigError, match="--golden-depths"):
        run(["--golden-depths", "a,b", "--out", str(tmp_path)])
    with pytest.raises(ConfigError, match="--checks"):
        run(["--checks", "nope", "--out", str(tmp_path)])
