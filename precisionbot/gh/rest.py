"""``RestGitHub``: the ``GitHubApi`` Protocol over PyGithub. The only module that imports ``github``.

PyGithub's ``GithubRetry`` retries rate-limit answers (403 with a rate-limit body or ``Retry-After``, 429) and
5xx, for POSTs too; so a POST that reached GitHub but lost its answer can run twice. Callers make creation
idempotent (``sticky.upsert_comment`` looks for its marker first and removes duplicates).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any, TypeVar

from precisionbot import envvars
from precisionbot.errors import GitHubError
from precisionbot.gh.api import Comment, IssueEvent, PullInfo, Review, effective_permission

T = TypeVar("T")

ACTIONS_BOT = "github-actions[bot]"
"""The login behind Actions' ``GITHUB_TOKEN``, which may not call ``GET /user``."""


def _guard(call: str, fn: Callable[[], T]) -> T:
    """Run one GitHub call; turn PyGithub/requests failures into one ``GitHubError`` naming the call."""
    import github
    import requests

    try:
        return fn()
    except github.GithubException as exc:
        message = exc.data.get("message") if isinstance(exc.data, dict) else exc.data
        hint = {
            401: f"check the token (GITHUB_TOKEN / {envvars.GITHUB_TOKEN})",
            403: "the token lacks a permission this call needs, or the rate limit is spent",
            404: "check the repository, number and the token's access",
        }.get(exc.status, "see GitHub's message")
        raise GitHubError(f"GitHub {call} failed: HTTP {exc.status} {message or ''}".rstrip() + f"; {hint}") from exc
    except requests.RequestException as exc:
        raise GitHubError(f"GitHub {call} failed after retries: {exc}; check GITHUB_API_URL and retry later") from exc


def _paged(call: str, fn: Callable[[], Any]) -> Iterator[Any]:
    """Items of a PyGithub paginated list, each page fetch guarded (pages are fetched lazily, mid-iteration)."""
    pages = iter(_guard(call, fn))
    while True:
        item = _guard(call, lambda: next(pages, None))
        if item is None:
            return
        yield item


class RestGitHub:
    """One repository through PyGithub. Build it with :func:`connect`."""

    def __init__(self, client: Any, repo_name: str, login_fallback: str = ACTIONS_BOT) -> None:
        self._client = client
        self._repo_name = repo_name
        self._login_fallback = login_fallback
        self._repo_obj: Any = None
        self._login: str | None = None

    @property
    def _repo(self) -> Any:
        if self._repo_obj is None:
            self._repo_obj = _guard(f"GET repos/{self._repo_name}", lambda: self._client.get_repo(self._repo_name))
        return self._repo_obj

    def _url(self, path: str) -> str:
        return f"/repos/{self._repo_name}{path}"

    def _get(self, call: str, path: str) -> Any:
        return _guard(call, lambda: self._client.requester.requestJsonAndCheck("GET", self._url(path))[1])

    def bot_login(self) -> str:
        if self._login is None:
            import github

            def fetch() -> str:
                try:
                    return str(self._client.get_user().login)
                except github.GithubException as exc:
                    # Actions' GITHUB_TOKEN is an installation token: GET /user answers 403 "Resource not
                    # accessible by integration"; its comments are authored by github-actions[bot].
                    if exc.status == 403:
                        return self._login_fallback
                    raise

            self._login = _guard("GET user", fetch)
        return self._login

    def pull(self, number: int) -> PullInfo:
        return _pull_info(self._get(f"GET pulls/{number}", f"/pulls/{number}"))

    def changed_files(self, number: int) -> Iterator[str]:
        pull = _guard(f"GET pulls/{number}", lambda: self._repo.get_pull(number))
        for item in _paged(f"GET pulls/{number}/files", pull.get_files):
            yield str(item.filename)

    def commit_date(self, sha: str) -> datetime:
        data = self._get(f"GET commits/{sha}", f"/commits/{sha}")
        stamp = str(data["commit"]["committer"]["date"])
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc)

    def branch_head(self, branch: str) -> str:
        data = self._get(f"GET branches/{branch}", f"/branches/{branch}")
        return str(data["commit"]["sha"])

    def compare(self, base: str, head: str) -> str:
        # per_page=1: only the status is read; the commit list it also pages through can run to 250 entries.
        path = f"/compare/{urllib.parse.quote(base, safe='')}...{urllib.parse.quote(head, safe='')}?per_page=1"
        return str(self._get(f"GET compare/{base}...{head}", path)["status"])

    def open_pulls(self, head: str) -> list[PullInfo]:

        query = urllib.parse.urlencode({"state": "open", "head": head, "per_page": 100})
        data = self._get(f"GET pulls?head={head}", f"/pulls?{query}")
        return [_pull_info(item) for item in data or ()]

    def issue_events(self, number: int) -> Iterator[IssueEvent]:
        # Plain JSON pages: PyGithub's IssueEvent objects fetch each event again for any field it omits
        # (``label`` on most kinds), one request per event.
        page = 1
        while True:
            call = f"GET issues/{number}/events page {page}"
            data = self._get(call, f"/issues/{number}/events?per_page=100&page={page}") or []
            for item in data:
                label = item.get("label") or {}
                yield IssueEvent(
                    event=str(item["event"]),
                    actor=str((item.get("actor") or {}).get("login", "")),
                    created_at=datetime.fromisoformat(str(item["created_at"]).replace("Z", "+00:00")),
                    label=str(label["name"]) if "name" in label else None,
                )
            if len(data) < 100:
                return
            page += 1

    def reviews(self, number: int) -> Iterator[Review]:
        page = 1
        while True:
            call = f"GET pulls/{number}/reviews page {page}"
            data = self._get(call, f"/pulls/{number}/reviews?per_page=100&page={page}") or []
            for item in data:
                yield Review(
                    user=str((item.get("user") or {}).get("login", "")),
                    state=str(item.get("state", "")).upper(),
                    commit_id=str(item.get("commit_id") or ""),
                )
            if len(data) < 100:
                return
            page += 1

    def permission(self, user: str) -> str:

        path = f"/collaborators/{urllib.parse.quote(user, safe='')}/permission"
        data = self._get(f"GET collaborators/{user}/permission", path)
        return effective_permission(str(data.get("permission", "none")), data.get("role_name"))

    def react(self, comment_id: int, content: str) -> None:
        _guard(
            f"POST issues/comments/{comment_id}/reactions",
            lambda: self._client.requester.requestJsonAndCheck(
                "POST", self._url(f"/issues/comments/{comment_id}/reactions"), input={"content": content}
            ),
        )

    def comments(self, number: int) -> Iterator[Comment]:
        issue = _guard(f"GET issues/{number}", lambda: self._repo.get_issue(number))
        for item in _paged(f"GET issues/{number}/comments", issue.get_comments):
            yield _comment(item)

    def create_comment(self, number: int, body: str) -> Comment:
        issue = _guard(f"GET issues/{number}", lambda: self._repo.get_issue(number))
        return _comment(_guard(f"POST issues/{number}/comments", lambda: issue.create_comment(body)))

    def update_comment(self, comment_id: int, body: str) -> Comment:
        call = f"PATCH issues/comments/{comment_id}"
        _, data = _guard(
            call,
            lambda: self._client.requester.requestJsonAndCheck(
                "PATCH", self._url(f"/issues/comments/{comment_id}"), input={"body": body}
            ),
        )
        return _comment_from_json(data)

    def create_status(self, sha: str, state: str, description: str, context: str, target_url: str | None) -> None:
        # GitHub caps the description at 140 characters (422 beyond it).
        body = {"state": state, "description": description[:140], "context": context}
        if target_url:
            body["target_url"] = target_url
        _guard(
            f"POST statuses/{sha}",
            lambda: self._client.requester.requestJsonAndCheck("POST", self._url(f"/statuses/{sha}"), input=body),
        )

    def delete_comment(self, comment_id: int) -> None:
        _guard(
            f"DELETE issues/comments/{comment_id}",
            lambda: self._client.requester.requestJsonAndCheck("DELETE", self._url(f"/issues/comments/{comment_id}")),
        )


