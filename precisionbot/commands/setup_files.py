"""What ``precisionbot init`` writes and ``precisionbot doctor`` checks against, spelled once.

The names a workflow reads (``SECRET_NAMES``, ``VARIABLE_NAMES``: docs/github.md, *Setup*, and docs/runners.md),
the config and caller workflow of each engine kind, the least-privilege IAM policies of docs/runners.md and
docs/baselines.md (not one action wider), and the set-up checklist: a first-week path on a GPU machine the team
already has, then the full EC2 path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from precisionbot import __version__

SECRET_NAMES = ("PRECISIONBOT_APP_PRIVATE_KEY", "PRECISIONBOT_RUNNER_TOKEN", "GITHUB_TOKEN")
"""Secrets the documented workflows read (environment secrets of ``precisionbot``): the GitHub App's private key
that mints a runner token per job, or the fallback fine-grained PAT; Actions' own token."""
VARIABLE_NAMES = (
    "PRECISIONBOT_APP_CLIENT_ID",
    "PRECISIONBOT_LAUNCH_ROLE_ARN",
    "PRECISIONBOT_BASELINE_WRITER_ROLE_ARN",
    "PRECISIONBOT_AWS_REGION",
    "PRECISIONBOT_SHA",
)
"""Repository or environment variables (not secrets: an ARN or a region is no credential)."""

PLACEHOLDER = "replace-with-"
"""Every value ``init`` cannot know starts with this; ``doctor`` names each one that is left."""
PLACEHOLDER_STORE = f"s3://{PLACEHOLDER}your-bucket/precisionbot"
RELEASE_TAG = f"v{__version__}"
"""The release of this precisionbot, which the caller workflow pins (``doctor`` accepts a tag or a full SHA)."""
REUSABLE_WORKFLOW = "precisionbot/precisionbot/.github/workflows/precision.yml"

CONFIG_PATH = ".github/precision.yml"
CALLER_PATH = ".github/workflows/precision.yml"
GATE_CALLER_PATH = ".github/workflows/precision-pr.yml"
REAP_CALLER_PATH = ".github/workflows/precision-reap.yml"
SETUP_DIR = ".github/precisionbot"
CHECKLIST_PATH = f"{SETUP_DIR}/CHECKLIST.md"
IAM_DIR = f"{SETUP_DIR}/iam"


@dataclass(frozen=True)
class EngineKind:
    launch: str
    install: str
    model: str
    model_path: str
    args: str = ""
    note: str = ""


ENGINE_KINDS = {
    "sglang": EngineKind(
        launch="python -m sglang.launch_server --model-path {model} --tp {tp} --port {port} {args}",
        install='python -m pip install -e "python[all]"',
        model="qwen3-8b",
        model_path="Qwen/Qwen3-8B",
    ),
    "vllm": EngineKind(
        launch="env VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server --model {model} "
        "--host 127.0.0.1 --port {port} --tensor-parallel-size {tp} --enable-prompt-tokens-details {args}",
        install="python -m pip install -e .",
        model="qwen3-8b",
        model_path="Qwen/Qwen3-8B",
        args="--max-model-len 8192",
        note="dev mode for the cache flush; cached-token counts in the answers (docs/check.md, vLLM)",
    ),
    "llamacpp": EngineKind(
        launch="build/bin/llama-server -m {model} --host 127.0.0.1 --port {port} --parallel 4 "
        "--slot-save-path build --cache-ram 0 {args}",
        install="cmake -B build -DGGML_CUDA=ON && cmake --build build -j --target llama-server",
        model="qwen3-8b-q8_0",
        model_path="models/Qwen3-8B-Q8_0.gguf",
        args="-fa off --no-repack",
        note="a llama-server that can be flushed (docs/check.md, llama.cpp): slots saved under build/; a GGUF model",
    ),
    "openai": EngineKind(
        launch="python -m vllm.entrypoints.openai.api_server --model {model} --host 127.0.0.1 --port {port} "
        "--tensor-parallel-size {tp} {args}",
        install="python -m pip install -e .",
        model="qwen3-8b",
        model_path="Qwen/Qwen3-8B",
        note="any server with /v1/completions and logprobs: put your server's command here",
    ),
}


