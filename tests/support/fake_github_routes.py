"""The fake GitHub's endpoints, one function each, registered with ``@route`` (see ``fake_github``'s docstring
for the list). Imported by ``tests.support.fake_github`` itself, so a test never imports this module."""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from typing import Any

from tests.support.fake_github import (
    COMMENT_LIMIT,
    REACTIONS,
    Json,
    Reply,
    _Handler,
    _public,
    _user,
    now_iso,
    route,
)

_REPO = r"/repos/(?P<o>[^/]+)/(?P<r>[^/]+)"


@route("GET", "/user")
def _get_user(h: _Handler, m: re.Match[str]) -> Any:
    if h.owner.user_endpoint_forbidden:
        raise Reply(403, {"message": "Resource not accessible by integration"})
    return {**_user(h.owner.bot_login, "Bot"), "url": f"{h.base}/users/{h.owner.bot_login}"}


@route("GET", _REPO)
def _get_repo(h: _Handler, m: re.Match[str]) -> Any:
    repo = h.repo(m)
    return {**h.owner.state.repos[repo], "url": f"{h.base}/repos/{repo}"}


def _pull(h: _Handler, m: re.Match[str]) -> tuple[str, Json]:
    repo = h.repo(m)
    pull = h.owner.state.pulls.get((repo, int(m["n"])))
    if pull is None:
        raise Reply(404, {"message": "Not Found"})
    return repo, pull


@route("GET", _REPO + r"/pulls/(?P<n>\d+)")
def _get_pull(h: _Handler, m: re.Match[str]) -> Any:
    repo, pull = _pull(h, m)
    url = f"{h.base}/repos/{repo}"
    return {**pull, "url": f"{url}/pulls/{pull['number']}", "issue_url": f"{url}/issues/{pull['number']}"}


@route("GET", _REPO + r"/pulls")
def _list_pulls(h: _Handler, m: re.Match[str]) -> Any:
    repo = h.repo(m)
    state, head = h.query.get("state", "open"), h.query.get("head")
    url = f"{h.base}/repos/{repo}"
    pulls = [
        {**pull, "url": f"{url}/pulls/{pull['number']}", "issue_url": f"{url}/issues/{pull['number']}"}
        for (r, _), pull in sorted(h.owner.state.pulls.items())
        if r == repo and state in ("all", pull["state"]) and head in (None, pull["head"]["label"])
    ]
    return h.paginate(pulls)


@route("GET", _REPO + r"/pulls/(?P<n>\d+)/reviews")
def _list_reviews(h: _Handler, m: re.Match[str]) -> Any:
    repo, _ = _pull(h, m)
    return h.paginate([_public(r) for r in h.owner.state.reviews.get((repo, int(m["n"])), [])])


@route("GET", _REPO + r"/pulls/(?P<n>\d+)/files")
def _get_pull_files(h: _Handler, m: re.Match[str]) -> Any:
    repo, _ = _pull(h, m)
    return h.paginate(h.owner.state.files[(repo, int(m["n"]))])


@route("GET", _REPO + r"/commits/(?P<sha>[0-9a-fA-F]+)")
def _get_commit(h: _Handler, m: re.Match[str]) -> Any:
    repo = h.repo(m)
    commit = h.owner.state.commits.get((repo, m["sha"]))
    if commit is None:
        raise Reply(422, {"message": f"No commit found for SHA: {m['sha']}"})
    return {**commit, "url": f"{h.base}/repos/{repo}/commits/{commit['sha']}"}


def _issue(h: _Handler, m: re.Match[str]) -> tuple[str, Json]:
    repo = h.repo(m)
    issue = h.owner.state.issues.get((repo, int(m["n"])))
    if issue is None:
        raise Reply(404, {"message": "Not Found"})
    return repo, issue


@route("GET", _REPO + r"/issues/(?P<n>\d+)")
def _get_issue(h: _Handler, m: re.Match[str]) -> Any:
    repo, issue = _issue(h, m)
    url = f"{h.base}/repos/{repo}"
    out = {**_public(issue), "url": f"{url}/issues/{issue['number']}"}
    if issue["_is_pull"]:
        out["pull_request"] = {"url": f"{url}/pulls/{issue['number']}"}
    return out


@route("GET", _REPO + r"/issues/(?P<n>\d+)/comments")
def _list_comments(h: _Handler, m: re.Match[str]) -> Any:
    repo, issue = _issue(h, m)
    return h.paginate(h.owner.comments(issue["number"], repo))


@route("GET", _REPO + r"/issues/(?P<n>\d+)/events")
def _list_issue_events(h: _Handler, m: re.Match[str]) -> Any:
    repo, issue = _issue(h, m)
    events = h.owner.state.issue_events.get((repo, issue["number"]), [])
    return h.paginate([{**e, "url": f"{h.base}/repos/{repo}/issues/events/{e['id']}"} for e in events])


