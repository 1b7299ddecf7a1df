"""``precisionbot config validate [FILE]``: read a config the way every command does, say what it holds.

Exit 0 when the file is valid, 3 (a setup error, like every other command's bad config) with the one-line
error naming the key and the fix when it is not. Without FILE, the repository's ``.github/precision.yml``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from precisionbot.config import DEFAULT_CONFIG_PATH, load_config
from precisionbot.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("config", help="validate a precisionbot config file")
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION")
    sub.required = True
    val = sub.add_parser(
        "validate",
        help="read FILE as every command would: exit 0 if valid, 3 with the key and the fix if not",
        description="Validates a config (unknown keys and near-miss names get 'did you mean', store URIs, "
        "paths, thresholds and overrides of configured models only, launch templates with {model} and {port}, "
        "the shapes of runner.region, runner.instance_type and runner.ami). Exit 0 valid, 3 invalid; "
        "precisionbot doctor checks the rest of a repository's set-up.",
    )
    val.add_argument("file", nargs="?", metavar="FILE", help=f"the config (default {DEFAULT_CONFIG_PATH})")
    val.set_defaults(handler=_validate)


def _validate(args: argparse.Namespace) -> int:
    path = Path(args.file or DEFAULT_CONFIG_PATH)
    if args.file is None and not path.is_file():
        raise ConfigError(f"no config at {path}; pass the file: precisionbot config validate FILE")
    config = load_config(path)
    models = ", ".join(f"{m.name}@tp{m.tp}" for m in config.models) or "none"
    print(f"{path}: valid")
    print(f"  engine    {config.engine.kind}" + (" (launch template)" if config.engine.launch else ""))
    print(f"  models    {models}")
    print(
        f"  suites    {', '.join(sorted(config.suites))} (pr: {config.github.pr_suite}, "
        f"baseline: {config.github.baseline_suite})"
    )
    print(f"  store     {config.baselines.store}")
    print(f"  profile   {config.thresholds.profile}")
    return 0