def _pull_info(data: dict[str, Any]) -> PullInfo:
    head_repo = (data.get("head") or {}).get("repo")
    return PullInfo(
        number=int(data["number"]),
        head_sha=str(data["head"]["sha"]),
        head_repo=str(head_repo["full_name"]) if head_repo else None,
        base_repo=str(data["base"]["repo"]["full_name"]),
        author=str((data.get("user") or {}).get("login", "")),
        labels=tuple(str(label["name"]) for label in data.get("labels") or ()),
        state=str(data.get("state", "open")),
        merged=data.get("merged") is True or bool(data.get("merged_at")),
        merge_commit_sha=str(data["merge_commit_sha"]) if data.get("merge_commit_sha") else None,
        base_ref=str(data["base"]["ref"]) if data["base"].get("ref") else None,
        head_ref=str(data["head"]["ref"]) if data["head"].get("ref") else None,
    )


def _comment(item: Any) -> Comment:
    return Comment(
        id=int(item.id),
        body=str(item.body or ""),
        user_login=str(item.user.login) if item.user else "",
        user_type=str(item.user.type) if item.user else "",
        url=str(item.html_url or ""),
    )


def _comment_from_json(data: dict[str, Any]) -> Comment:
    user = data.get("user") or {}
    return Comment(
        id=int(data["id"]),
        body=str(data.get("body") or ""),
        user_login=str(user.get("login", "")),
        user_type=str(user.get("type", "")),
        url=str(data.get("html_url") or ""),
    )


def connect(
    token: str,
    repo: str,
    api_url: str = "https://api.github.com",
    *,
    retries: int = 5,
    backoff_s: float = 1.0,
    throttle: bool = True,
    login_fallback: str = ACTIONS_BOT,
) -> RestGitHub:
    """The real adapter. ``throttle=False`` drops PyGithub's pause between calls (tests against a fake);
    ``backoff_s`` is urllib3's backoff factor (tests use a tiny one)."""
    from github import Auth, Github, GithubRetry

    retry = GithubRetry(total=retries, backoff_factor=backoff_s, secondary_rate_wait=max(backoff_s, 0.001) * 60)
    client = Github(
        auth=Auth.Token(token),
        base_url=api_url.rstrip("/"),
        retry=retry,
        per_page=100,
        timeout=30,
        seconds_between_requests=0.25 if throttle else None,
        seconds_between_writes=1.0 if throttle else None,
    )
    return RestGitHub(client, repo, login_fallback)
