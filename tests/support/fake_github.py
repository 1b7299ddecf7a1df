"""A small fake of the GitHub REST endpoints precisionbot uses, served over real HTTP on 127.0.0.1.

Tests reach it through real PyGithub (``Github(base_url=fake.url)``) or any HTTP client; every object it
returns carries absolute ``url``/``issue_url``/``html_url`` fields and ``Link`` headers pointing at itself,
because PyGithub refuses URLs outside its ``base_url``.

Python API (everything a test needs; all methods are thread-safe)::

    with FakeGitHub(token="t0ken", repo="acme/engine", bot_login="precisionbot[bot]") as gh:
        gh.url                                  # "http://127.0.0.1:PORT" -> GITHUB_API_URL / base_url
        gh.repo                                 # "acme/engine" (the default repo for the helpers below)
        gh.add_repo("other/repo", default_branch="main")  # default branch head: "d" * 40
        gh.set_branch("main", "e" * 40)
        gh.add_pull(7, head_sha="abc...", files=["a.py", ...], fork=False, author="alice", labels=["x"])
        gh.set_head(7, "def...", committed_at="2026-01-01T00:05:00Z")   # a push to the PR
        gh.add_commit("f00...", parents=["d" * 40])                     # a commit with its parents
        gh.merge_pull(7, "fee...")          # merge commit (parents: base head, PR head), base branch moves to it
        gh.add_issue(8)                                                 # an issue that is not a PR
        gh.add_label(7, "precision", actor="carol", created_at="...")   # label + its ``labeled`` issue event
        gh.add_issue_event(7, "head_ref_force_pushed", actor="mallory", created_at="...")
        gh.add_review(7, "carol", commit_id="abc...", state="APPROVED")     # a submitted review
        gh.add_comment(7, "/precision rerun", user="alice", user_type="User") -> comment dict
        gh.set_permission("alice", "write", role_name="maintain")       # default role_name = permission
        gh.comments(7) / gh.comment(id) / gh.reactions(id) / gh.check_runs() / gh.runners()
        gh.fail_next("POST", r"/issues/\\d+/comments$", status=500, times=1, headers={...}, body={...})
        gh.rate_limit_next("GET", r"/pulls/7$", kind="primary" | "secondary" | "429", times=1)
        gh.lose_answer_next("POST", r"/issues/7/comments$", status=502)  # done, then answered 502: retried
        gh.set_runner_status(runner_id, "online", busy=False) / gh.remove_runner(runner_id)
        gh.requests                             # list[RecordedRequest]: method, path, query, body, auth
        gh.user_endpoint_forbidden = True       # GET /user -> 403, like an Actions GITHUB_TOKEN

State lives in ``gh.state`` (a ``FakeState`` of plain dicts) for anything the helpers do not cover.
Authentication: requests must send ``Authorization: token <token>`` (or ``Bearer``), else 401; pass
``token=None`` to accept anything. Pagination honours ``per_page`` (default 30, max 100) and ``page``.

Endpoints (``{o}/{r}`` must name a known repo, else 404):
``GET /user``; ``GET /repos/{o}/{r}``; ``GET /repos/{o}/{r}/pulls/{n}``; ``GET .../pulls/{n}/files``;
``GET .../pulls?state=&head=owner:branch`` (paginated); ``GET .../pulls/{n}/reviews`` (paginated);
``GET .../issues/{n}/events`` (paginated);
``GET /repos/{o}/{r}/commits/{sha}``; ``GET /repos/{o}/{r}/issues/{n}``; ``GET|POST .../issues/{n}/comments``;
``GET|PATCH|DELETE .../issues/comments/{id}``; ``GET .../branches/{b}``;
``GET .../compare/{base}...{head}`` (branch names or commit ids; ``status`` from the parents of the commits
seeded with ``add_commit``/``merge_pull``: ``identical``, ``ahead``, ``behind`` or ``diverged``; 404 for an
unknown commit);
``GET|POST .../issues/comments/{id}/reactions`` (201 new, 200 existing);
``GET .../collaborators/{user}/permission``; ``POST .../check-runs``; ``PATCH .../check-runs/{id}``;
``POST .../actions/runners/generate-jitconfig`` (201; 409 on a duplicate name); ``GET .../actions/runners``
(``{total_count, runners}``, paginated); ``GET|DELETE .../actions/runners/{id}`` (DELETE -> 204).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Json = dict[str, Any]
COMMENT_LIMIT = 65536
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
PERMISSIONS = ("admin", "write", "read", "none")


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    auth: str | None


@dataclass
class Injection:
    method: str
    pattern: re.Pattern[str]
    status: int
    headers: dict[str, str]
    body: Json
    remaining: int
    applied: bool = False
    """Run the request first, then answer the failure: a request whose answer was lost on the way back."""


@dataclass
class FakeState:
    """Plain in-memory state; keys are repo full names where a resource belongs to a repo."""

    repos: dict[str, Json] = field(default_factory=dict)
    pulls: dict[tuple[str, int], Json] = field(default_factory=dict)
    files: dict[tuple[str, int], list[Json]] = field(default_factory=dict)
    commits: dict[tuple[str, str], Json] = field(default_factory=dict)
    issues: dict[tuple[str, int], Json] = field(default_factory=dict)
    comments: dict[int, Json] = field(default_factory=dict)  # id -> comment (with "_repo", "_issue")
    reactions: dict[int, list[Json]] = field(default_factory=dict)
    permissions: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    check_runs: dict[int, Json] = field(default_factory=dict)
    runners: dict[int, Json] = field(default_factory=dict)  # id -> runner (with "_repo")
    branches: dict[tuple[str, str], str] = field(default_factory=dict)  # (repo, branch) -> head sha
    issue_events: dict[tuple[str, int], list[Json]] = field(default_factory=dict)
    reviews: dict[tuple[str, int], list[Json]] = field(default_factory=dict)
    next_id: int = 1000


class FakeGitHub:
    def __init__(
        self,
        token: str | None = "test-token",
        repo: str = "acme/engine",
        bot_login: str = "precisionbot[bot]",
        default_branch: str = "main",
    ) -> None:
        self.token = token
        self.repo = repo
        self.bot_login = bot_login
        self.user_endpoint_forbidden = False
        self.state = FakeState()
        self.requests: list[RecordedRequest] = []
        self._injections: list[Injection] = []
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.add_repo(repo, default_branch=default_branch)

    # -- lifecycle ------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "FakeGitHub is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeGitHub:
        fake = self

        class Handler(_Handler):
            owner = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-github", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- seeding --------------------------------------------------------------------------------------
    def _new_id(self) -> int:
        with self._lock:
            self.state.next_id += 1
            return self.state.next_id

    def add_repo(self, full_name: str, default_branch: str = "main", private: bool = False) -> None:
        owner, name = full_name.split("/", 1)
        with self._lock:
            self.state.repos[full_name] = {
                "id": self._new_id(),
                "name": name,
                "full_name": full_name,
                "owner": {"login": owner, "id": 1, "type": "Organization"},
                "default_branch": default_branch,
                "private": private,
                "fork": False,
            }
            self.state.branches[(full_name, default_branch)] = "d" * 40

    def set_branch(self, branch: str, sha: str, repo: str | None = None) -> None:
        with self._lock:
            self.state.branches[(repo or self.repo, branch)] = sha

    def add_pull(
        self,
        number: int,
        head_sha: str = "a" * 40,
        files: list[str] | None = None,
        fork: bool = False,
        author: str = "alice",
        labels: list[str] | None = None,
        head_ref: str = "feature",
        base_ref: str | None = None,
        committed_at: str = "2026-01-01T00:00:00Z",
        repo: str | None = None,
    ) -> Json:
        """A PR whose head ``head_sha`` was committed at ``committed_at``; ``fork``: head in another repo."""
        repo = repo or self.repo
        head_repo = f"{author}/{repo.split('/', 1)[1]}" if fork else repo
        with self._lock:
            base = base_ref or self.state.repos[repo]["default_branch"]
            pull = {
                "id": self._new_id(),
                "number": number,
                "state": "open",
                "title": f"PR {number}",
                "user": _user(author),
                "labels": [{"name": name} for name in labels or []],
                "head": {
                    "sha": head_sha,
                    "ref": head_ref,
                    "label": f"{head_repo.split('/')[0]}:{head_ref}",
                    "repo": {"full_name": head_repo, "fork": fork, "name": head_repo.split("/")[1]},
                },
                "base": {"sha": "b" * 40, "ref": base, "repo": {"full_name": repo, "fork": False}},
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": committed_at,
                "merged": False,
                "draft": False,
            }
            self.state.pulls[(repo, number)] = pull
            self.state.issues[(repo, number)] = {
                "id": pull["id"],
                "number": number,
                "title": pull["title"],
                "state": "open",
                "user": _user(author),
                "labels": pull["labels"],
                "_is_pull": True,
            }
            self.state.files[(repo, number)] = [_file(name) for name in files or []]
            self._add_commit(repo, head_sha, committed_at)
        return pull

    def set_head(self, number: int, sha: str, committed_at: str | None = None, repo: str | None = None) -> None:
        """Simulate a push to the PR: new head commit with the given committer date (default: now)."""
        repo = repo or self.repo
        with self._lock:
            self.state.pulls[(repo, number)]["head"]["sha"] = sha
            self.state.pulls[(repo, number)]["updated_at"] = now_iso()
            self._add_commit(repo, sha, committed_at or now_iso())

    def set_files(self, number: int, files: list[str], repo: str | None = None) -> None:
        with self._lock:
            self.state.files[(repo or self.repo, number)] = [_file(name) for name in files]

    def _add_commit(self, repo: str, sha: str, committed_at: str, parents: list[str] | None = None) -> None:
        self.state.commits[(repo, sha)] = {
            "sha": sha,
            "commit": {
                "message": "change",
                "author": {"name": "a", "email": "a@example.com", "date": committed_at},
                "committer": {"name": "a", "email": "a@example.com", "date": committed_at},
            },
            "parents": [{"sha": parent} for parent in parents or []],
        }

    def add_commit(
        self, sha: str, parents: list[str], committed_at: str | None = None, repo: str | None = None
    ) -> None:
        """A commit and its parents (what ``compare`` walks); the branches' initial heads have none."""
        with self._lock:
            self._add_commit(repo or self.repo, sha, committed_at or now_iso(), parents)

    def merge_pull(self, number: int, merge_sha: str, repo: str | None = None) -> None:
        """Merge PR ``number`` as GitHub's merge button does: a merge commit whose parents are the base
        branch's head and the PR head, the base branch moved to it, the PR closed and ``merged``."""
        repo = repo or self.repo
        with self._lock:
            pull = self.state.pulls[(repo, number)]
            base = pull["base"]["ref"]
            parents = [self.state.branches.get((repo, base), "d" * 40), pull["head"]["sha"]]
            self._add_commit(repo, merge_sha, now_iso(), parents)
            self.state.branches[(repo, base)] = merge_sha
            pull.update(state="closed", merged=True, merged_at=now_iso(), merge_commit_sha=merge_sha)
            self.state.issues[(repo, number)]["state"] = "closed"

    def add_issue_event(
        self,
        number: int,
        event: str,
        actor: str,
        created_at: str | None = None,
        label: str | None = None,
        repo: str | None = None,
    ) -> Json:
        """One entry of the issue's event log (GitHub writes actor and time; tests pick them)."""
        entry: Json = {
            "id": self._new_id(),
            "event": event,
            "actor": _user(actor),
            "created_at": created_at or now_iso(),
            "commit_id": None,
        }
        if label is not None:
            entry["label"] = {"name": label, "color": "ededed"}
        with self._lock:
            self.state.issue_events.setdefault((repo or self.repo, number), []).append(entry)
        return entry

    def add_review(
        self,
        number: int,
        user: str,
        commit_id: str,
        state: str = "APPROVED",
        submitted_at: str | None = None,
        repo: str | None = None,
    ) -> Json:
        """A review of PR ``number`` by ``user``, given on ``commit_id`` (GitHub records the head it saw)."""
        entry: Json = {
            "id": self._new_id(),
            "user": _user(user),
            "state": state,
            "commit_id": commit_id,
            "submitted_at": submitted_at or now_iso(),
            "body": "",
        }
        with self._lock:
            self.state.reviews.setdefault((repo or self.repo, number), []).append(entry)
        return entry

    def add_label(
        self, number: int, name: str, actor: str, created_at: str | None = None, repo: str | None = None
    ) -> None:
        """A label added to PR ``number`` by ``actor``: on the PR and the issue, plus its ``labeled`` event."""
        repo = repo or self.repo
        with self._lock:
            labels = self.state.pulls[(repo, number)]["labels"]
            if all(lb["name"] != name for lb in labels):
                labels.append({"name": name})
            self.state.issues[(repo, number)]["labels"] = labels
        self.add_issue_event(number, "labeled", actor, created_at, label=name, repo=repo)

    def add_issue(self, number: int, author: str = "alice", repo: str | None = None) -> None:
        with self._lock:
            self.state.issues[(repo or self.repo, number)] = {
                "id": self._new_id(),
                "number": number,
                "title": f"Issue {number}",
                "state": "open",
                "user": _user(author),
                "labels": [],
                "_is_pull": False,
            }

    def add_comment(
        self,
        number: int,
        body: str,
        user: str = "alice",
        user_type: str = "User",
        created_at: str | None = None,
        repo: str | None = None,
    ) -> Json:
        """Store a comment as if ``user`` had posted it; returns the comment as the API shows it."""
        repo = repo or self.repo
        with self._lock:
            if (repo, number) not in self.state.issues:
                raise KeyError(f"no issue or pull #{number} in {repo}")
            cid = self._new_id()
            stamp = created_at or now_iso()
            self.state.comments[cid] = {
                "id": cid,
                "body": body,
                "user": _user(user, user_type),
                "created_at": stamp,
                "updated_at": stamp,
                "author_association": "NONE",
                "_repo": repo,
                "_issue": number,
            }
            self.state.reactions[cid] = []
            return self._render_comment(self.url, self.state.comments[cid])

    def set_permission(self, user: str, permission: str, role_name: str | None = None, repo: str | None = None) -> None:
        """``permission``: the API's coarse field (admin/write/read/none); ``role_name`` is the finer one."""
        assert permission in PERMISSIONS, permission
        with self._lock:
            self.state.permissions[(repo or self.repo, user)] = (permission, role_name or permission)

    def fail_next(
        self,
        method: str,
        path_regex: str,
        status: int,
        headers: dict[str, str] | None = None,
        body: Json | None = None,
        times: int = 1,
        *,
        applied: bool = False,
    ) -> None:
        """The next ``times`` requests whose method matches and path (no query) matches ``re.search`` fail;
        with ``applied`` they take effect first (see :meth:`lose_answer_next`)."""
        with self._lock:
            self._injections.append(
                Injection(
                    method.upper(),
                    re.compile(path_regex),
                    status,
                    dict(headers or {}),
                    body or {"message": f"injected failure {status}"},
                    times,
                    applied=applied,
                )
            )

    def lose_answer_next(self, method: str, path_regex: str, status: int = 502, times: int = 1) -> None:
        """The next ``times`` matching requests take effect, but their answer is ``status``: what a client
        sees when a proxy drops GitHub's reply, so a retrying client repeats a POST that already happened."""
        body = {"message": f"injected lost answer {status}"}
        self.fail_next(method, path_regex, status, body=body, times=times, applied=True)

    def rate_limit_next(self, method: str, path_regex: str, kind: str = "primary", times: int = 1) -> None:
        """Answer like GitHub's rate limiter: primary 403 (remaining 0, reset already passed so the client
        waits no real time), secondary 403 with Retry-After: 0, or 429 with Retry-After: 0."""
        reset = str(int(time.time()) - 5)
        limit_headers = {
            "X-RateLimit-Limit": "5000",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": reset,
        }
        if kind == "primary":
            self.fail_next(method, path_regex, 403, limit_headers, {"message": "API rate limit exceeded for x."}, times)
        elif kind == "secondary":
            message = "You have exceeded a secondary rate limit. "
            body = {"message": message + "Please wait a few minutes before you try again."}
            self.fail_next(method, path_regex, 403, {**limit_headers, "Retry-After": "0"}, body, times)
        elif kind == "429":
            self.fail_next(
                method, path_regex, 429, {**limit_headers, "Retry-After": "0"}, {"message": "Too many"}, times
            )
        else:
            raise ValueError(f"unknown rate-limit kind {kind!r}")

    # -- inspection -----------------------------------------------------------------------------------
    def comments(self, number: int, repo: str | None = None) -> list[Json]:
        repo = repo or self.repo
        with self._lock:
            return [
                self._render_comment(self.url, c)
                for c in self.state.comments.values()
                if c["_repo"] == repo and c["_issue"] == number
            ]

    def comment(self, comment_id: int) -> Json:
        with self._lock:
            return self._render_comment(self.url, self.state.comments[comment_id])

    def reactions(self, comment_id: int) -> list[str]:
        with self._lock:
            return [r["content"] for r in self.state.reactions.get(comment_id, [])]

    def check_runs(self) -> list[Json]:
        with self._lock:
            return [dict(c) for c in self.state.check_runs.values()]

    def runners(self, repo: str | None = None) -> list[Json]:
        repo = repo or self.repo
        with self._lock:
            return [_public(r) for r in self.state.runners.values() if r["_repo"] == repo]

    def set_runner_status(self, runner_id: int, status: str = "online", busy: bool = False) -> None:
        with self._lock:
            self.state.runners[runner_id]["status"] = status
            self.state.runners[runner_id]["busy"] = busy

    def remove_runner(self, runner_id: int) -> None:
        """What GitHub does once an ephemeral (JIT) runner finished its job."""
        with self._lock:
            self.state.runners.pop(runner_id, None)

    def calls(self, method: str, path_regex: str) -> list[RecordedRequest]:
        pattern = re.compile(path_regex)
        with self._lock:
            return [r for r in self.requests if r.method == method.upper() and pattern.search(r.path)]

    # -- rendering --------------------------------------------------------------------------------------
    def _render_comment(self, base: str, c: Json) -> Json:
        repo_url = f"{base}/repos/{c['_repo']}"
        out = _public(c)
        out["url"] = f"{repo_url}/issues/comments/{c['id']}"
        out["html_url"] = f"https://github.invalid/{c['_repo']}/pull/{c['_issue']}#issuecomment-{c['id']}"
        out["issue_url"] = f"{repo_url}/issues/{c['_issue']}"
        return out

    # -- request handling (called by the handler thread) ------------------------------------------------
    def _take_injection(self, method: str, path: str) -> Injection | None:
        with self._lock:
            for inj in self._injections:
                if inj.method == method and inj.pattern.search(path) and inj.remaining > 0:
                    inj.remaining -= 1
                    if inj.remaining == 0:
                        self._injections.remove(inj)
                    return inj
        return None


