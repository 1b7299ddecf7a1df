"""The Actions event that started the job, reduced to the fields the gate reads. Pure.

Built from ``GITHUB_EVENT_NAME`` + the parsed ``GITHUB_EVENT_PATH`` payload (+ ``GITHUB_SHA``) by
:func:`parse_event`; a payload missing a field we need is a ``DataError`` naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from precisionbot.errors import DataError
from precisionbot.untrusted import FULL_SHA


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


MAX_ID = 2**53
"""GitHub's ids and numbers are JSON integers well below this (JavaScript's safe integers)."""


class _Bad(Exception):
    def __init__(self, field: str, why: str) -> None:
        super().__init__(field, why)
        self.field, self.why = field, why


def parse_time(stamp: str) -> datetime:
    """An ISO 8601 time with a zone (GitHub writes ``...Z``); a naive time cannot be compared, so it is refused."""
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"{stamp[:40]!r} has no time zone")
    return when


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A UTF-16 surrogate code point. ``json.loads`` joins an escaped pair (``"\\ud83d\\ude00"``) into one
character, so one left in a parsed string is a lone half: no encoder (UTF-8 for a URL, a log line, the
outputs file) accepts it, and GitHub never sends one."""


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,40}")
"""A key shown as is in an error; any other is shown as Python's ``ascii()`` writes it (no control character,
no workflow command, no surrogate reaches the message)."""


