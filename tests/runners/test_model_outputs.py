"""Names, tags and step outputs: the small pure pieces."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from precisionbot.errors import ConfigError
from precisionbot.runners.model import (
    Instance,
    iso_utc,
    label_created_at,
    new_label,
    validate_label,
    validate_run_id,
)
from precisionbot.runners.outputs import format_outputs, write_outputs

WHEN = datetime(2026, 5, 17, 8, 30, 12, tzinfo=timezone.utc)


def test_generated_labels_are_unique_valid_and_carry_their_creation_time() -> None:
    labels = {new_label("123456789-2", WHEN) for _ in range(50)}
    assert len(labels) > 40
    for label in labels:
        assert validate_label(label) == label
        assert label.startswith("precisionbot-123456789-2-")
        assert label_created_at(label) == WHEN


@pytest.mark.parametrize("label", ["gpu-pool-1", "precisionbot", "precisionbot-1-zz!-ab", "self-hosted"])
def test_labels_we_did_not_generate_have_no_creation_time(label: str) -> None:
    assert label_created_at(label) is None


@pytest.mark.parametrize("bad", ["", "a b", "x" * 41, "$(reboot)", "1;2"])
def test_bad_run_ids_are_config_errors(bad: str) -> None:
    with pytest.raises(ConfigError, match="--run-id"):
        validate_run_id(bad)


def test_expiry_tag_round_trips_and_garbage_never_expires() -> None:
    assert iso_utc(WHEN) == "2026-05-17T08:30:12Z"
    assert Instance("i-1", "running", {"precisionbot:expires-at": iso_utc(WHEN)}).expires_at == WHEN
    assert Instance("i-1", "running", {"precisionbot:expires-at": "soon"}).expires_at is None
    assert Instance("i-1", "running", {}).expires_at is None
    naive = Instance("i-1", "running", {"precisionbot:expires-at": "2026-05-17T08:30:12"}).expires_at
    assert naive == WHEN


def test_outputs_use_heredocs_that_a_value_cannot_break(tmp_path: Path) -> None:
    text = format_outputs({"label": "a\nb=c", "instance-id": "i-1"}, delimiter="EOF_X")
    assert text == "label<<EOF_X\na\nb=c\nEOF_X\ninstance-id<<EOF_X\ni-1\nEOF_X\n"
    with pytest.raises(ValueError, match="delimiter"):
        format_outputs({"label": "x\nEOF_X\ninjected=1"}, delimiter="EOF_X")

    out = tmp_path / "github_output"
    out.write_text("earlier=1\n")
    assert write_outputs({"label": "L"}, str(out)) is None
    lines = out.read_text().splitlines()
    assert lines[0] == "earlier=1" and lines[1].startswith("label<<precisionbot_") and lines[2] == "L"
    assert lines[3] == lines[1].split("<<")[1]
    assert write_outputs({"label": "L", "instance-id": "i-9"}, None) == "label=L\ninstance-id=i-9\n"
