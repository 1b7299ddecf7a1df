"""The GitHub side of the runner lifecycle: a narrow ``RunnerRegistry`` protocol and its PyGithub adapter.

PyGithub 2.x has no repository-level call for JIT configs (only the organisation one), so all three calls go
through the public ``Github.requester``, which keeps PyGithub's auth, base URL (``GITHUB_API_URL``: GitHub
Enterprise and local fakes) and retries. Listing paginates by ``page`` rather than ``Link`` headers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from precisionbot import envvars
from precisionbot.errors import GitHubError
from precisionbot.runners.records import JitConfig, Runner

if TYPE_CHECKING:
    from github import Github

_PER_PAGE = 100
_MAX_PAGES = 50
"""5,000 runners is far beyond any repository; a bound keeps a misbehaving server from looping us forever."""


class RunnerRegistry(Protocol):
    """What the lifecycle needs from GitHub: register a one-job runner, list runners, delete one."""

    def create_jit_config(
        self, repo: str, name: str, labels: Sequence[str], runner_group_id: int, work_folder: str = "_work"
    ) -> JitConfig: ...

    def list_runners(self, repo: str) -> list[Runner]: ...

    def delete_runner(self, repo: str, runner_id: int) -> bool:
        """Delete a registration; ``False`` if it was already gone."""
        ...


class GitHubRunnerRegistry:
    """``RunnerRegistry`` over PyGithub's requester."""

    def __init__(self, gh: Github) -> None:
        self._requester = gh.requester

    @classmethod
    def from_token(cls, token: str, api_url: str, *, throttle: bool = True) -> GitHubRunnerRegistry:
        """``throttle=False`` drops PyGithub's pause between requests (0.25 s, 1 s between writes), which
        GitHub asks integrations to keep; tests against a local fake turn it off."""
        from github import Auth, Github, GithubRetry
        from urllib3.util import Retry

        # POST is not retried: a retried generate-jitconfig whose first attempt landed would fail with 409
        # (the runner name exists) and hide the real outcome.
        retry = GithubRetry(total=3, allowed_methods=Retry.DEFAULT_ALLOWED_METHODS)
        if throttle:
            gh = Github(auth=Auth.Token(token), base_url=api_url.rstrip("/"), retry=retry, timeout=30)
        else:
            gh = Github(
                auth=Auth.Token(token),
                base_url=api_url.rstrip("/"),
                retry=retry,
                timeout=30,
                seconds_between_requests=None,
                seconds_between_writes=None,
            )
        return cls(gh)

    def create_jit_config(
        self, repo: str, name: str, labels: Sequence[str], runner_group_id: int, work_folder: str = "_work"
    ) -> JitConfig:
        body = {
            "name": name,
            "runner_group_id": runner_group_id,
            "labels": list(labels),
            "work_folder": work_folder,
        }
        with _github(f"create a just-in-time runner config for {repo}", repo):
            _, data = self._requester.requestJsonAndCheck(
                "POST", f"/repos/{repo}/actions/runners/generate-jitconfig", input=body
            )
        try:
            return JitConfig(runner=_runner(data["runner"]), encoded=str(data["encoded_jit_config"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise GitHubError(
                f"GitHub answered generate-jitconfig for {repo} without runner/encoded_jit_config"
            ) from exc

    def list_runners(self, repo: str) -> list[Runner]:
        runners: list[Runner] = []
        with _github(f"list the self-hosted runners of {repo}", repo):
            for page in range(1, _MAX_PAGES + 1):
                _, data = self._requester.requestJsonAndCheck(
                    "GET", f"/repos/{repo}/actions/runners", parameters={"per_page": _PER_PAGE, "page": page}
                )
                batch = (data or {}).get("runners", [])
                runners.extend(_runner(item) for item in batch)
                if len(batch) < _PER_PAGE:
                    break
        return runners

    def delete_runner(self, repo: str, runner_id: int) -> bool:
        from github import UnknownObjectException

        try:
            with _github(f"delete runner {runner_id} from {repo}", repo, reraise=(UnknownObjectException,)):
                self._requester.requestJsonAndCheck("DELETE", f"/repos/{repo}/actions/runners/{runner_id}")
        except UnknownObjectException:
            return False
        return True


def _runner(raw: Any) -> Runner:
    labels = tuple(str(item["name"]) if isinstance(item, dict) else str(item) for item in raw.get("labels", []))
    return Runner(
        id=int(raw["id"]),
        name=str(raw.get("name", "")),
        labels=labels,
        status=str(raw.get("status", "offline")),
        busy=bool(raw.get("busy", False)),
    )


@contextmanager
def _github(action: str, repo: str, reraise: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Translate PyGithub/requests failures into one-line ``GitHubError``s naming the fix."""
    from github import GithubException
    from requests import RequestException

    try:
        yield
    except reraise:
        raise
    except GithubException as exc:
        raise GitHubError(
            f"GitHub refused to {action}: HTTP {exc.status}{_detail(exc)} ({_hint(exc.status, repo)})"
        ) from exc
    except RequestException as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise GitHubError(f"cannot {action}: {first} (check GITHUB_API_URL and the network)") from exc


def _detail(exc: Any) -> str:
    data = exc.data
    message = data.get("message") if isinstance(data, dict) else None
    return f" {message}" if message else ""


def _hint(status: int, repo: str) -> str:
    if status == 401:
        return f"the token is missing, invalid or expired: set {envvars.GITHUB_TOKEN}"
    if status == 403:
        return (
            "the token needs repository administration: write (a GitHub App or fine-grained PAT); "
            "GITHUB_TOKEN cannot manage self-hosted runners"
        )
    if status == 404:
        return f"check that {repo} exists and the token can see it (administration permission)"
    if status == 409:
        return "a runner with this name already exists: use a fresh --label"
    if status == 422:
        return "check --label and the runner group id"
    return "GitHub may be having trouble: retry later"
