from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from precisionbot.config import Config, ModelConfig, from_mapping, load_config, load_config_or_default
from precisionbot.config.fields import parse_int_range
from precisionbot.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "precision.yml"


def test_defaults_need_no_file() -> None:
    c = Config.default()
    assert c.engine.kind == "builtin"
    suite = c.suite("consistency")
    assert suite.checks == ("match", "prefill_cache_hit", "decode_cache_hit")
    assert (suite.samples, suite.max_new_tokens, suite.prompt_tokens) == (32, 512, (1536, 4608))
    t = c.thresholds_for(None, None)
    assert t.kl_div == 0.0025
    assert c.thresholds_for(None, None, "deterministic").kl_div == 1e-9
    assert c.thresholds_for(None, None, "deterministic").golden.max_abs_delta == 1e-5
    # Golden's per-position KL limit bounds the 99.9th percentile by default and every position when deterministic.
    assert t.golden.logit_kl_stat == "p999"
    assert c.thresholds_for(None, None, "deterministic").golden.logit_kl_stat == "max"
    assert from_mapping({}) == dataclasses.replace(c, source="<config>")


def test_example_file_loads_and_resolves_overrides() -> None:
    c = load_config(EXAMPLE)
    assert c.source == str(EXAMPLE)
    assert c.engine.kind == "sglang"
    assert [m.key for m in c.models] == ["qwen3-next-80b@tp4", "qwen3-8b@tp1"]
    big, small = c.models
    # Per-model runner overrides merge over the global runner.
    assert c.runner_for(big).instance_type == "p5.48xlarge"
    assert c.runner_for(big).subnet == c.runner.subnet == "subnet-0123456789abcdef0"
    assert c.runner_for(small) is c.runner
    assert c.suite("nightly").batch_invariance.batch_sizes == (1, 4, 16)
    assert set(c.suites) >= {"consistency", "pr", "baseline", "nightly"}


def test_threshold_overrides_by_model_and_tp() -> None:
    c = from_mapping(
        {
            "models": [{"name": "m", "path": "org/m", "tp": 4}, {"name": "m", "path": "org/m", "tp": 2}],
            "thresholds": {
                "default": {"max_token_k3": 0.8},
                "overrides": {
                    "m@tp4": {"kl_div": 0.005, "deterministic": {"kl_div": "1e-8"}},
                    "m": {"kl_div": 0.02},
                },
            },
        }
    )
    at4 = c.thresholds_for("m", 4)
    assert at4.kl_div == 0.005
    assert at4.max_token_k3 == 0.8  # the override refines the configured profile, not the builtin default
    assert c.thresholds_for("m", 4, "deterministic").kl_div == 1e-8
    assert c.thresholds_for("m", 2).kl_div == 0.02  # "<model>" applies at any tp
    assert c.thresholds_for("other", 4).kl_div == 0.0025
    with pytest.raises(ConfigError, match="unknown threshold profile 'strict'"):
        c.thresholds_for("m", 4, "strict")


def test_a_models_thresholds_and_launch_args_are_spelled_once() -> None:
    """``thresholds_for_model`` and ``launch_args`` give what their call sites spelled out before."""
    c = from_mapping(
        {
            "engine": {"args": "--page-size 16"},
            "models": [{"name": "m", "path": "org/m", "tp": 4}],
            "thresholds": {"overrides": {"m@tp4": {"kl_div": 0.005}}},
        }
    )
    m, bare = ModelConfig(name="m", path="org/m", tp=4, args="--dtype bf16"), ModelConfig(name="m", path="p", tp=2)
    for model in (m, bare, None):
        for profile in (None, "default", "deterministic"):
            old = c.thresholds_for(None if model is None else model.name, None if model is None else model.tp, profile)
            assert c.thresholds_for_model(model, profile) == old
        assert c.launch_args(model) == (None if model is None else f"{c.engine.args} {model.args}".strip())
    assert c.thresholds_for_model(m).kl_div == 0.005
    assert c.launch_args(m) == "--page-size 16 --dtype bf16"
    assert c.launch_args(bare) == "--page-size 16"
    assert Config.default().launch_args(bare) == ""


