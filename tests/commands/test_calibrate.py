"""``precisionbot calibrate`` on a clean and a known-bad builtin variant: the table says the golden threshold
separates them."""

from __future__ import annotations

from pathlib import Path

import pytest

from precisionbot.cli import main


def test_calibrate_shows_where_golden_separates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "precision.yml"
    config.write_text("suites:\n  consistency:\n    golden: {context_depths: [256, 1024], decode_steps: 4}\n")
    rc = main(
        [
            "calibrate",
            "--faults",
            ",attn-p-fp8",
            "--checks",
            "golden",
            "--config",
            str(config),
            "--model-preset",
            "tiny",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "| (clean) | - | pass (kl_p999 0) |" in out
    assert "| attn-p-fp8 | golden | fail (kl_p999 " in out
    row = next(line for line in out.splitlines() if line.startswith("| golden per-position KL"))
    assert "| 0.01 | 0 |" in row and "| yes" in row


def test_unknown_variant_is_a_setup_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--faults", "nope"]) == 3
    assert "unknown variant(s) nope" in capsys.readouterr().err


def _row(variant: str, must_fail: list[str], **verdicts: tuple[str, float]) -> dict[str, object]:
    checks = {name: {"verdict": v, "stats": {"mean_k3": x, "max": x}} for name, (v, x) in verdicts.items()}
    return {"variant": variant, "must_fail": must_fail, "reported": False, "checks": checks}


def test_assess_counts_false_alarms_misses_and_thresholds_that_do_not_separate() -> None:
    from precisionbot.commands.calibrate import assess
    from precisionbot.config import Config

    thresholds = Config.default().thresholds_for(None, None, "default")
    rows = [
        _row("(clean)", [], match=("pass", 2e-5), prefill_cache_hit=("pass", 2e-5)),
        _row("(clean rerun 1)", [], match=("pass", 3e-5), prefill_cache_hit=("fail", 3e-3)),
        _row("stale", ["prefill_cache_hit"], match=("pass", 2e-5), prefill_cache_hit=("fail", 4e-2)),
        _row("shift", ["prefill_cache_hit"], match=("pass", 2e-5), prefill_cache_hit=("pass", 1e-4)),
        {**_row("bf16", [], match=("fail", 1.0)), "reported": True},  # measured, never judged
        # batch_invariance holds the deterministic tolerance: batch-variant failing it is what it is for
        {**_row("batch-variant", [], match=("pass", 7e-5), batch_invariance=("fail", 1e-4)), "fault": "batch-variant"},
    ]
    summary = assess(rows, ["match", "prefill_cache_hit"], thresholds)
    assert summary["must_pass_runs"] == 3
    assert summary["false_alarms"] == ["(clean rerun 1): prefill_cache_hit"]
    assert summary["misses"] == ["shift: prefill_cache_hit pass"]
    assert summary["not_separating"] == ["prefill_cache_hit mean_k3"]  # a must-pass run at 3e-3 > 0.0025


def test_negative_reruns_are_a_setup_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--reruns", "-1", "--model-preset", "tiny"]) == 3
    assert "--reruns must be >= 0" in capsys.readouterr().err


def test_hybrid_faults_are_not_in_the_tiny_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--faults", "conv-state-shift", "--model-preset", "tiny"]) == 3
    assert "conv-state-shift need the hybrid preset" in capsys.readouterr().err