@route("POST", _REPO + r"/issues/(?P<n>\d+)/comments")
def _create_comment(h: _Handler, m: re.Match[str]) -> Any:
    repo, issue = _issue(h, m)
    body = (h.body or {}).get("body")
    if not isinstance(body, str) or not body:
        raise Reply(422, {"message": "Validation Failed", "errors": [{"field": "body", "code": "missing"}]})
    if len(body) > COMMENT_LIMIT:
        raise Reply(422, {"message": "Validation Failed", "errors": [{"message": "body is too long"}]})
    comment = h.owner.add_comment(issue["number"], body, user=h.owner.bot_login, user_type="Bot", repo=repo)
    raise Reply(201, comment)


def _stored_comment(h: _Handler, m: re.Match[str]) -> Json:
    repo = h.repo(m)
    comment = h.owner.state.comments.get(int(m["id"]))
    if comment is None or comment["_repo"] != repo:
        raise Reply(404, {"message": "Not Found"})
    return comment


@route("DELETE", _REPO + r"/issues/comments/(?P<id>\d+)")
def _delete_comment(h: _Handler, m: re.Match[str]) -> Any:
    comment = _stored_comment(h, m)
    if comment["user"]["login"] != h.owner.bot_login:
        raise Reply(403, {"message": "Resource not accessible by integration"})
    h.owner.state.comments.pop(comment["id"])
    raise Reply(204, None)


@route("GET", _REPO + r"/branches/(?P<branch>[^/]+)")
def _get_branch(h: _Handler, m: re.Match[str]) -> Any:
    repo = h.repo(m)
    sha = h.owner.state.branches.get((repo, m["branch"]))
    if sha is None:
        raise Reply(404, {"message": "Branch not found"})
    return {"name": m["branch"], "commit": {"sha": sha, "url": f"{h.base}/repos/{repo}/commits/{sha}"}}


def _commit_of(h: _Handler, repo: str, ref: str) -> str:
    """A branch name or a known commit id, as the compare endpoint resolves it (404 otherwise)."""
    sha = h.owner.state.branches.get((repo, ref), ref)
    known = (repo, sha) in h.owner.state.commits or sha in h.owner.state.branches.values()
    if not known:
        raise Reply(404, {"message": "Not Found"})
    return sha


def _ancestry(h: _Handler, repo: str, sha: str) -> list[str]:
    """``sha`` and every commit it reaches through its parents, nearest first."""
    seen, queue = [sha], [sha]
    while queue:
        commit = h.owner.state.commits.get((repo, queue.pop(0)), {})
        for parent in commit.get("parents", []):
            if parent["sha"] not in seen:
                seen.append(parent["sha"])
                queue.append(parent["sha"])
    return seen


@route("GET", _REPO + r"/compare/(?P<base>.+?)\.\.\.(?P<head>.+)")
def _compare(h: _Handler, m: re.Match[str]) -> Any:
    repo = h.repo(m)
    base = _commit_of(h, repo, urllib.parse.unquote(m["base"]))
    head = _commit_of(h, repo, urllib.parse.unquote(m["head"]))
    of_base, of_head = _ancestry(h, repo, base), _ancestry(h, repo, head)
    ahead = [sha for sha in of_head if sha not in of_base]
    behind = [sha for sha in of_base if sha not in of_head]
    # GitHub's words: ahead = head has commits base lacks, behind = base has commits head lacks.
    status = {(False, False): "identical", (True, False): "ahead", (False, True): "behind"}.get(
        (bool(ahead), bool(behind)), "diverged"
    )
    merge_base = next((sha for sha in of_head if sha in of_base), None)
    url = f"{h.base}/repos/{repo}"
    per_page = max(1, min(100, int(h.query.get("per_page", 250))))
    return {
        "url": f"{url}/compare/{m['base']}...{m['head']}",
        "html_url": f"https://github.invalid/{repo}/compare/{m['base']}...{m['head']}",
        "status": status,
        "ahead_by": len(ahead),
        "behind_by": len(behind),
        "total_commits": len(ahead),
        "base_commit": {"sha": base, "url": f"{url}/commits/{base}"},
        "merge_base_commit": None if merge_base is None else {"sha": merge_base, "url": f"{url}/commits/{merge_base}"},
        "commits": [{"sha": sha, "url": f"{url}/commits/{sha}"} for sha in reversed(ahead)][:per_page],
        "files": [],
    }


@route("GET", _REPO + r"/issues/comments/(?P<id>\d+)")
def _get_comment(h: _Handler, m: re.Match[str]) -> Any:
    return h.owner._render_comment(h.base, _stored_comment(h, m))


@route("PATCH", _REPO + r"/issues/comments/(?P<id>\d+)")
def _update_comment(h: _Handler, m: re.Match[str]) -> Any:
    comment = _stored_comment(h, m)
    body = (h.body or {}).get("body")
    if not isinstance(body, str) or not body:
        raise Reply(422, {"message": "Validation Failed"})
    if len(body) > COMMENT_LIMIT:
        raise Reply(422, {"message": "Validation Failed", "errors": [{"message": "body is too long"}]})
    if comment["user"]["login"] != h.owner.bot_login:
        raise Reply(403, {"message": "Resource not accessible by integration"})
    comment["body"] = body
    comment["updated_at"] = now_iso()
    return h.owner._render_comment(h.base, comment)


