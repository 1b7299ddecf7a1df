"""``check`` on the shipped default engine (hybrid preset: page_size 16, mamba_track_interval 64) with sizes
below its cache granularity: rounded up, every prompt hits both cache helpers, and the comment, result.json and
stderr say what was changed; ``--exact-sizes`` keeps the sizes and the helpers stay INCONCLUSIVE, explained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precisionbot.cli import main

pytestmark = pytest.mark.slow

# 24..48-token prompts cannot cross a 64-token mamba chunk, nor 8 new tokens a checkpoint past the prompt.
SIZES = ["--checks", "prefill_cache_hit,decode_cache_hit", "--samples", "4", "--prompt-tokens", "24..48"]
SIZES += ["--max-new-tokens", "8", "--quiet"]


def test_sizes_below_the_granularity_are_rounded_up_and_every_prompt_hits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fit"
    code = main(["check", "--engine", "builtin", *SIZES, "--out", str(out)])
    result = json.loads((out / "result.json").read_text())
    assert code == 0, result
    checks = {c["name"]: c for c in result["checks"]}
    for name in ("prefill_cache_hit", "decode_cache_hit"):
        assert checks[name]["verdict"] == "pass", checks[name]
        assert (checks[name]["cache"]["kept"], checks[name]["cache"]["total"]) == (4, 4)
    env = result["environment"]
    prompts, new = env["sizes_adjusted"]
    assert prompts.startswith("prompts 24..48 → 65 tokens to cross the 64-token mamba chunk")
    # 65 + 64 - 1 = 128: turn 1's last computed token reaches the checkpoint past 65 + 1.
    assert new.startswith("new tokens 8 → 64 to reach the 64-token mamba checkpoint interval")
    assert env["max_new_tokens"] == 64
    assert checks["prefill_cache_hit"]["stats"]["positions"] == 4 * 64  # the rounded sizes are the ones that ran
    err = capsys.readouterr().err
    assert f"note: sizes rounded up: {prompts}" in err and f"note: sizes rounded up: {new}" in err
    report = tmp_path / "comment.md"
    assert main(["report", str(out), "--format", "markdown", "--out", str(report)]) == 0
    assert "sizes rounded up to the engine's cache: prompts 24..48 → 65 tokens" in report.read_text()


def test_exact_sizes_keeps_them_and_the_miss_is_explained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "exact"
    code = main(["check", "--engine", "builtin", *SIZES, "--exact-sizes", "--out", str(out)])
    result = json.loads((out / "result.json").read_text())
    assert code == 2, result
    assert "sizes_adjusted" not in result["environment"] and result["environment"]["max_new_tokens"] == 8
    reasons = {c["name"]: c["reasons"][0] for c in result["checks"]}
    assert all(c["verdict"] == "inconclusive" for c in result["checks"])
    assert "mamba_cache_chunk_size 64" in reasons["prefill_cache_hit"]
    assert "--prompt-tokens 65" in reasons["prefill_cache_hit"]
    assert "mamba_track_interval 64" in reasons["decode_cache_hit"]
    assert "sizes rounded up" not in capsys.readouterr().err