def _check_strings(payload: Mapping[str, Any]) -> None:
    """Refuse the payload when any string in it, key or value, holds a lone surrogate. Every string is
    checked here once, rather than at each use, so none reaches an encoder (a permission URL, the log)
    whichever field a later change starts to read. Iterative: the nesting depth is the payload's to choose."""
    stack: list[tuple[str, Any]] = [("", payload)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                raise _Bad(where or "payload", "a string with a lone UTF-16 surrogate, which no encoder accepts")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                shown = key if isinstance(key, str) and _PLAIN_KEY.fullmatch(key) else ascii(key)[:42]
                name = f"{where}.{shown}" if where else shown
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise _Bad(name, "a key with a lone UTF-16 surrogate, which no encoder accepts")
                stack.append((name[:200], item))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{where}[{i}]"[:200], item) for i, item in enumerate(value))


def parse_event(name: str, payload: Mapping[str, Any], sha: str | None = None) -> Event:
    """The event as the gate reads it; a field of the wrong type or form is a ``DataError`` naming it."""
    if _SURROGATE.search(name):
        raise DataError("GITHUB_EVENT_NAME holds a lone UTF-16 surrogate; run this step in a real workflow")
    try:
        _check_strings(payload)
        return _parse(name, payload, sha)
    except _Bad as exc:
        raise DataError(
            f"the event payload's {exc.field} is not what GitHub sends ({exc.why}); "
            f"run this step in a workflow triggered by a real {name[:40]!r} event"
        ) from None
    except KeyError as exc:
        raise DataError(
            f"the {name[:40]!r} event payload (GITHUB_EVENT_PATH) lacks {exc}; "
            "run this step in a workflow triggered by that event"
        ) from exc


def _obj(parent: Mapping[str, Any], key: str, field: str, *, required: bool = True) -> Mapping[str, Any]:
    value = parent[key] if required else parent.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise _Bad(field, f"a JSON {type(value).__name__}, expected an object")
    return value


def _str(parent: Mapping[str, Any], key: str, field: str, *, required: bool = False) -> str | None:
    value = parent[key] if required else parent.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise _Bad(field, f"a JSON {type(value).__name__}, expected a string")
    return value


def _name(obj: Any, field: str) -> str:
    """A label's name (``{"name": ...}``)."""
    if not isinstance(obj, Mapping):
        raise _Bad(field, f"a JSON {type(obj).__name__}, expected an object")
    return _str(obj, "name", f"{field}.name", required=True) or ""


def _sha(value: Any, field: str) -> str:
    if not isinstance(value, str) or not FULL_SHA.fullmatch(value):
        raise _Bad(field, "expected a full 40-hex commit id")
    return value


def positive_int(value: Any, field: str) -> int:
    """A PR number or id: a JSON integer from 1 (never a bool, float, string or ``Infinity``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < MAX_ID:
        raise _Bad(field, "expected a positive whole number")
    return value


def digits(value: str) -> int | None:
    """A number typed by a person (a dispatch input, ``samples=``): ASCII digits only, no sign, no space
    (``"²".isdigit()`` is true and ``int("٧")`` is 7); None otherwise."""
    if not value or len(value) > 15 or not all("0" <= ch <= "9" for ch in value):
        return None
    return int(value)


def pr_of(payload: Mapping[str, Any]) -> int | None:
    """The PR a payload is about (``pull_request`` / ``issue`` number, or the dispatch input ``pr``)."""
    for key in ("pull_request", "issue"):
        if isinstance(payload.get(key), Mapping) and "number" in payload[key]:
            try:
                return positive_int(payload[key]["number"], f"{key}.number")
            except _Bad as exc:
                raise DataError(f"the event payload's {exc.field} is not what GitHub sends ({exc.why})") from None
    inputs = payload.get("inputs")
    pr = inputs.get("pr") if isinstance(inputs, Mapping) else None
    return (digits(pr) or None) if isinstance(pr, str) else None


def _login(obj: Any, field: str) -> str | None:
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        raise _Bad(field, f"a JSON {type(obj).__name__}, expected an object")
    return _str(obj, "login", f"{field}.login")


def _parse(name: str, payload: Mapping[str, Any], sha: str | None) -> Event:
    repo = _obj(payload, "repository", "repository", required=False)
    if sha is not None and not FULL_SHA.fullmatch(sha):
        raise _Bad("GITHUB_SHA", "expected a full 40-hex commit id")
    common: dict[str, Any] = {
        "name": name,
        "action": _str(payload, "action", "action"),
        "sender": _login(payload.get("sender"), "sender"),
        "sha": sha,
        "default_branch": _str(repo, "default_branch", "repository.default_branch"),
    }
    if name in ("pull_request", "pull_request_target"):
        pull = _obj(payload, "pull_request", "pull_request")
        head = _obj(pull, "head", "pull_request.head")
        head_repo = _obj(head, "repo", "pull_request.head.repo", required=False)
        base_repo = _obj(_obj(pull, "base", "pull_request.base"), "repo", "pull_request.base.repo")
        labels = pull.get("labels") or []
        if not isinstance(labels, list):
            raise _Bad("pull_request.labels", "expected an array")
        label = payload.get("label")
        return Event(
            **common,
            pr=positive_int(pull["number"], "pull_request.number"),
            head_sha=_sha(head["sha"], "pull_request.head.sha"),
            head_repo=_str(head_repo, "full_name", "pull_request.head.repo.full_name") or None,
            base_repo=_str(base_repo, "full_name", "pull_request.base.repo.full_name", required=True),
            labels=tuple(_name(lb, f"pull_request.labels[{i}]") for i, lb in enumerate(labels)),
            label=None if label is None else _name(label, "label"),
        )
    if name == "issue_comment":
        issue, comment = _obj(payload, "issue", "issue"), _obj(payload, "comment", "comment")
        user = _obj(comment, "user", "comment.user", required=False)
        created = _str(comment, "created_at", "comment.created_at", required=True) or ""
        try:
            created_at = parse_time(created)
        except ValueError as exc:
            raise _Bad("comment.created_at", f"expected an ISO 8601 time with a zone: {exc}") from None
        return Event(
            **common,
            pr=positive_int(issue["number"], "issue.number"),
            is_pull=bool(issue.get("pull_request")),
            comment_id=positive_int(comment["id"], "comment.id"),
            comment_body=_str(comment, "body", "comment.body") or "",
            comment_user=_str(user, "login", "comment.user.login"),
            comment_user_type=_str(user, "type", "comment.user.type"),
            comment_created_at=created_at,
        )
    if name == "push":
        after = payload.get("after")
        return Event(
            **common,
            ref=_str(payload, "ref", "ref"),
            after=None if after is None else _sha(after, "after"),
        )
    if name == "workflow_dispatch":
        inputs = _obj(payload, "inputs", "inputs", required=False)
        values: dict[str, str] = {}
        for key, value in inputs.items():
            if value is None:
                continue
            if not isinstance(value, (str, bool, int, float)):
                raise _Bad(f"inputs.{str(key)[:40]}", "expected a string, a boolean or a number")
            values[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
        pr = values.get("pr")
        if pr and not (digits(pr) or 0) >= 1:
            raise _Bad("inputs.pr", "expected a PR number (1 or more) in ASCII digits")
        # ``ref`` is the branch the workflow was dispatched from: baseline mode only runs from the default one.
        return Event(**common, ref=_str(payload, "ref", "ref") or None, inputs=values)
    if name == "workflow_run":
        return _workflow_run(common, payload)
    return Event(**common)


def _into(pull: Mapping[str, Any], repo: str) -> bool:
    """Whether a ``workflow_run.pull_requests`` entry targets ``repo``: GitHub also lists PRs of other
    repositories whose head is the same branch, with numbers that mean nothing here."""
    base = pull.get("base")
    base_repo = base.get("repo") if isinstance(base, Mapping) else None
    url = base_repo.get("url") if isinstance(base_repo, Mapping) else None
    return not isinstance(url, str) or url.endswith(f"/repos/{repo}")


def _workflow_run(common: dict[str, Any], payload: Mapping[str, Any]) -> Event:
    run = _obj(payload, "workflow_run", "workflow_run")
    head_repo = _str(_obj(run, "head_repository", "workflow_run.head_repository", required=False), "full_name",
                     "workflow_run.head_repository.full_name")  # fmt: skip
    base_repo = _str(_obj(payload, "repository", "repository"), "full_name", "repository.full_name", required=True)
    created = _str(run, "created_at", "workflow_run.created_at", required=True) or ""
    try:
        created_at = parse_time(created)
    except ValueError as exc:
        raise _Bad("workflow_run.created_at", f"expected an ISO 8601 time with a zone: {exc}") from None
    pulls = run.get("pull_requests") or ()
    if not isinstance(pulls, (list, tuple)):
        raise _Bad("workflow_run.pull_requests", f"a JSON {type(pulls).__name__}, expected an array")
    numbers = []
    for i, pull in enumerate(pulls):
        if not isinstance(pull, Mapping):
            raise _Bad(f"workflow_run.pull_requests[{i}]", f"a JSON {type(pull).__name__}, expected an object")
        if _into(pull, str(base_repo)):
            numbers.append(positive_int(pull.get("number"), f"workflow_run.pull_requests[{i}].number"))
    return Event(
        **common,
        head_sha=_sha(run.get("head_sha"), "workflow_run.head_sha"),
        head_repo=head_repo or None,
        base_repo=base_repo,
        run_event=_str(run, "event", "workflow_run.event", required=True),
        run_actor=_login(run.get("actor"), "workflow_run.actor"),
        run_created_at=created_at,
        run_head_branch=_str(run, "head_branch", "workflow_run.head_branch") or None,
        run_pulls=tuple(numbers),
        run_id=positive_int(run.get("id"), "workflow_run.id"),
    )
