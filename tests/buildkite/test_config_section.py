"""The ``buildkite:`` config section."""

from __future__ import annotations

import pytest

from precisionbot.config import Config, from_mapping
from precisionbot.errors import ConfigError


def test_defaults_and_values() -> None:
    assert Config.default().buildkite.organization is None
    assert Config.default().buildkite.api_url == "https://api.buildkite.com/v2"
    bk = from_mapping({"buildkite": {"organization": "vllm", "pipeline": "ci", "queue": "gpu-h200"}}).buildkite
    assert (bk.organization, bk.pipeline, bk.queue) == ("vllm", "ci", "gpu-h200")
    assert (
        from_mapping({"buildkite": {"api_url": "http://127.0.0.1:9/v2/"}}).buildkite.api_url == "http://127.0.0.1:9/v2"
    )


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"organization": "vLLM Project"}, "key 'buildkite.organization' is not a Buildkite slug"),
        ({"pipeline": "ci/gpu"}, "key 'buildkite.pipeline' is not a Buildkite slug"),
        ({"api_url": "api.buildkite.com"}, "must be an http(s) address"),
        ({"queues": "gpu"}, "buildkite.queues"),
    ],
)
def test_mistakes_name_the_key(section: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_mapping({"buildkite": section}, "p.yml")
    assert expected in str(info.value)
