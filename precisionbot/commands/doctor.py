"""``precisionbot doctor [--dir .] [--online]``: is this repository set up right, before a GPU minute is spent?

Offline it reads the config (as every command would), the workflows under ``.github/workflows`` that use
precisionbot (each pinned to a full commit SHA or a release tag, never a branch), the secret and variable names
they read (the ones the docs name), and their trust boundaries (the job that runs PR code gets no write token,
no secret, no environment). ``--online`` asks AWS, with the credentials at hand, whether the bucket is reachable
and writable under the prefix, and whether the AMI and the instance type exist in the region; and GitHub whether
the runner group exists. A check without credentials is skipped with a note, never passed.

Each finding is one line naming the fix. Exit 0 clean, 1 findings, 3 a setup error (no such ``--dir``).
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from precisionbot import envvars
from precisionbot.commands.setup_files import CONFIG_PATH, EXAMPLE_IDS, PLACEHOLDER, SECRET_NAMES, VARIABLE_NAMES
from precisionbot.config import Config, RunnerConfig, load_config
from precisionbot.config.fields import did_you_mean
from precisionbot.errors import ConfigError, PrecisionbotError
from precisionbot.untrusted import FULL_SHA

WORKFLOWS_DIR = ".github/workflows"
PINNED_REF = re.compile(r"([\w.-]+)/precisionbot((?:/[\w./-]*)?)@([^\s#\"'`]+)")
"""A reference to precisionbot at a ref: ``uses: OWNER/precisionbot@REF``, its reusable workflow
``OWNER/precisionbot/.github/workflows/precision.yml@REF``, a pip ``git+https://github.com/OWNER/precisionbot@REF``."""
RELEASE_TAG = re.compile(r"v?[0-9]+(\.[0-9]+){1,3}([-+][0-9A-Za-z.-]+)?")
EXPRESSION_REF = re.compile(r"\$\{\{?\s*\w[\w.]*\s*\}?\}")
"""``${PRECISIONBOT_SHA}`` or ``${{ env.PRECISIONBOT_SHA }}``: the documented way to set the SHA once per file."""
NAME_REF = re.compile(r"\b(secrets|vars)\.([A-Za-z_][A-Za-z0-9_]*)")
PR_REFS = ("pull_request.head", "head_ref", "outputs.sha", "head.sha")
"""What a checkout's ``ref:`` names when it checks out the PR's code (the plan's pinned SHA is ``outputs.sha``)."""
PROBE_DIR = "doctor-probes"
"""Where the write probe goes under the store's prefix: no run's key (runs are ``<model>/<sig>/<date>/<id>/``
with a ``meta.json``), so listing and selection never see it."""


@dataclass
class Report:
    findings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def find(self, where: str, problem: str, fix: str) -> None:
        self.findings.append(f"{where}: {problem}; {fix}")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check a repository's precisionbot set-up: config, pins, secret names, trust boundaries (--online: AWS)",
        description="Offline: the config, precisionbot's pins in .github/workflows, the secret names the workflows "
        "read and their trust boundaries. --online (with credentials): the store's bucket reachable and writable "
        "under the prefix (one small probe object, which create-only policies allow), the AMI and instance type "
        "in the region, the runner group. Exit 0 clean, 1 findings, 3 setup error.",
    )
    p.add_argument("--dir", default=".", help="the repository's root (default: the current directory)")
    p.add_argument("--online", action="store_true", help="also ask AWS and GitHub (needs their credentials)")
    p.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        raise ConfigError(f"--dir {root} is not a directory; pass the repository's root")
    report = Report()
    config = check_config(root, report)
    for path, text, data in _workflows(root, report):
        where = str(path.relative_to(root))
        check_pins(where, text, data, report)
        check_names(where, text, report)
        check_trust(where, data, report)
    if args.online:
        if config is None:
            report.notes.append("online checks skipped: the config did not load")
        else:
            check_online(config, report)
    for line in report.findings:
        print(f"✗ {line}")
    for line in report.notes:
        print(f"- {line}")
    if report.findings:
        print(f"{len(report.findings)} finding(s)")
        return 1
    print("no findings" + ("" if args.online else " (offline checks; --online also asks AWS and GitHub)"))
    return 0


