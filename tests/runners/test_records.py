"""Names and tags: the small pure pieces."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from precisionbot.errors import ConfigError
from precisionbot.runners.records import (
    Instance,
    iso_utc,
    name_created_at,
    new_runner_name,
    validate_label,
    validate_run_id,
)

WHEN = datetime(2026, 5, 17, 8, 30, 12, tzinfo=timezone.utc)


def test_generated_names_are_unique_valid_labels_and_carry_their_creation_time() -> None:
    names = {new_runner_name("123456789-2", WHEN) for _ in range(50)}
    assert len(names) > 40
    for name in names:
        assert validate_label(name) == name
        assert name.startswith("precisionbot-123456789-2-")
        assert name_created_at(name) == WHEN


@pytest.mark.parametrize("name", ["gpu-pool-1", "precisionbot", "precisionbot-1-zz!-ab", "precisionbot-9-1-0"])
def test_names_we_did_not_generate_have_no_creation_time(name: str) -> None:
    assert name_created_at(name) is None


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
