"""``precisionbot init --engine-kind KIND``: the files an engine repository needs, written in one go.

Adoption used to mean copying a 435-line workflow with nine SHA placeholders and reading four documents for
the IAM roles. ``init`` writes the config (valid as written: it is loaded before anything is written), the
caller of the reusable workflow, the least-privilege IAM policies as JSON and a checklist whose first path needs
no EC2. It never overwrites a file without ``--force``. ``precisionbot doctor`` then checks the result.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from precisionbot.commands.setup_files import (
    CALLER_PATH,
    CHECKLIST_PATH,
    CONFIG_PATH,
    ENGINE_KINDS,
    GATE_CALLER_PATH,
    IAM_DIR,
    PLACEHOLDER,
    PLACEHOLDER_STORE,
    REAP_CALLER_PATH,
    RELEASE_TAG,
    caller_text,
    checklist_text,
    config_text,
    gate_caller_text,
    iam_policies,
    policy_text,
    reap_caller_text,
)
from precisionbot.config import from_mapping
from precisionbot.errors import ConfigError
from precisionbot.untrusted import FULL_SHA


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "init",
        help="write the config, the caller workflow, IAM policies and a set-up checklist for an engine repository",
        description="Writes .github/precision.yml, .github/workflows/precision.yml (a caller of precisionbot's "
        "reusable workflow) and precision-pr.yml (the gate; precision-reap.yml too with --runner ec2), "
        ".github/precisionbot/iam/*.json (least-privilege policies) and "
        ".github/precisionbot/CHECKLIST.md. Existing files are kept unless --force. Exit 0 written, 3 refused.",
    )
    p.add_argument("--engine-kind", required=True, choices=sorted(ENGINE_KINDS), help="the engine under test")
    p.add_argument("--dir", default=".", help="the engine repository's root (default: the current directory)")
    p.add_argument("--model", metavar="NAME", help="the model's name in comments and the store (default per kind)")
    p.add_argument("--model-path", metavar="PATH", help="what {model} becomes in the launch command (hub name or path)")
    p.add_argument(
        "--store",
        metavar="URI",
        help=f"the baseline store, s3://bucket/prefix (default: {PLACEHOLDER_STORE}, a placeholder to replace)",
    )
    p.add_argument(
        "--repo",
        metavar="OWNER/REPO",
        help="this repository, for the OIDC trust policy (default: the placeholder to replace)",
    )
    p.add_argument(
        "--runner",
        choices=("pool", "ec2"),
        default="pool",
        help="pool (default, the first week: a GPU machine you have, no EC2) or ec2 (a fresh instance per job)",
    )
    p.add_argument(
        "--pin",
        metavar="SHA",
        help=f"the full commit SHA of precisionbot's release {RELEASE_TAG} to pin (default: the tag itself)",
    )
    p.add_argument("--force", action="store_true", help="overwrite files that exist")
    p.set_defaults(handler=_init)


def _files(args: argparse.Namespace) -> dict[str, str]:
    kind = ENGINE_KINDS[args.engine_kind]
    model_path = kind.model_path if args.model_path is None else args.model_path
    model = args.model or (Path(model_path).name.lower() if args.model_path else kind.model)
    store = args.store or PLACEHOLDER_STORE
    config = config_text(args.engine_kind, json.dumps(model), json.dumps(model_path), json.dumps(store), args.runner)
    try:
        from_mapping(yaml.safe_load(config), source=f"the {CONFIG_PATH} that init would write")
    except ConfigError as exc:
        raise ConfigError(f"{exc} (from the --model, --model-path or --store given to init)") from exc
    if not store.startswith("s3://"):
        raise ConfigError(f"--store {store!r} is not an S3 store; write s3://bucket/prefix (CI needs one store)")
    parsed = urlparse(store)
    repo = args.repo or f"{PLACEHOLDER}owner/{PLACEHOLDER}repo"
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise ConfigError(f"--repo {repo!r} is not OWNER/REPO; write e.g. acme/engine")
    if args.pin is not None and not FULL_SHA.fullmatch(args.pin):
        raise ConfigError(f"--pin {args.pin!r} is not a full commit SHA; write the 40 hex digits of {RELEASE_TAG}")
    files = {
        CONFIG_PATH: config,
        CALLER_PATH: caller_text(args.engine_kind, args.runner, args.pin),
        GATE_CALLER_PATH: gate_caller_text(args.pin),
        **({REAP_CALLER_PATH: reap_caller_text(args.pin)} if args.runner == "ec2" else {}),
        CHECKLIST_PATH: checklist_text(args.engine_kind, store),
    }
    for name, policy in iam_policies(parsed.netloc, parsed.path.strip("/"), repo, args.pin).items():
        files[f"{IAM_DIR}/{name}"] = policy_text(policy)
    return files


def _init(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        raise ConfigError(f"--dir {root} is not a directory; pass the engine repository's root")
    files = _files(args)
    existing = [name for name in files if (root / name).exists()]
    if existing and not args.force:
        raise ConfigError(
            f"{root / existing[0]} exists"
            + (f" (and {len(existing) - 1} more of the files init writes)" if len(existing) > 1 else "")
            + "; init keeps existing files: move it away, or pass --force to overwrite"
        )
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}" + (" (overwritten)" if name in existing else ""))
    left = [name for name, text in files.items() if PLACEHOLDER in text]
    print()
    if left:
        print(f"next: replace the '{PLACEHOLDER}...' values in {', '.join(left)}")
    print(f"next: follow {root / CHECKLIST_PATH} (first week: no EC2), then run: precisionbot doctor --dir {root}")
    return 0