def _error(data: Any) -> str:
    with pytest.raises(ConfigError) as info:
        from_mapping(data, source="precision.yml")
    return str(info.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"engin": {}}, "precision.yml: unknown key 'engin'; did you mean 'engine'?"),
        ({"engine": {"batchsize": 4}}, "unknown key 'engine.batchsize'; did you mean 'batch_size'?"),
        (
            {"engine": {"kind": "tgi"}},
            "key 'engine.kind' must be one of sglang, openai, builtin, llamacpp, vllm (got 'tgi')",
        ),
        ({"engine": {"batch_size": 0}}, "key 'engine.batch_size' must be a positive integer (got 0)"),
        ({"engine": {"concurrency": "many"}}, "key 'engine.concurrency' must be an integer"),
        ({"engine": {"request_timeout_s": -1}}, "key 'engine.request_timeout_s' must be > 0"),
        ({"engine": {"launch": "serve {model} --port {port} {gpus}"}}, "unknown placeholder {gpus}"),
        ({"engine": {"launch": "serve {model}"}}, "has no {port} placeholder"),
        ({"engine": {"kind": "sglang", "faults": ["x"]}}, "'engine.faults' is only for the builtin engine"),
        ({"models": {"name": "x"}}, "key 'models' must be a list"),
        ({"models": [{"name": "x"}]}, "key 'models[0].path' is required"),
        ({"models": [{"path": "a", "tp": 2}, {"path": "a", "tp": 2}]}, "repeats model 'a' at tp 2"),
        ({"models": [{"path": "a", "runner": {"instance": "x"}}]}, "unknown key 'models[0].runner.instance'"),
        ({"suites": {"pr": {"checks": ["mtach"]}}}, "key 'suites.pr.checks' names unknown check 'mtach'"),
        ({"suites": {"pr": {"checks": []}}}, "key 'suites.pr.checks' is empty"),
        ({"suites": {"x": {"prompt_tokens": [10, 5]}}}, "key 'suites.x.prompt_tokens' must be a positive range"),
        ({"suites": {"x": {"golden": {"top_k": 0}}}}, "key 'suites.x.golden.top_k' must be a positive integer"),
        ({"thresholds": {"profile": "strict"}}, "key 'thresholds.profile' must be one of default, deterministic"),
        (
            {"thresholds": {"default": {"golden": {"logit_kl_stat": "p99"}}}},
            "'thresholds.default.golden.logit_kl_stat' must be one of p999, max (got 'p99')",
        ),
        ({"thresholds": {"default": {"kl_div": "small"}}}, "key 'thresholds.default.kl_div' must be a finite"),
        ({"thresholds": {"default": {"max_frac_over": 2}}}, "'thresholds.default.max_frac_over' must be a fraction"),
        ({"thresholds": {"overrides": {"m@4": {}}}}, "key 'thresholds.overrides.m@4' is not '<model>@tp<N>'"),
        ({"thresholds": {"overrides": {"m@tp4": {"kl": 1}}}}, "unknown key 'thresholds.overrides.m@tp4.kl'"),
        ({"github": {"permissions": {"rerun": "push"}}}, "'github.permissions.rerun' must be one of read, triage"),
        ({"github": {"pr_suite": "nope"}}, "key 'github.pr_suite' names suite 'nope', which is not defined"),
        ({"github": {"comment_per_suite": "yes"}}, "key 'github.comment_per_suite' must be true or false"),
        ({"github": {"pr_suite": "baseline"}}, "PR runs must not record baselines"),
        ({"runner": {"kind": "k8s"}}, "key 'runner.kind' must be one of ec2, pool"),
        ({"runner": {"security_groups": "sg-1"}}, None),
        ({"baselines": {"store": 3.5, "path": "x"}}, "unknown key 'baselines.path'"),
        (["engine"], "precision.yml: the top level must be a mapping"),
        ({"engine": "sglang"}, "key 'engine' must be a mapping (got str 'sglang')"),
    ],
)
def test_validation_messages_name_file_key_and_fix(data: Any, expected: str | None) -> None:
    if expected is None:
        from_mapping(data, source="precision.yml")  # a single string is a one-item list
        return
    message = _error(data)
    assert expected in message
    assert message.startswith("precision.yml: ")
    assert "\n" not in message


def test_every_type_error_says_how_to_fix() -> None:
    message = _error({"engine": {"batch_size": "8x"}})
    assert message.endswith("write a whole number")


def test_load_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read config file .*missing\.yml"):
        load_config(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("engine:\n  kind: [sglang\n")
    with pytest.raises(ConfigError, match=r"bad.yml: YAML syntax error at line \d+"):
        load_config(bad)
    empty = tmp_path / "empty.yml"
    empty.write_text("# nothing\n")
    assert load_config(empty).engine.kind == "builtin"
    typo = tmp_path / "typo.yml"
    typo.write_text("suites:\n  pr:\n    sample: 8\n")
    with pytest.raises(ConfigError, match=r"typo.yml: unknown key 'suites.pr.sample'; did you mean 'samples'\?"):
        load_config(typo)


def test_load_config_or_default_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config_or_default(None) == Config.default()
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "precision.yml").write_text("engine:\n  batch_size: 3\n")
    assert load_config_or_default(None).engine.batch_size == 3
    explicit = tmp_path / "other.yml"
    explicit.write_text("engine:\n  batch_size: 5\n")
    assert load_config_or_default(str(explicit)).engine.batch_size == 5
    with pytest.raises(ConfigError, match=r"missing\.yml"):
        load_config_or_default("missing.yml")