def config_text(kind: str, model: str, model_path: str, store: str, runner: str = "pool") -> str:
    """``.github/precision.yml`` for ``kind``: loads with ``load_config`` as written (a test holds it to that)."""
    e = ENGINE_KINDS[kind]
    note = f"  # {e.note}" if e.note else ""
    return f"""\
# precisionbot's configuration (docs/config.md). Every key is optional; unknown keys are errors.
# Check it with: precisionbot config validate && precisionbot doctor
engine:
  kind: {kind}{note}
  launch: {e.launch}
  install: {e.install}
  args: "{e.args}"

models:
  - name: {model}                # comments, the baseline store and threshold keys use this name
    path: {model_path}           # what {{model}} becomes in engine.launch
    tp: 1

baselines:
  store: {store}   # one S3 prefix; the GPU job only reads it

github:
  paths: []                      # globs of kernel paths that trigger a run; empty = every PR
  run_label: precision
  pr_suite: pr
  baseline_suite: baseline

{_runner_section(runner)}"""


CALLER_TITLES = {
    "sglang": "a SGLang repository",
    "vllm": "a vLLM repository",
    "llamacpp": "a llama.cpp repository",
    "openai": "a OpenAI-compatible engine repository",
}
ZERO_SHA = "0" * 40
"""The examples' pin placeholder (examples/callers/): ``init`` writes the release tag or ``--pin`` instead."""


def _pin(pin: str | None) -> str:
    """``@<sha> # vX.Y.Z`` for a SHA, ``@vX.Y.Z`` for the tag (zizmor wants the SHA: the comment says how)."""
    if pin is None:
        return f"{RELEASE_TAG} # pin the tag's full SHA: git ls-remote https://github.com/precisionbot/precisionbot"
    return f"{pin} # {RELEASE_TAG}"


EXAMPLE_IDS = ("ami-0123456789abcdef0", "subnet-0123456789abcdef0", "sg-0123456789abcdef0")
"""The docs' example ids, which ``init --runner ec2`` writes for the user to replace (``doctor`` names them)."""
EC2_KEYS = f"""\
  region: us-east-1
  instance_type: g6e.xlarge
  ami: {EXAMPLE_IDS[0]}      # an AMI id (not a name) with the GPU driver, in the region
  subnet: {EXAMPLE_IDS[1]}
  security_groups: [{EXAMPLE_IDS[2]}]
  instance_profile: precisionbot-runner   # gpu-read-baselines.json only
"""


def _runner_section(runner: str) -> str:
    if runner == "ec2":
        return f"""\
# One fresh EC2 instance per job (CHECKLIST.md, EC2).
runner:
  kind: ec2
{EC2_KEYS}"""
    commented = "".join(f"  # {line.strip()}\n" for line in EC2_KEYS.splitlines())
    return f"""\
# First week: a runner you already have, registered with the label below (CHECKLIST.md, first week).
runner:
  kind: pool
  labels: [self-hosted, precisionbot-gpu]
  # Then EC2, one fresh instance per job (CHECKLIST.md, EC2): kind: ec2, with the caller's runner: ec2, and
{commented}"""


