"""Renders the instance user-data (``templates/runner-user-data.sh.j2``): TTL watchdog, the two accounts (the
runner's and the PR code's), the root-owned job-started hook and ``pr.sh`` outside the runner's folder, the
sudo rule with pinned arguments, ``/proc`` hidden and the metadata service closed to the PR user, the runner
(its JIT config in its environment, not its argv), power off."""

from __future__ import annotations

import re
import shlex
from importlib import resources

import jinja2

from precisionbot import envvars
from precisionbot.errors import ConfigError
from precisionbot.runners.records import (
    RunnerSpec,
    validate_job,
    validate_run_id,
    validate_runner_user,
    validate_workflow_ref,
)

TEMPLATE = "runner-user-data.sh.j2"
USER_DATA_LIMIT_BYTES = 16 * 1024
"""EC2 rejects user-data over 16 KiB (before base64)."""
COLLECT_DIR = "precision-results"
"""The folder of ``RUNNER_TEMP`` that ``pr.sh collect`` fills: the sudo rule names it, so the workflow's
collect step and upload-artifact must use ``$RUNNER_TEMP/precision-results`` too."""

_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]+$")


def render_user_data(spec: RunnerSpec, jit_config: str) -> str:
    """The boot script for one runner. Values reach the shell through ``shlex.quote``; the template never sees
    a token or AWS credentials because none is passed in."""
    if not _VERSION_RE.match(spec.runner_version):
        raise ConfigError(f"runner version {spec.runner_version!r} must look like 2.328.0")
    if spec.runner_sha256 is not None and not _SHA256_RE.match(spec.runner_sha256):
        raise ConfigError("runner sha256 must be 64 lowercase hex digits (from the actions/runner release page)")
    validate_runner_user(spec.runner_user)
    validate_runner_user(spec.pr_user)
    if spec.pr_user == spec.runner_user:
        raise ConfigError(
            f"the PR user and the runner user are both {spec.runner_user!r}: PR code must run as its own user, "
            "which cannot write the runner's files"
        )
    validate_workflow_ref(spec.workflow_ref)
    validate_job(spec.job)
    if spec.run_id is None:
        raise ConfigError("--run-id is required: the job-started hook accepts jobs of that run only")
    validate_run_id(spec.run_id)
    # These paths are also written into the sudo rule, whose own syntax (`,` `:` `=` `*`, backslashes) shell quoting
    # does not cover: a plain alphabet keeps the rule exactly what it says.
    for name, path in (
        ("hook dir", spec.hook_dir),
        ("pr root", spec.pr_root),
        ("etc dir", spec.etc_dir),
        ("runner dir", spec.runner_dir),
    ):
        if not _PATH_RE.match(path) or ".." in path:
            raise ConfigError(f"{name} {path[:80]!r} must be an absolute path of letters, digits, '.', '_', '-', '/'")
    if spec.ttl_minutes < 1:
        raise ConfigError(f"--ttl-minutes must be at least 1, got {spec.ttl_minutes}")
    source = (resources.files("precisionbot") / "templates" / TEMPLATE).read_text(encoding="utf-8")
    env = jinja2.Environment(
        autoescape=False,  # a shell script, not HTML: quoting is done by the shquote filter
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shquote"] = lambda value: shlex.quote(str(value))
    script = env.from_string(source).render(
        repo=spec.repo,
        name=spec.name,
        pr_user=spec.pr_user,
        hook_dir=spec.hook_dir,
        pr_root=spec.pr_root,
        etc_dir=spec.etc_dir,
        workflow_ref=spec.workflow_ref,
        run_id=spec.run_id,
        job=spec.job,
        ttl_minutes=spec.ttl_minutes,
        runner_dir=spec.runner_dir,
        runner_user=spec.runner_user,
        runner_version=spec.runner_version,
        runner_sha256=spec.runner_sha256,
        jit_config=jit_config,
        collect_dir=COLLECT_DIR,
        instance_type_env=envvars.INSTANCE_TYPE,
    )
    script = _without_comments(script)
    if len(script.encode()) > USER_DATA_LIMIT_BYTES:
        raise ConfigError(f"the rendered user-data is {len(script.encode())} bytes; EC2 allows 16 KiB")
    return script


def _without_comments(script: str) -> str:
    """The script without its comment lines (shebangs kept): the template's comments are its documentation,
    and EC2's 16 KiB would otherwise leave too little room for a JIT config (about 4 KiB). Every comment in
    the template, those inside its heredocs included, stands on a line of its own."""
    return "".join(
        line for line in script.splitlines(keepends=True) if line.startswith("#!") or not line.lstrip().startswith("#")
    )