def _user(login: str, user_type: str = "User") -> Json:
    return {"login": login, "id": abs(hash(login)) % 10_000_000, "type": user_type}


def _file(name: str) -> Json:
    return {
        "sha": "c" * 40,
        "filename": name,
        "status": "modified",
        "additions": 1,
        "deletions": 1,
        "changes": 2,
    }


def _public(obj: Json) -> Json:
    return {k: v for k, v in obj.items() if not k.startswith("_")}


class Reply(Exception):
    """Raised by route functions to answer with a status (used for errors and non-200 successes)."""

    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


Route = Callable[["_Handler", re.Match[str]], Any]
_ROUTES: list[tuple[str, re.Pattern[str], Route]] = []


def route(method: str, pattern: str) -> Callable[[Route], Route]:
    def deco(fn: Route) -> Route:
        _ROUTES.append((method, re.compile(f"^{pattern}$"), fn))
        return fn

    return deco


class _Handler(BaseHTTPRequestHandler):
    owner: FakeGitHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    @property
    def base(self) -> str:
        return self.owner.url

    def _dispatch(self, method: str) -> None:
        parsed = urllib.parse.urlsplit(self.path)
        self.query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        self.route_path = parsed.path
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            self.body = json.loads(raw) if raw else None
        except ValueError:
            self._send(400, {"message": "Problems parsing JSON"})
            return
        auth = self.headers.get("Authorization")
        with self.owner._lock:
            self.owner.requests.append(RecordedRequest(method, parsed.path, dict(self.query), self.body, auth))
        token = self.owner.token
        if token is not None and auth not in (f"token {token}", f"Bearer {token}"):
            self._send(401, {"message": "Bad credentials"})
            return
        inj = self.owner._take_injection(method, parsed.path)
        if inj is not None and not inj.applied:
            self._send(inj.status, inj.body, inj.headers)
            return
        status, body, headers = 404, {"message": "Not Found"}, None
        for m, pattern, fn in _ROUTES:
            match = pattern.match(parsed.path)
            if match and m == method:
                try:
                    with self.owner._lock:
                        status, body = 200, fn(self, match)
                except Reply as reply:
                    status, body, headers = reply.status, reply.body, reply.headers
                break
        if inj is not None:  # it happened, but the client hears the failure
            status, body, headers = inj.status, inj.body, inj.headers
        self._send(status, body, headers)

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    # helpers for routes
    def repo(self, m: re.Match[str]) -> str:
        full = f"{m['o']}/{m['r']}"
        if full not in self.owner.state.repos:
            raise Reply(404, {"message": "Not Found"})
        return full

    def paginate(self, items: list[Any], wrap: Callable[[list[Any]], Any] | None = None) -> Any:
        per_page = max(1, min(100, int(self.query.get("per_page", 30))))
        page = max(1, int(self.query.get("page", 1)))
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        links = []

        def link(p: int, rel: str) -> str:
            q = dict(self.query, per_page=str(per_page), page=str(p))
            return f'<{self.base}{self.route_path}?{urllib.parse.urlencode(q)}>; rel="{rel}"'

        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        if page > 1:
            links += [link(1, "first"), link(page - 1, "prev")]
        headers = {"Link": ", ".join(links)} if links else {}
        raise Reply(200, wrap(chunk) if wrap else chunk, headers)


# The endpoints register themselves on import; everything they need is defined above.
from tests.support import fake_github_routes  # noqa: E402, F401
