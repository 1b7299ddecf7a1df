"""``BuildkiteApi``: the one Buildkite REST call precisionbot makes, creating a build, over httpx.

``POST {api_url}/organizations/{org}/pipelines/{pipeline}/builds`` with a Bearer token that needs the
``write_builds`` scope and nothing else. The POST is never retried: an answer lost on the way back after
Buildkite created the build would start a second build (a second GPU run) on the retry. A refused call is one
``BuildkiteError`` naming the organization, the pipeline and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from precisionbot import envvars
from precisionbot.errors import PrecisionbotError

DEFAULT_API_URL = "https://api.buildkite.com/v2"


class BuildkiteError(PrecisionbotError):
    """A Buildkite API call was refused or failed."""


@dataclass(frozen=True)
class BuildRequest:
    """The fields of Buildkite's "create a build" body that a PR rerun sets."""

    commit: str
    branch: str
    message: str
    env: Mapping[str, str] = field(default_factory=dict)
    pull_request_id: int | None = None
    pull_request_base_branch: str | None = None
    pull_request_repository: str | None = None
    """The head repository's clone address (a fork's for a fork PR)."""

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "commit": self.commit,
            "branch": self.branch,
            "message": self.message,
            "env": dict(self.env),
        }
        optional = {
            "pull_request_id": self.pull_request_id,
            "pull_request_base_branch": self.pull_request_base_branch,
            "pull_request_repository": self.pull_request_repository,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out


@dataclass(frozen=True)
class Build:
    number: int
    web_url: str
    """The build's page (``https://buildkite.com/<org>/<pipeline>/builds/<number>``)."""
    commit: str


class BuildkiteApi(Protocol):
    """One pipeline of one organization. Raises ``BuildkiteError`` on failure."""

    def create_build(self, request: BuildRequest) -> Build: ...


class RestBuildkite:
    """The real adapter. ``transport`` is httpx's, for tests that need no socket (ours use a local server)."""

    def __init__(
        self,
        token: str,
        organization: str,
        pipeline: str,
        api_url: str = DEFAULT_API_URL,
        *,
        timeout_s: float = 30.0,
        transport: Any = None,
    ) -> None:
        self._token = token
        self.organization = organization
        self.pipeline = pipeline
        self._api_url = api_url.rstrip("/")
        self._timeout_s = timeout_s
        self._transport = transport

    @property
    def where(self) -> str:
        return f"{self.organization}/{self.pipeline}"

    def create_build(self, request: BuildRequest) -> Build:
        url = f"{self._api_url}/organizations/{self.organization}/pipelines/{self.pipeline}/builds"
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        try:
            with httpx.Client(timeout=self._timeout_s, transport=self._transport) as client:
                answer = client.post(url, json=request.body(), headers=headers)
        except httpx.HTTPError as exc:
            raise BuildkiteError(
                f"Buildkite POST builds of {self.where} failed: {type(exc).__name__}: {str(exc)[:200]}; check "
                f"buildkite.api_url ({self._api_url}) and retry (not retried here: a repeated POST can start two "
                "builds)"
            ) from exc
        if answer.status_code != 201:
            raise BuildkiteError(self._refusal(answer.status_code, _message(answer)))
        return _build(answer, self.where)

    def _refusal(self, status: int, message: str) -> str:
        said = f"HTTP {status}" + (f" {message}" if message else "")
        hint = {
            401: f"the token was not accepted: set {envvars.BUILDKITE_TOKEN} to a Buildkite API access token "
            "(Personal settings, API Access Tokens) with the write_builds scope",
            403: f"the token may not create builds here: give it the write_builds scope and access to the "
            f"organization {self.organization!r}",
            404: f"no pipeline {self.where} that this token can see: check buildkite.organization and "
            "buildkite.pipeline (the slugs in https://buildkite.com/<organization>/<pipeline>) and the token's "
            "organization access",
            422: "Buildkite would not create this build: check that the commit exists in the pipeline's "
            "repository and the pipeline's branch filters allow the branch",
        }.get(status, "see Buildkite's message")
        return f"Buildkite refused creating a build of {self.where}: {said}; {hint}"


def _message(answer: Any) -> str:
    try:
        data = answer.json()
    except ValueError:
        return ""
    message = data.get("message") if isinstance(data, dict) else None
    return str(message)[:200] if message else ""


def _build(answer: Any, where: str) -> Build:
    try:
        data = answer.json()
        return Build(number=int(data["number"]), web_url=str(data["web_url"]), commit=str(data["commit"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise BuildkiteError(
            f"Buildkite created a build of {where} but its answer has no number, web_url and commit ({exc}); "
            "look for it on the pipeline's page before asking again"
        ) from exc