def caller_text(kind: str, runner: str = "ec2", pin: str | None = ZERO_SHA) -> str:
    """``.github/workflows/precision.yml`` of an engine repository: examples/callers/<kind>.yml (a test holds the
    two equal), at ``pin`` (None = the release tag) and for ``runner`` (``pool`` or ``ec2``)."""
    runner_line = (
        "runner: ec2 # or pool: the config's runner.labels, no AWS launch"
        if runner == "ec2"
        else "runner: pool # the config's runner.labels; or ec2 (with precision-reap.yml beside this file)"
    )
    return f"""\
# precisionbot on {CALLER_TITLES[kind]}: copy to .github/workflows/precision.yml, with precision-pr.yml (and, for
# runner: ec2, precision-reap.yml) beside it. Set the pin to a release's full SHA (docs/github.md, Adopting it).
name: precision
on:
  workflow_run: # zizmor: ignore[dangerous-triggers] the gate reads nothing precision-pr produced (docs/github.md)
    workflows: [precision-pr]
    types: [completed]
  issue_comment: # zizmor: ignore[dangerous-triggers] parsed by the gate only, never interpolated
    types: [created]
  push:
    branches: [main]
  schedule:
    - cron: "17 4 * * 1" # weekly baseline refresh
  workflow_dispatch:
    inputs:
      suite: {{description: Suite from .github/precision.yml, default: pr}}
      models: {{description: Comma-separated model names (empty = all), default: ""}}
      pr: {{description: PR number to comment on (optional), default: ""}}
permissions: {{}}
cache-mode: none # nothing here restores or saves a cache: PR output never reaches one
jobs:
  precision:
    uses: {REUSABLE_WORKFLOW}@{_pin(pin)}
    permissions: {{contents: read, pull-requests: write, issues: read, id-token: write}} # the most its jobs ask for
    with:
      engine-kind: {kind}
      install: {ENGINE_KINDS[kind].install}
      {runner_line}
      app-client-id: ${{{{ vars.PRECISIONBOT_APP_CLIENT_ID }}}}
      model-cache: /opt/models # on the runner: the AMI's or the pool's volume
"""


def gate_caller_text(pin: str | None = ZERO_SHA) -> str:
    """``.github/workflows/precision-pr.yml``: examples/callers/precision-pr.yml at ``pin``."""
    return f"""\
# The PR half: copy to .github/workflows/precision-pr.yml beside precision.yml. It runs the PR's own copy of
# this file with no secrets and only the gate; precision.yml's workflow_run matches its name: keep the two in step.
name: precision-pr
on:
  pull_request:
    types: [opened, synchronize, reopened, labeled]
permissions: {{}}
cache-mode: none
concurrency:
  group: precision-pr-${{{{ github.event.pull_request.number }}}}
  cancel-in-progress: false
jobs:
  gate:
    uses: precisionbot/precisionbot/.github/workflows/precision-gate.yml@{_pin(pin)}
    permissions: {{contents: read, pull-requests: read}} # the changed files, for github.paths
"""


def reap_caller_text(pin: str | None = ZERO_SHA) -> str:
    """``.github/workflows/precision-reap.yml`` (``runner: ec2`` only): examples/callers/precision-reap.yml."""
    return f"""\
# The TTL from outside the instances (runner: ec2 only): copy to .github/workflows/precision-reap.yml.
name: precision-reap
on:
  schedule:
    - cron: "*/30 * * * *"
  workflow_dispatch:
permissions: {{}}
cache-mode: none
jobs:
  reap:
    uses: precisionbot/precisionbot/.github/workflows/precision-reap.yml@{_pin(pin)}
    permissions: {{contents: read, id-token: write}} # OIDC to the launch role
    with:
      app-client-id: ${{{{ vars.PRECISIONBOT_APP_CLIENT_ID }}}}
"""


def _statement(sid: str, action: str | list[str], resource: str | list[str], **extra: Any) -> dict[str, Any]:
    return {"Sid": sid, "Effect": "Allow", "Action": action, "Resource": resource, **extra}