def check_config(root: Path, report: Report) -> Config | None:
    path = root / CONFIG_PATH
    if not path.is_file():
        report.find(CONFIG_PATH, "does not exist", "write one: precisionbot init --engine-kind KIND")
        return None
    try:
        config = load_config(path)
    except ConfigError as exc:
        report.findings.append(str(exc))
        return None
    _placeholders(CONFIG_PATH, path.read_text(encoding="utf-8"), report)
    if config.engine.kind != "builtin" and config.engine.launch is None and config.engine.url is None:
        report.find(CONFIG_PATH, "sets neither engine.launch nor engine.url", "add the engine's launch command")
    if not config.models:
        report.find(CONFIG_PATH, "configures no model", "add one under models (name, path, tp)")
    return config


def _placeholders(where: str, text: str, report: Report) -> None:
    """The values ``init`` could not know: its ``replace-with-...`` and the docs' example ids."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for marker in (PLACEHOLDER, *EXAMPLE_IDS):
            if marker in line:
                value = line[line.index(marker) :].split()[0].strip("\"'[],")
                report.find(f"{where}:{number}", f"still holds the placeholder {value!r}", "replace it with yours")


def _workflows(root: Path, report: Report) -> Iterator[tuple[Path, str, Mapping[str, Any]]]:
    folder = root / WORKFLOWS_DIR
    files = sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")]) if folder.is_dir() else []
    used = False
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        if not PINNED_REF.search(text) and "precisionbot" not in text:
            continue
        try:
            # Every scalar a string, as GitHub reads them: a 40-zero SHA stays a SHA (not the integer 0), `on`
            # stays `on` (YAML 1.1's safe loader reads it as True).
            data = yaml.load(text, Loader=yaml.BaseLoader)
        except yaml.YAMLError as exc:
            report.find(str(path.relative_to(root)), f"is not valid YAML ({str(exc).splitlines()[0]})", "fix it")
            continue
        if isinstance(data, Mapping):
            used = True
            yield path, text, data
    if not used:
        report.find(WORKFLOWS_DIR, "has no workflow that uses precisionbot", "write one: precisionbot init")


def ref_problem(ref: str) -> str | None:
    """Why ``ref`` does not pin a release (None when it does): a full commit SHA, a release tag, or the
    documented ``${PRECISIONBOT_SHA}`` set once per file."""
    if FULL_SHA.fullmatch(ref):
        return "is the all-zero placeholder SHA" if set(ref) == {"0"} else None
    if RELEASE_TAG.fullmatch(ref) or EXPRESSION_REF.fullmatch(ref):
        return None
    return "is a branch or an unknown ref, which moves under you"


def check_pins(where: str, text: str, data: Mapping[str, Any], report: Report) -> None:
    fix = "pin a release tag (vX.Y.Z) or, stronger, that tag's full 40-hex commit SHA"
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for match in PINNED_REF.finditer(line):
            problem = ref_problem(match.group(3))
            if problem is not None:
                report.find(f"{where}:{number}", f"precisionbot's ref {match.group(3)!r} {problem}", fix)
    for job_name, job in _jobs(data):
        for step in _steps(job):
            w = step.get("with")
            repo = str(w.get("repository", "")) if isinstance(w, Mapping) else ""
            if str(step.get("uses", "")).startswith("actions/checkout") and repo.endswith("/precisionbot"):
                ref = str(w.get("ref", "")) if isinstance(w, Mapping) else ""
                problem = ref_problem(ref) if ref else "is not set (the default branch)"
                if problem is not None:
                    report.find(f"{where}: job {job_name}", f"checks out precisionbot at a ref that {problem}", fix)


def check_names(where: str, text: str, report: Report) -> None:
    """Every ``secrets.X`` / ``vars.X`` with a precisionbot name is one the docs name, of the right kind."""
    seen: set[tuple[str, str]] = set()
    documented = {"secrets": SECRET_NAMES, "vars": VARIABLE_NAMES}
    for kind, name in NAME_REF.findall(text):
        if (kind, name) in seen or name in documented[kind]:
            continue
        seen.add((kind, name))
        other = "vars" if kind == "secrets" else "secrets"
        if name in documented[other]:
            what = "a variable" if other == "vars" else "a secret"
            report.find(where, f"reads {kind}.{name}, which the docs define as {what}", f"read {other}.{name}")
        elif name.upper().startswith("PRECISIONBOT"):
            close = did_you_mean(name, [*SECRET_NAMES, *VARIABLE_NAMES])
            names = ", ".join(documented[kind])
            report.find(where, f"reads {kind}.{name}, a name the docs do not define", close or f"use one of {names}")


def _jobs(data: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    jobs = data.get("jobs")
    if isinstance(jobs, Mapping):
        for name, job in jobs.items():
            if isinstance(job, Mapping):
                yield str(name), job


def _steps(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    steps = job.get("steps")
    return [s for s in steps if isinstance(s, Mapping)] if isinstance(steps, list) else []


def _triggers(data: Mapping[str, Any]) -> set[str]:
    on = data.get("on")
    if isinstance(on, str):
        return {on}
    return {str(t) for t in on} if isinstance(on, (list, Mapping)) else set()


def runs_pr_code(job: Mapping[str, Any], triggers: set[str]) -> bool:
    """A job that checks out the PR's code: a checkout of a PR ref (or the plan's pinned SHA), or any checkout
    without a ref in a workflow that ``pull_request`` events start (that checks out the PR's merge)."""
    for step in _steps(job):
        if not str(step.get("uses", "")).startswith("actions/checkout"):
            continue
        w = step.get("with")
        ref = str(w.get("ref", "")) if isinstance(w, Mapping) else ""
        if isinstance(w, Mapping) and str(w.get("repository", "")).endswith("/precisionbot"):
            continue
        if any(p in ref for p in PR_REFS) or (not ref and triggers & {"pull_request", "pull_request_target"}):
            return True
    return False


def _strings(value: Any) -> Iterator[str]:
    """Every key and scalar under ``value`` (a workflow as BaseLoader reads it: str, list, dict)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    else:
        yield str(value)


def _writes(permissions: Any) -> list[str]:
    if isinstance(permissions, str):
        return ["write-all"] if permissions == "write-all" else []
    if isinstance(permissions, Mapping):
        return sorted(str(k) for k, v in permissions.items() if str(v) == "write")
    return []


def check_trust(where: str, data: Mapping[str, Any], report: Report) -> None:
    """The job that runs PR code gets a read-only token and no secret; nobody passes every secret along."""
    triggers = _triggers(data)
    top = data.get("permissions")
    for name, job in _jobs(data):
        at = f"{where}: job {name}"
        if job.get("secrets") == "inherit":
            report.find(at, "passes every secret (secrets: inherit)", "pass only the secrets the workflow names")
        if "pull_request_target" in triggers and runs_pr_code(job, triggers):
            report.find(at, "checks out PR code on pull_request_target (secrets, write token)", "use pull_request")
        if not runs_pr_code(job, triggers):
            continue
        permissions = job.get("permissions", top)
        if permissions is None:
            report.find(at, "runs PR code with the default token", "give it permissions: {contents: read}")
        for scope in _writes(permissions):
            report.find(at, f"runs PR code with {scope}: write", "give this job contents: read only")
        if "environment" in job:
            report.find(at, "runs PR code inside an environment (its secrets)", "remove environment: from this job")
        text = " ".join(_strings(job))
        for secret in sorted({n for k, n in NAME_REF.findall(text) if k == "secrets" and n != "GITHUB_TOKEN"}):
            report.find(at, f"runs PR code with secrets.{secret}", "read it only in a job that runs no PR code")


def check_online(config: Config, report: Report) -> None:
    """The bucket, the AMI and instance type, the runner group: each skipped with a note without credentials."""
    try:
        import boto3
    except ImportError:
        report.notes.append("AWS checks skipped: boto3 is not installed (pip install boto3)")
        return
    if boto3.Session().get_credentials() is None:
        report.notes.append("AWS checks skipped: no AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID or OIDC)")
    else:
        check_store(config.baselines.store, report)
        runners = _ec2_runners(config)
        for runner in runners:
            check_ec2(runner, report)
        if not runners:
            report.notes.append("EC2 checks: runner.kind is pool, so there is no AMI or instance type to check")
    check_runner_group(config, report)


def check_store(uri: str, report: Report) -> None:
    from precisionbot.baselines.store import open_store

    if not uri.startswith("s3://"):
        report.notes.append(f"baselines.store {uri} is a local directory: nothing to ask AWS")
        return
    key = f"{PROBE_DIR}/{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(4)}.txt"
    fix = (
        "create the bucket or fix baselines.store; the publish role needs s3:PutObject and s3:ListBucket under "
        "the prefix (.github/precisionbot/iam/publish-baselines.json)"
    )
    try:
        store = open_store(uri)
        store.list_keys("")
    except PrecisionbotError as exc:
        report.find("baselines.store", f"{uri} is not reachable ({exc})", fix)
        return
    try:
        store.put_bytes(key, b"precisionbot doctor: write probe\n")
    except PrecisionbotError as exc:
        report.find("baselines.store", f"{uri} is readable but not writable with these credentials ({exc})", fix)
        return
    report.notes.append(
        f"baselines.store {uri}: listed it and wrote the probe {key} under the prefix (a create-only write, "
        "which the publish policy allows; it has no delete, so the probe stays)"
    )


def _ec2_runners(config: Config) -> list[RunnerConfig]:
    runners = [config.runner, *(m.runner for m in config.models if m.runner is not None)]
    unique = {(r.region, r.instance_type, r.ami): r for r in runners if r.kind == "ec2"}
    if not unique:
        return []
    return list(unique.values())


def check_ec2(runner: RunnerConfig, report: Report) -> None:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    region = runner.region or boto3.Session().region_name
    if not region:
        report.notes.append("EC2 checks skipped: no runner.region and no AWS_DEFAULT_REGION")
        return
    ec2 = boto3.client("ec2", region_name=region)
    try:
        offered = ec2.describe_instance_type_offerings(
            LocationType="region", Filters=[{"Name": "instance-type", "Values": [runner.instance_type]}]
        )["InstanceTypeOfferings"]
        if not offered:
            report.find(
                "runner.instance_type",
                f"{runner.instance_type} is not offered in {region}",
                "pick a type the region offers (aws ec2 describe-instance-type-offerings) or another region",
            )
        if runner.ami is None:
            report.find("runner.ami", "is not set (runner.kind is ec2)", "set the AMI id of a GPU image in the region")
        elif not ec2.describe_images(ImageIds=[runner.ami]).get("Images"):
            report.find("runner.ami", f"{runner.ami} does not exist in {region}", "copy the AMI there or fix the id")
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code.startswith("InvalidAMIID"):
            report.find("runner.ami", f"{runner.ami} does not exist in {region} ({code})", "fix the AMI id or region")
        else:
            report.find(f"runner in {region}", f"AWS refused the EC2 checks ({code})", "allow ec2:Describe* for them")
    except BotoCoreError as exc:
        report.find(f"runner in {region}", f"EC2 cannot be reached ({exc})", "check the region and the network")


def check_runner_group(config: Config, report: Report) -> None:
    group = config.runner.runner_group_id
    if config.runner.kind != "ec2":
        report.notes.append("runner group: runner.kind is pool (the runner's own registration picks its group)")
        return
    if group == 1:
        report.notes.append("runner group: the default group (1), nothing to ask GitHub")
        return
    token = os.environ.get(envvars.GITHUB_TOKEN) or os.environ.get("GITHUB_TOKEN")
    repo = os.environ.get("GITHUB_REPOSITORY")
    if not token or not repo:
        report.notes.append(f"runner group {group} skipped: set {envvars.GITHUB_TOKEN} and GITHUB_REPOSITORY")
        return
    from github import Auth, Github, GithubException

    owner = repo.split("/", 1)[0]
    api = Github(auth=Auth.Token(token), base_url=os.environ.get("GITHUB_API_URL") or "https://api.github.com")
    try:
        api.requester.requestJsonAndCheck("GET", f"/orgs/{owner}/actions/runner-groups/{group}")
    except GithubException as exc:
        report.find(
            "runner.runner_group_id",
            f"runner group {group} of {owner} cannot be read (HTTP {exc.status})",
            "create it (Settings → Actions → Runner groups) or fix the id; the token needs organization "
            "Self-hosted runners: read",
        )
