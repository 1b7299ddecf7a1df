"""The six config mistakes a newcomer made that ``config validate`` used to accept (issue 36, friction 9).

Each is refused at load time, by every command, with the key and the fix; the right spellings still load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from precisionbot.cli import main
from precisionbot.config import from_mapping
from precisionbot.errors import ConfigError

MODELS = [{"name": "qwen3-8b", "path": "Qwen/Qwen3-8B"}]
SGLANG = "python -m sglang.launch_server --model-path {model} --tp {tp} --port {port} {args}"

MISTAKES: dict[str, tuple[dict[str, Any], str, str]] = {
    "launch without {model}": (
        {
            "engine": {
                "kind": "sglang",
                "launch": "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --port {port}",
            }
        },
        "key 'engine.launch' has no {model} placeholder",
        "--model-path {model}",
    ),
    "override of an unconfigured model": (
        {"models": MODELS, "thresholds": {"overrides": {"qwen3-8B@tp1": {"kl_div": 0.004}}}},
        "key 'thresholds.overrides.qwen3-8B@tp1' overrides thresholds of model 'qwen3-8B', which is not under 'models'",
        "did you mean 'qwen3-8b'?",
    ),
    "store bucket/prefix without a scheme": (
        {"baselines": {"store": "my-bucket/precisionbot"}},
        "key 'baselines.store' 'my-bucket/precisionbot' has no scheme",
        "write 's3://my-bucket/precisionbot' for S3, or './my-bucket/precisionbot' for a local directory",
    ),
    "instance type g6e.xlarg": (
        {"runner": {"instance_type": "g6e.xlarg"}},
        "key 'runner.instance_type' is not an EC2 instance type (got 'g6e.xlarg'",
        "did you mean 'g6e.xlarge'?",
    ),
    "region us-west2": (
        {"runner": {"region": "us-west2"}},
        "key 'runner.region' is not an AWS region (got 'us-west2'",
        "did you mean 'us-west-2'?",
    ),
    "AMI ubuntu-22.04": (
        {"runner": {"ami": "ubuntu-22.04"}},
        "key 'runner.ami' is not an AMI id (got 'ubuntu-22.04')",
        "an image name must be resolved to its id first",
    ),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_each_mistake_is_refused_naming_the_key_and_the_fix(case: str) -> None:
    data, problem, fix = MISTAKES[case]
    with pytest.raises(ConfigError) as info:
        from_mapping(data, source="precision.yml")
    message = str(info.value)
    assert message.startswith("precision.yml: ") and "\n" not in message
    assert problem in message
    assert fix in message


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_config_validate_exits_3_on_each_mistake(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    data, problem, fix = MISTAKES[case]
    path = tmp_path / "precision.yml"
    path.write_text(yaml.safe_dump(data))
    assert main(["config", "validate", str(path)]) == 3
    err = capsys.readouterr().err
    assert problem in err and fix in err


@pytest.mark.parametrize(
    "data",
    [
        {"engine": {"kind": "sglang", "launch": SGLANG}, "models": MODELS},
        # The builtin engine's model is its preset, not a path: its launch needs no {model}.
        {"engine": {"kind": "builtin", "launch": "python -m precisionbot serve --port {port} {args}"}},
        {"models": MODELS, "thresholds": {"overrides": {"qwen3-8b": {"kl_div": 0.004}}}},
        {"models": MODELS, "thresholds": {"overrides": {"qwen3-8b@tp1": {"kl_div": 0.004}}}},
        {"baselines": {"store": ".precisionbot/baselines"}},
        {"baselines": {"store": "./my-bucket/precisionbot"}},
        {"baselines": {"store": "/srv/precisionbot/baselines"}},
        {"baselines": {"store": "baselines"}},
        {"baselines": {"store": "s3://my-bucket/precisionbot"}},
        {"runner": {"instance_type": "p5.48xlarge"}},
        {"runner": {"instance_type": "m7i.metal-24xl"}},
        {"runner": {"instance_type": "u7i-12tb.224xlarge"}},
        {"runner": {"region": "us-gov-west-1"}},
        {"runner": {"region": "ap-southeast-2"}},
        {"runner": {"ami": "ami-12c6146b"}},
        {"runner": {"ami": "ami-0123456789abcdef0"}},
    ],
)
def test_the_right_spellings_still_load(data: dict[str, Any]) -> None:
    from_mapping(data)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"models": [{"name": "m", "path": "org/m", "tp": 2}], "thresholds": {"overrides": {"m@tp4": {}}}},
            "names tp 4, but model 'm' is configured at tp 2; write 'm@tp2', or 'm' for every tp",
        ),
        (
            {"models": MODELS, "thresholds": {"overrides": {"Qwen/Qwen3-8B": {}}}},
            "key it by the model's name 'qwen3-8b', not its path",
        ),
        ({"thresholds": {"overrides": {"m": {}}}}, "key it by a name under 'models' (none are configured)"),
        ({"runner": {"ami": "resolve:ssm:/aws/service/x"}}, "is an SSM parameter"),
        ({"runner": {"region": "US-WEST-2"}}, "did you mean 'us-west-2'?"),
        ({"runner": {"instance_type": "g6e"}}, "write e.g. g6e.xlarge"),
        # A per-model runner is checked too.
        ({"models": [{"path": "a", "runner": {"region": "eu-west1"}}]}, "'models[0].runner.region'"),
        ({"engine": {"kind": "vllm", "launch": "vllm serve --port {port}"}}, "has no {model} placeholder"),
    ],
)
def test_the_near_misses_get_the_specific_fix(data: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_mapping(data)
    assert expected in str(info.value)