def _policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def iam_policies(bucket: str, prefix: str, repo: str, pin: str | None = None) -> dict[str, dict[str, Any]]:
    """File name → policy document: the roles of docs/runners.md (*Permissions*) and docs/baselines.md. Account,
    region, subnet, security group and AMI are the docs' example values, to replace (CHECKLIST.md says which).
    The trust policy names the reusable workflows at the caller's pin (``pin``, else the release tag): that is
    the OIDC token's ``job_workflow_ref`` (docs/runners.md, *With the reusable workflow*)."""
    objects = f"arn:aws:s3:::{bucket}/{prefix}/*" if prefix else f"arn:aws:s3:::{bucket}/*"
    listing = _statement(
        "ListOnlyThePrefix",
        "s3:ListBucket",
        f"arn:aws:s3:::{bucket}",
        Condition={"StringLike": {"s3:prefix": [f"{prefix}/*" if prefix else "*"]}},
    )
    region, account = "us-east-1", "123456789012"
    ec2 = f"arn:aws:ec2:{region}:{account}"
    subject = f"repo:{repo}:environment:precisionbot:job_workflow_ref:{REUSABLE_WORKFLOW.rsplit('/', 1)[0]}"
    ref = pin or f"refs/tags/{RELEASE_TAG}"
    return {
        # The GPU job's instance profile: what PR code can use. Read-only; staging stores are local folders.
        "gpu-read-baselines.json": _policy(listing, _statement("ReadBaselines", "s3:GetObject", objects)),
        # The publish job's role: create-only writes (no delete, no overwrite: bucket-policy.json).
        "publish-baselines.json": _policy(listing, _statement("CreateBaselines", "s3:PutObject", objects)),
        "bucket-policy.json": _policy(
            {
                "Sid": "RefuseOverwrites",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:PutObject",
                "Resource": objects,
                "Condition": {"StringNotEquals": {"s3:if-none-match": "*"}},
            }
        ),
        "oidc-trust-policy.json": _policy(
            {
                "Effect": "Allow",
                "Principal": {"Federated": f"arn:aws:iam::{account}:oidc-provider/token.actions.githubusercontent.com"},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {"token.actions.githubusercontent.com:aud": "sts.amazonaws.com"},
                    "StringLike": {
                        "token.actions.githubusercontent.com:sub": [
                            f"{subject}/precision.yml@{ref}",
                            f"{subject}/precision-reap.yml@{ref}",
                        ]
                    },
                },
            }
        ),
        "launch-runners.json": _policy(
            _statement(
                "LaunchTaggedInstances",
                "ec2:RunInstances",
                [f"{ec2}:instance/*", f"{ec2}:volume/*"],
                Condition={
                    "Null": {
                        f"aws:RequestTag/precisionbot:{tag}": "false"
                        for tag in ("run-id", "label", "runner", "expires-at")
                    },
                    "StringEquals": {"ec2:MetadataHttpTokens": "required"},
                    "NumericLessThanEquals": {"ec2:MetadataHttpPutResponseHopLimit": "1"},
                    "StringEqualsIfExists": {"ec2:InstanceType": ["g6e.xlarge"]},
                },
            ),
            _statement(
                "LaunchFromTheseResources",
                "ec2:RunInstances",
                [
                    f"arn:aws:ec2:{region}::image/ami-0123456789abcdef0",
                    f"{ec2}:subnet/subnet-0123456789abcdef0",
                    f"{ec2}:security-group/sg-0123456789abcdef0",
                    f"{ec2}:network-interface/*",
                ],
            ),
            _statement(
                "TagOnlyWhileLaunching",
                "ec2:CreateTags",
                [f"{ec2}:instance/*", f"{ec2}:volume/*"],
                Condition={"StringEquals": {"ec2:CreateAction": "RunInstances"}},
            ),
            _statement(
                "TerminateOnlyPrecisionbotInstances",
                "ec2:TerminateInstances",
                f"{ec2}:instance/*",
                Condition={"Null": {"aws:ResourceTag/precisionbot:run-id": "false"}},
            ),
            _statement("FindInstancesAndTheAmiRootDevice", ["ec2:DescribeInstances", "ec2:DescribeImages"], "*"),
            _statement(
                "PassOnlyTheRunnerRole",
                "iam:PassRole",
                f"arn:aws:iam::{account}:role/precisionbot-runner",
                Condition={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            ),
        ),
    }


def policy_text(policy: dict[str, Any]) -> str:
    return json.dumps(policy, indent=2) + "\n"


