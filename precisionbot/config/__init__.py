"""The configuration: ``.github/precision.yml`` read, validated and frozen.

::

    settings.py  the frozen dataclasses of every section, with their defaults       pure
    fields.py    ``Reader``: typed access to a mapping with errors naming key and file  pure
    suite.py     a suite's conversation shape (turns, branches, groups)               pure
    aws_names.py the shapes of a region, an instance type, an AMI id, a bucket       pure
    digest.py    ``config_digest(path)``: the sha256 of the config file a result was judged with (reads it)
    parse.py     ``parse_config``: a parsed mapping -> ``Config`` (unknown keys are errors)  pure
    load.py      ``load_config(path)``, ``from_mapping(data)``: the one module that reads the file

Imports go one way: settings <- fields/suite <- aws_names <- parse <- load. Everything public is re-exported here.
"""

from __future__ import annotations

from precisionbot.config.digest import DEFAULTS_DIGEST, DIGEST_KEY, config_digest
from precisionbot.config.load import (
    MAX_FLOW_DEPTH,
    flow_depth,
    from_mapping,
    load_config,
    load_config_or_default,
)
from precisionbot.config.settings import (
    CONFIG_MAX_BYTES,
    DEFAULT_CONFIG_PATH,
    DEFAULT_PROFILES,
    DEFAULT_STORE_URI,
    DEFAULT_SUITES,
    ENGINE_KINDS,
    LAUNCH_PLACEHOLDERS,
    LOGIT_KL_STATS,
    PERMISSION_LEVELS,
    PROFILES,
    RUNNER_KINDS,
    SEPARATORS,
    BaselinesConfig,
    BatchInvarianceOptions,
    CacheConsistencyOptions,
    Config,
    EngineConfig,
    GitHubConfig,
    GoldenOptions,
    GoldenThresholds,
    LayersOptions,
    LocalizeConfig,
    ModelConfig,
    PermissionsConfig,
    RunnerConfig,
    SuiteConfig,
    ThresholdsConfig,
    ThresholdSet,
)

__all__ = [
    "CONFIG_MAX_BYTES",
    "DEFAULTS_DIGEST",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_PROFILES",
    "DEFAULT_STORE_URI",
    "DEFAULT_SUITES",
    "DIGEST_KEY",
    "ENGINE_KINDS",
    "LAUNCH_PLACEHOLDERS",
    "LOGIT_KL_STATS",
    "MAX_FLOW_DEPTH",
    "PERMISSION_LEVELS",
    "PROFILES",
    "RUNNER_KINDS",
    "SEPARATORS",
    "BaselinesConfig",
    "BatchInvarianceOptions",
    "CacheConsistencyOptions",
    "Config",
    "EngineConfig",
    "GitHubConfig",
    "GoldenOptions",
    "GoldenThresholds",
    "LayersOptions",
    "LocalizeConfig",
    "ModelConfig",
    "PermissionsConfig",
    "RunnerConfig",
    "SuiteConfig",
    "ThresholdSet",
    "ThresholdsConfig",
    "config_digest",
    "flow_depth",
    "from_mapping",
    "load_config",
    "load_config_or_default",
]
