"""A run's timing: GPU minutes and price on a known runner, the config's price over the list price."""

from __future__ import annotations

import pytest

from precisionbot.checks.suite import _timing
from precisionbot.config import Config, from_mapping
from precisionbot.errors import ConfigError
from precisionbot.results.cost import PRICES


def test_no_machine_no_price() -> None:
    assert _timing(90.0, None, Config(), None) == {"wall_s": 90.0}


def test_list_price_of_the_runner() -> None:
    timing = _timing(360.0, "g6e.12xlarge", Config(), None)
    assert timing["gpu_minutes"] == pytest.approx(24.0)
    assert timing["usd"] == pytest.approx(PRICES["g6e.12xlarge"].usd_per_hour / 10)
    assert timing["price_source"] == "on-demand list price 2025-06"


def test_the_configs_price_wins_for_its_instance_type_only() -> None:
    config = from_mapping({"runner": {"instance_type": "g6e.xlarge", "price_per_hour": 0.9}})
    assert _timing(3600.0, "g6e.xlarge", config, None)["usd"] == pytest.approx(0.9)
    other = _timing(3600.0, "g6.xlarge", config, None)
    assert other["usd"] == pytest.approx(PRICES["g6.xlarge"].usd_per_hour)


def test_a_bad_price_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="price_per_hour"):
        from_mapping({"runner": {"price_per_hour": -1}})