def checklist_text(kind: str, store: str) -> str:
    """CHECKLIST.md: the first-week path (a runner the team has, one S3 prefix, no EC2), then the EC2 path."""
    return f"""\
# precisionbot set-up checklist

`precisionbot init --engine-kind {kind}` wrote `{CONFIG_PATH}`, the callers of precisionbot's reusable
workflows (`{CALLER_PATH}`, `{GATE_CALLER_PATH}`), this checklist and the IAM policies under `{IAM_DIR}/`.
After each step, `precisionbot doctor` (add `--online` where AWS credentials are at hand) says what is still
missing, one line per finding, with the fix.

## First week: a GPU machine you already have, one S3 prefix, no EC2

1. See the result first: `precisionbot demo` on any machine shows the verdict and the comment in a minute.
2. In `{CONFIG_PATH}`, set the model (`models[0].name`, `models[0].path`), the engine's `launch` and
   `install`, and the store (now `{store}`). Check it: `precisionbot config validate`.
3. The store: one S3 prefix (a bucket of its own, or a prefix in one you have). Attach
   `{IAM_DIR}/bucket-policy.json` to the bucket: it refuses overwrites, so a baseline once written stays.
4. The runner: register the GPU machine as a self-hosted runner of this repository with the label
   `precisionbot-gpu` (Settings → Actions → Runners → New self-hosted runner; `./config.sh --labels
   precisionbot-gpu`), in a runner group restricted to this workflow where your plan has runner groups. A
   persistent runner keeps what one PR leaves for the next: use it only on a private repository that takes no
   fork PRs, and move to EC2 (below) or to ephemeral runners (`--ephemeral`, registered again after each job)
   before you open it wider (docs/runners.md). Give the runner's user read-only credentials to the store, a
   role or user with `{IAM_DIR}/gpu-read-baselines.json` and nothing else. Put the model weights in
   `/opt/models` on the machine (the caller's `model-cache`), or delete that line to download public models
   on each run.
5. Publishing: create the environment `precisionbot` (Settings → Environments, deployment branches: the
   default branch only), a role with `{IAM_DIR}/publish-baselines.json` (create-only writes, no delete) that
   trusts `{IAM_DIR}/oidc-trust-policy.json` (replace the account id; set the repository's OIDC subject
   template first, docs/runners.md *AWS: OIDC*), and the variables `PRECISIONBOT_BASELINE_WRITER_ROLE_ARN`
   and `PRECISIONBOT_AWS_REGION`.
6. The first baseline: run the workflow on the default branch with the baseline suite (Actions → precision →
   Run workflow, suite `baseline`).
7. A first PR: add the label `precision`. The comment appears on the PR; `/precision rerun` runs it again.

## Then: one fresh EC2 instance per job

1. The launch role: `{IAM_DIR}/launch-runners.json`, trusting `{IAM_DIR}/oidc-trust-policy.json`. Replace the
   docs' example values: account `123456789012`, region `us-east-1`, the AMI, subnet and security group ids,
   the allowed instance types. Variable `PRECISIONBOT_LAUNCH_ROLE_ARN`.
2. The instance profile `precisionbot-runner`: `{IAM_DIR}/gpu-read-baselines.json` only (PR code can use it).
3. The network: a security group with no ingress and egress to HTTPS only (docs/runners.md, *Network*).
4. A token that registers runners (Administration: write): a GitHub App, variable `PRECISIONBOT_APP_CLIENT_ID`
   and secret `PRECISIONBOT_APP_PRIVATE_KEY`, or a fine-grained token as the secret `PRECISIONBOT_RUNNER_TOKEN`, in the
   `precisionbot` environment, never in the repository's secrets.
5. The AMI: an image id (`ami-...`, not a name) with the GPU driver, in the role's region.
6. In `{CONFIG_PATH}`: `runner.kind: ec2` and the `region`, `instance_type`, `ami`, `subnet`,
   `security_groups` and `instance_profile` keys (commented there); in `{CALLER_PATH}`: `runner-kind: ec2`.
7. Protect the default branch (pull requests required, an approving review, no force pushes): everything
   above trusts what is on it (docs/github.md, *Setup*).
8. `precisionbot doctor --online`: the bucket is writable under the prefix, the AMI and the instance type exist
   in the region.
"""
