"""Buildkite's job environment, read by ``precisionbot.buildkite.env`` (pure)."""

from __future__ import annotations

import pytest

from precisionbot.buildkite.env import github_api_url, parse_env, repo_slug
from precisionbot.errors import ConfigError

HEAD = "1234567890abcdef1234567890abcdef12345678"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("git@github.com:vllm-project/vllm.git", ("github.com", "vllm-project/vllm")),
        ("https://github.com/vllm-project/vllm.git", ("github.com", "vllm-project/vllm")),
        ("https://github.com/vllm-project/vllm", ("github.com", "vllm-project/vllm")),
        ("ssh://git@github.com/vllm-project/vllm.git", ("github.com", "vllm-project/vllm")),
        ("git://GitHub.com/a/b.c.git", ("github.com", "a/b.c")),
        ("https://ghe.example.com:8443/team/engine.git", ("ghe.example.com", "team/engine")),
        ("https://github.com/only-owner", None),
        ("/srv/git/engine.git", None),
        ("https://github.com/a/b/c", None),
    ],
)
def test_repo_slug_reads_the_clone_addresses_buildkite_uses(url: str, expected: tuple[str, str] | None) -> None:
    assert repo_slug(url) == expected


def base(**extra: str) -> dict[str, str]:
    return {"BUILDKITE_REPO": "git@github.com:vllm-project/vllm.git", "BUILDKITE_COMMIT": HEAD, **extra}


def test_a_pull_request_build() -> None:
    env = parse_env(
        base(
            BUILDKITE_PULL_REQUEST="123",
            BUILDKITE_PULL_REQUEST_REPO="https://github.com/eve/vllm.git",
            BUILDKITE_BUILD_URL="https://buildkite.com/vllm/ci/builds/9",
            BUILDKITE_ORGANIZATION_SLUG="vllm",
            BUILDKITE_PIPELINE_SLUG="ci",
            BUILDKITE_AGENT_META_DATA_QUEUE="gpu-h200",
        )
    )
    assert (env.repository, env.pull_request, env.commit) == ("vllm-project/vllm", 123, HEAD)
    assert env.head_repository == "eve/vllm" and env.is_fork
    assert (env.organization, env.pipeline, env.queue) == ("vllm", "ci", "gpu-h200")
    assert env.no_pr_reason() is None


def test_a_branch_build_has_no_pr_and_says_so() -> None:
    env = parse_env(base(BUILDKITE_PULL_REQUEST="false", BUILDKITE_BRANCH="main"))
    assert env.pull_request is None and not env.is_fork
    assert env.no_pr_reason() == (
        "BUILDKITE_PULL_REQUEST=false: this is a build of branch main, not of a pull request, so there is no PR "
        f"to comment on; only the commit status of {HEAD} is set"
    )
    assert parse_env(base()).pull_request is None  # unset reads as false


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"BUILDKITE_COMMIT": HEAD}, "BUILDKITE_REPO is not set"),
        (base(BUILDKITE_REPO="/srv/engine"), "is not a git clone address"),
        (base(BUILDKITE_COMMIT="HEAD"), "create the build with the commit itself"),
        (base(BUILDKITE_COMMIT=HEAD.upper()), "not a full commit id"),
        (base(BUILDKITE_PULL_REQUEST="٧"), "neither 'false' nor a PR number"),
        (base(BUILDKITE_PULL_REQUEST="0"), "neither 'false' nor a PR number"),
    ],
)
def test_bad_variables_name_themselves(env: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        parse_env(env)


def test_the_github_api_is_given_for_an_enterprise_host() -> None:
    assert github_api_url("github.com", None) == "https://api.github.com"
    assert github_api_url("ghe.example.com", "https://ghe.example.com/api/v3/") == "https://ghe.example.com/api/v3"
    with pytest.raises(ConfigError, match="set GITHUB_API_URL to its REST API"):
        github_api_url("ghe.example.com", None)
