"""The Actions event that started the job, reduced to the fields the gate reads. Pure.

Built from ``GITHUB_EVENT_NAME`` + the parsed ``GITHUB_EVENT_PATH`` payload (+ ``GITHUB_SHA``) by
:func:`parse_event`; a payload missing a field we need is a ``DataError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from precisionbot.errors import DataError


@dataclass(frozen=True)
class Event:
    name: str
    """``pull_request``, ``issue_comment``, ``push``, ``schedule``, ``workflow_dispatch``, or another name."""
    action: str | None = None
    sender: str | None = None
    sha: str | None = None
    """``GITHUB_SHA``: for schedule/dispatch the commit the workflow runs on."""
    default_branch: str | None = None
    # pull_request
    pr: int | None = None
    head_sha: str | None = None
    """The PR head in the payload: GitHub fixed it when the event happened (pinned, unlike a fresh fetch)."""
    head_repo: str | None = None
    base_repo: str | None = None
    labels: tuple[str, ...] = ()
    label: str | None = None
    """For ``labeled``: the label that was just added."""
    # issue_comment
    is_pull: bool = False
    comment_id: int | None = None
    comment_body: str = ""
    comment_user: str | None = None
    comment_user_type: str | None = None
    comment_created_at: datetime | None = None
    # push, workflow_dispatch
    ref: str | None = None
    after: str | None = None
    # workflow_dispatch
    inputs: Mapping[str, str] = field(default_factory=dict)
    # workflow_run (the consumer of the PR workflow): every field below is set by GitHub, never by the PR run;
    # ``head_sha``/``head_repo`` above hold the run's head and ``base_repo`` this repository.
    run_event: str | None = None
    """The event that started the watched run (``pull_request`` for the PR gate workflow)."""
    run_actor: str | None = None
    """Who caused the watched run: the labeller for ``labeled``, the pusher for ``synchronize``."""
    run_created_at: datetime | None = None
    run_head_branch: str | None = None
    """The PR's head branch (in ``head_repo``): with its owner, how a fork PR is found."""
    run_pulls: tuple[int, ...] = ()
    """``workflow_run.pull_requests`` numbers (empty for fork PRs: the gate looks them up by head SHA)."""
    run_id: int | None = None

    @property
    def is_fork(self) -> bool:
        return self.head_repo != self.base_repo


def parse_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def parse_event(name: str, payload: Mapping[str, Any], sha: str | None = None) -> Event:
    try:
        return _parse(name, payload, sha)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(
            f"the {name!r} event payload (GITHUB_EVENT_PATH) lacks or garbles {exc}; "
            "run this step in a workflow triggered by that event"
        ) from exc


def _login(obj: Any) -> str | None:
    return str(obj["login"]) if isinstance(obj, Mapping) and "login" in obj else None


def _parse(name: str, payload: Mapping[str, Any], sha: str | None) -> Event:
    repo = payload.get("repository") or {}
    common: dict[str, Any] = {
        "name": name,
        "action": payload.get("action"),
        "sender": _login(payload.get("sender")),
        "sha": sha,
        "default_branch": repo.get("default_branch"),
    }
    if name in ("pull_request", "pull_request_target"):
        pull = payload["pull_request"]
        head_repo = (pull["head"].get("repo") or {}).get("full_name")
        label = payload.get("label")
        return Event(
            **common,
            pr=int(pull["number"]),
            head_sha=str(pull["head"]["sha"]),
            head_repo=str(head_repo) if head_repo else None,
            base_repo=str(pull["base"]["repo"]["full_name"]),
            labels=tuple(str(lb["name"]) for lb in pull.get("labels") or ()),
            label=str(label["name"]) if isinstance(label, Mapping) else None,
        )
    if name == "issue_comment":
        issue, comment = payload["issue"], payload["comment"]
        user = comment.get("user") or {}
        return Event(
            **common,
            pr=int(issue["number"]),
            is_pull=bool(issue.get("pull_request")),
            comment_id=int(comment["id"]),
            comment_body=str(comment.get("body") or ""),
            comment_user=user.get("login"),
            comment_user_type=user.get("type"),
            comment_created_at=parse_time(str(comment["created_at"])),
        )
    if name == "push":
        return Event(**common, ref=payload.get("ref"), after=payload.get("after"))
    if name == "workflow_dispatch":
        inputs = payload.get("inputs") or {}
        # ``ref`` is the branch the workflow was dispatched from: baseline mode only runs from the default one.
        ref = payload.get("ref")
        return Event(
            **common,
            ref=str(ref) if ref else None,
            inputs={str(k): str(v) for k, v in inputs.items() if v is not None},
        )
    if name == "workflow_run":
        return _workflow_run(common, payload)
    return Event(**common)


def _into(pull: Mapping[str, Any], repo: str) -> bool:
    """Whether a ``workflow_run.pull_requests`` entry targets ``repo``: GitHub also lists PRs of other
    repositories whose head is the same branch, with numbers that mean nothing here."""
    url = ((pull.get("base") or {}).get("repo") or {}).get("url")
    return not isinstance(url, str) or url.endswith(f"/repos/{repo}")


def _workflow_run(common: dict[str, Any], payload: Mapping[str, Any]) -> Event:
    run = payload["workflow_run"]
    head_repo = (run.get("head_repository") or {}).get("full_name")
    base_repo = payload["repository"]["full_name"]
    return Event(
        **common,
        head_sha=str(run["head_sha"]),
        head_repo=str(head_repo) if head_repo else None,
        base_repo=str(base_repo),
        run_event=str(run["event"]),
        run_actor=_login(run.get("actor")),
        run_created_at=parse_time(str(run["created_at"])),
        run_head_branch=str(run["head_branch"]) if run.get("head_branch") else None,
        run_pulls=tuple(int(p["number"]) for p in run.get("pull_requests") or () if _into(p, str(base_repo))),
        run_id=int(run["id"]),
    )
