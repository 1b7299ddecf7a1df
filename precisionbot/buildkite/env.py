"""The Buildkite job environment a precisionbot step reads (Buildkite's documented ``BUILDKITE_*`` variables),
reduced to what the GitHub side needs. Pure: the caller passes the mapping (``os.environ``).

``BUILDKITE_PULL_REQUEST`` is ``"false"`` on a build of a branch (a push, the nightly, a manual build) and the
PR number on a pull-request build; ``BUILDKITE_REPO`` is the clone address of the repository the pipeline
builds (the PR's base), ``BUILDKITE_PULL_REQUEST_REPO`` the head's (a fork's, for a fork PR).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from precisionbot.errors import ConfigError
from precisionbot.untrusted import FULL_SHA

_REPO_URL = re.compile(
    r"""^(?:
        (?:https?|git|ssh)://(?:[^@/]+@)?(?P<host>[^/:]+)(?::\d+)?/   # https://github.com/, ssh://git@host:22/
      | [^@/:]+@(?P<scp_host>[^:/]+):                                 # git@github.com: (scp-like)
    )
    (?P<slug>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?$""",
    re.VERBOSE,
)


def repo_slug(url: str) -> tuple[str, str] | None:
    """``(host, "owner/name")`` of a clone address (``git@github.com:vllm-project/vllm.git``,
    ``https://github.com/vllm-project/vllm.git``, ``ssh://git@github.com/o/r``); None when it is not one."""
    match = _REPO_URL.match(url.strip())
    if match is None:
        return None
    return (match["host"] or match["scp_host"]).lower(), match["slug"]


@dataclass(frozen=True)
class BuildkiteEnv:
    """One Buildkite job's facts, as Buildkite set them."""

    host: str
    """The git host of ``BUILDKITE_REPO`` (``github.com``, or a GitHub Enterprise host)."""
    repository: str
    """``owner/name`` of the repository the pipeline builds: where the comment and the status go."""
    commit: str
    """``BUILDKITE_COMMIT``: the full commit the build checked out, the one the status is set on."""
    pull_request: int | None
    """``BUILDKITE_PULL_REQUEST``: the PR number, None on a build of a branch (``"false"``)."""
    head_repository: str | None = None
    """``owner/name`` of ``BUILDKITE_PULL_REQUEST_REPO`` (the PR's head; a fork for a fork PR)."""
    branch: str | None = None
    build_url: str | None = None
    """``BUILDKITE_BUILD_URL``: the build's page, linked from the comment and the status."""
    organization: str | None = None
    pipeline: str | None = None
    queue: str | None = None
    """``BUILDKITE_AGENT_META_DATA_QUEUE``: the queue of the agent this step runs on."""

    @property
    def is_fork(self) -> bool:
        return self.pull_request is not None and self.head_repository not in (None, self.repository)

    def no_pr_reason(self) -> str | None:
        """Why this build has no PR to comment on (None: it has one)."""
        if self.pull_request is not None:
            return None
        where = f" of branch {self.branch}" if self.branch else ""
        return (
            f"BUILDKITE_PULL_REQUEST=false: this is a build{where}, not of a pull request, so there is no PR to "
            f"comment on; only the commit status of {self.commit} is set"
        )


def parse_env(env: Mapping[str, str]) -> BuildkiteEnv:
    """The job's facts; a missing or malformed variable is a ``ConfigError`` naming it and the fix."""

    def get(name: str) -> str | None:
        return env.get(name) or None

    repo_url = get("BUILDKITE_REPO")
    if repo_url is None:
        raise ConfigError("BUILDKITE_REPO is not set: run this as a step of a Buildkite build (or export it)")
    parsed = repo_slug(repo_url)
    if parsed is None:
        raise ConfigError(
            f"BUILDKITE_REPO={repo_url[:120]!r} is not a git clone address of the form "
            "git@github.com:OWNER/NAME.git or https://github.com/OWNER/NAME.git"
        )
    host, repository = parsed
    commit = get("BUILDKITE_COMMIT") or ""
    if not FULL_SHA.fullmatch(commit):
        # A build created with commit "HEAD" is resolved by the agent at checkout; the status needs the commit.
        raise ConfigError(
            f"BUILDKITE_COMMIT={commit[:60]!r} is not a full commit id (40 hex digits): create the build with "
            "the commit itself, not HEAD or a branch name"
        )
    pr_text = get("BUILDKITE_PULL_REQUEST") or "false"
    if pr_text == "false":
        pull_request = None
    elif pr_text.isascii() and pr_text.isdigit() and int(pr_text) > 0:
        pull_request = int(pr_text)
    else:
        raise ConfigError(f"BUILDKITE_PULL_REQUEST={pr_text[:40]!r} is neither 'false' nor a PR number")
    head_url = get("BUILDKITE_PULL_REQUEST_REPO")
    head = repo_slug(head_url) if head_url else None
    return BuildkiteEnv(
        host=host,
        repository=repository,
        commit=commit,
        pull_request=pull_request,
        head_repository=head[1] if head else None,
        branch=get("BUILDKITE_BRANCH"),
        build_url=get("BUILDKITE_BUILD_URL"),
        organization=get("BUILDKITE_ORGANIZATION_SLUG"),
        pipeline=get("BUILDKITE_PIPELINE_SLUG"),
        queue=get("BUILDKITE_AGENT_META_DATA_QUEUE"),
    )


def github_api_url(host: str, explicit: str | None) -> str:
    """The REST API of the repository's host: ``GITHUB_API_URL`` when set, ``api.github.com`` for github.com;
    a GitHub Enterprise host must be given (its API lives at ``https://HOST/api/v3``, but we do not guess)."""
    if explicit:
        return explicit.rstrip("/")
    if host == "github.com":
        return "https://api.github.com"
    raise ConfigError(
        f"BUILDKITE_REPO is on {host}, not github.com: set GITHUB_API_URL to its REST API (https://{host}/api/v3)"
    )