@route("GET", _REPO + r"/issues/comments/(?P<id>\d+)/reactions")
def _list_reactions(h: _Handler, m: re.Match[str]) -> Any:
    comment = _stored_comment(h, m)
    return h.paginate(h.owner.state.reactions[comment["id"]])


@route("POST", _REPO + r"/issues/comments/(?P<id>\d+)/reactions")
def _create_reaction(h: _Handler, m: re.Match[str]) -> Any:
    comment = _stored_comment(h, m)
    content = (h.body or {}).get("content")
    if content not in REACTIONS:
        raise Reply(422, {"message": "Validation Failed", "errors": [{"field": "content", "code": "invalid"}]})
    existing = h.owner.state.reactions[comment["id"]]
    bot = _user(h.owner.bot_login, "Bot")
    for reaction in existing:
        if reaction["content"] == content and reaction["user"]["login"] == bot["login"]:
            return reaction
    reaction = {"id": h.owner._new_id(), "content": content, "user": bot, "created_at": now_iso()}
    existing.append(reaction)
    raise Reply(201, reaction)


@route("GET", _REPO + r"/collaborators/(?P<user>[^/]+)/permission")
def _get_permission(h: _Handler, m: re.Match[str]) -> Any:
    repo = h.repo(m)
    user = urllib.parse.unquote(m["user"])
    # An outsider reads as "none" (GitHub answers 404 only for logins that do not exist at all).
    permission, role = h.owner.state.permissions.get((repo, user), ("none", "none"))
    return {"permission": permission, "role_name": role, "user": _user(user)}


@route("POST", _REPO + r"/check-runs")
def _create_check_run(h: _Handler, m: re.Match[str]) -> Any:
    repo = h.repo(m)
    body = h.body or {}
    if not body.get("name") or not body.get("head_sha"):
        raise Reply(422, {"message": "Validation Failed"})
    cid = h.owner._new_id()
    run = {"id": cid, "status": "queued", "conclusion": None, "output": {}, **body}
    run["url"] = f"{h.base}/repos/{repo}/check-runs/{cid}"
    h.owner.state.check_runs[cid] = run
    raise Reply(201, run)


@route("PATCH", _REPO + r"/check-runs/(?P<id>\d+)")
def _update_check_run(h: _Handler, m: re.Match[str]) -> Any:
    h.repo(m)
    run = h.owner.state.check_runs.get(int(m["id"]))
    if run is None:
        raise Reply(404, {"message": "Not Found"})
    run.update(h.body or {})
    return run


@route("POST", _REPO + r"/actions/runners/generate-jitconfig")
def _generate_jitconfig(h: _Handler, m: re.Match[str]) -> Any:
    repo = h.repo(m)
    body = h.body or {}
    name, labels = body.get("name"), body.get("labels")
    if not isinstance(name, str) or not name or not isinstance(labels, list) or not labels:
        raise Reply(422, {"message": "Invalid request: name and labels are required."})
    if "runner_group_id" not in body:
        raise Reply(422, {"message": "Invalid request: runner_group_id is required."})
    if any(r["name"] == name and r["_repo"] == repo for r in h.owner.state.runners.values()):
        raise Reply(409, {"message": f"Already exists - A runner with the name {name} already exists."})
    rid = h.owner._new_id()
    runner = {
        "id": rid,
        "name": name,
        "os": "linux",
        "status": "offline",
        "busy": False,
        "ephemeral": True,
        "labels": [{"id": i + 1, "name": label, "type": "custom"} for i, label in enumerate(labels)],
        "runner_group_id": body["runner_group_id"],
        "work_folder": body.get("work_folder", "_work"),
        "_repo": repo,
    }
    h.owner.state.runners[rid] = runner
    config = json.dumps({"runner_id": rid, "name": name, "repo": repo, "labels": labels}).encode()
    raise Reply(201, {"runner": _public(runner), "encoded_jit_config": base64.b64encode(config).decode()})


@route("GET", _REPO + r"/actions/runners")
def _list_runners(h: _Handler, m: re.Match[str]) -> Any:
    repo = h.repo(m)
    runners = h.owner.runners(repo)
    return h.paginate(runners, lambda chunk: {"total_count": len(runners), "runners": chunk})


def _runner(h: _Handler, m: re.Match[str]) -> Json:
    repo = h.repo(m)
    runner = h.owner.state.runners.get(int(m["id"]))
    if runner is None or runner["_repo"] != repo:
        raise Reply(404, {"message": "Not Found"})
    return runner


@route("GET", _REPO + r"/actions/runners/(?P<id>\d+)")
def _get_runner(h: _Handler, m: re.Match[str]) -> Any:
    return _public(_runner(h, m))


@route("DELETE", _REPO + r"/actions/runners/(?P<id>\d+)")
def _delete_runner(h: _Handler, m: re.Match[str]) -> Any:
    runner = _runner(h, m)
    h.owner.state.runners.pop(runner["id"])
    raise Reply(204, None)
