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
    assert "| (clean) | - | pass (kl_max 0) |" in out
    assert "| attn-p-fp8 | golden | fail (kl_max " in out
    row = next(line for line in out.splitlines() if line.startswith("| golden per-position KL"))
    assert "| 0.01 | 0 |" in row and "| yes" in row


def test_unknown_variant_is_a_setup_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--faults", "nope"]) == 3
    assert "unknown variant(s) nope" in capsys.readouterr().err