def test_yaml_number_quirks(tmp_path: Path) -> None:
    f = tmp_path / "p.yml"
    # PyYAML reads 1e-9 (no dot) as a string and `revision: 1234` as an int: both must work.
    f.write_text("thresholds:\n  default:\n    kl_div: 1e-9\nmodels:\n  - path: m\n    revision: 1234\n")
    c = load_config(f)
    assert c.thresholds_for(None, None).kl_div == 1e-9
    assert c.models[0].revision == "1234"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (8, (8, 8)),
        ("8", (8, 8)),
        ("16..32", (16, 32)),
        ("16-32", (16, 32)),
        ([1, 2], (1, 2)),
        ({"min": 3, "max": 4}, (3, 4)),
    ],
)
def test_int_range(value: Any, expected: tuple[int, int]) -> None:
    assert parse_int_range(value) == expected


@pytest.mark.parametrize("value", [0, "x", [3, 1], True, [1, 2, 3], "5..", -2])
def test_int_range_rejects(value: Any) -> None:
    with pytest.raises(ValueError):
        parse_int_range(value)


def test_config_is_frozen() -> None:
    c = Config.default()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.engine.kind = "sglang"  # type: ignore[misc]


def test_example_documents_every_key() -> None:
    """docs/config.md and examples/precision.yml show every key (commented out where it has no sane example)."""
    from precisionbot import config as cfg

    text = EXAMPLE.read_text()
    sections = {
        "engine": cfg.EngineConfig,
        "runner": cfg.RunnerConfig,
        "models": cfg.ModelConfig,
        "suites": cfg.SuiteConfig,
        "golden": cfg.GoldenOptions,
        "batch_invariance": cfg.BatchInvarianceOptions,
        "thresholds": cfg.ThresholdSet,
        "github": cfg.GitHubConfig,
        "permissions": cfg.PermissionsConfig,
        "baselines": cfg.BaselinesConfig,
        "thresholds.golden": cfg.GoldenThresholds,
        "localize": cfg.LocalizeConfig,
    }
    missing = []
    for section, cls in sections.items():
        for f in dataclasses.fields(cls):
            if f.name in {"name", "golden", "batch_invariance", "runner", "kl_div_key"}:
                continue  # sections of their own, implied by the list/mapping key, or not a config key
            if f"{f.name}:" not in text:
                missing.append(f"{section}.{f.name}")
    assert missing == []
    docs = (EXAMPLE.parents[1] / "docs" / "config.md").read_text()
    assert text in docs  # the doc embeds the example verbatim


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"baselines": {"store": "s3:/bucket/base"}},
            "is not a URI (s3: takes two slashes); did you mean 's3://bucket/base'?",
        ),
        ({"baselines": {"store": "s3:bucket"}}, "did you mean 's3://bucket'?"),
        ({"baselines": {"store": "gs://bucket"}}, "unsupported baseline store URI"),
        ({"github": {"paths": "csrc/**"}}, "key 'github.paths' must be a list of strings (got the string 'csrc/**')"),
        ({"suites": {"pr": {"checks": ["match", "golen"]}}}, "names unknown check 'golen'; did you mean 'golden'?"),
        ({"thresholds": {"profile": "determinstic"}}, "did you mean 'deterministic'?"),
        ({"engine": {"kind": "sglng"}}, "did you mean 'sglang'?"),
    ],
)
def test_stricter_uris_paths_and_near_miss_names(data: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_mapping(data, "p.yml")
    assert expected in str(info.value)
    assert from_mapping({"baselines": {"store": "s3://bucket/base"}}).baselines.store == "s3://bucket/base"
    assert from_mapping({"baselines": {"store": "file:///tmp/x"}}).baselines.store == "file:///tmp/x"
    assert from_mapping({"github": {"paths": ["csrc/**"]}}).github.paths == ("csrc/**",)


def test_config_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`precisionbot config validate FILE`: exit 0 and a summary when valid, 3 and the one-line error if not."""
    from precisionbot.cli import main

    good = tmp_path / "good.yml"
    good.write_text("engine:\n  kind: sglang\n")
    assert main(["config", "validate", str(good)]) == 0
    assert capsys.readouterr().out.startswith(f"{good}: valid\n")
    bad = tmp_path / "bad.yml"
    bad.write_text("baselines:\n  store: s3:/bucket\n")
    assert main(["config", "validate", str(bad)]) == 3
    assert "did you mean 's3://bucket'?" in capsys.readouterr().err
    assert main(["config", "validate", str(tmp_path / "none.yml")]) == 3
    assert "cannot read config file" in capsys.readouterr().err
