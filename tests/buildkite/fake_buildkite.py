"""A small fake of the Buildkite REST endpoint precisionbot calls, served over real HTTP on 127.0.0.1, and the
commit-status endpoint the fake GitHub lacks.

::

    with FakeBuildkite(token="bk-token", organization="vllm", pipeline="ci") as bk:
        bk.url                     # "http://127.0.0.1:PORT/v2" -> buildkite.api_url
        bk.fail_next(403, {"message": "..."})   # the next create answers this
        bk.builds                  # list of the JSON bodies of the builds created, in order

Endpoint: ``POST /v2/organizations/{org}/pipelines/{pipeline}/builds`` (201 with ``number``, ``web_url``,
``commit``, ...; 401 without ``Authorization: Bearer <token>``; 404 for another organization or pipeline; 422
when ``commit`` or ``branch`` is missing, as Buildkite answers).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.fake_github import Reply, _Handler, route

_BUILDS = re.compile(r"^/v2/organizations/(?P<org>[^/]+)/pipelines/(?P<pipeline>[^/]+)/builds$")


class FakeBuildkite:
    def __init__(self, token: str = "bk-token", organization: str = "vllm", pipeline: str = "ci") -> None:
        self.token, self.organization, self.pipeline = token, organization, pipeline
        self.builds: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, str | None]] = []
        self._fail: list[tuple[int, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "FakeBuildkite is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v2"

    def fail_next(self, status: int, body: dict[str, Any] | None = None) -> None:
        with self._lock:
            self._fail.append((status, body or {"message": f"injected {status}"}))

    def __enter__(self) -> FakeBuildkite:
        fake = self

        class Handler(_BuildkiteHandler):
            owner = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-buildkite", daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def answer(self, method: str, path: str, auth: str | None, body: Any) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append((method, path, auth))
            if auth != f"Bearer {self.token}":
                return 401, {"message": "Authentication required. Please supply a valid API Access Token"}
            if self._fail:
                return self._fail.pop(0)
            match = _BUILDS.match(path)
            if method != "POST" or match is None:
                return 404, {"message": "Not Found"}
            if (match["org"], match["pipeline"]) != (self.organization, self.pipeline):
                return 404, {"message": "No pipeline found"}
            if not isinstance(body, dict) or not body.get("commit") or not body.get("branch"):
                return 422, {"message": "Validation failed: Commit can't be blank, Branch can't be blank"}
            self.builds.append(body)
            number = len(self.builds)
            web = f"https://buildkite.com/{self.organization}/{self.pipeline}/builds/{number}"
            return 201, {
                "id": f"build-{number}",
                "number": number,
                "state": "scheduled",
                "web_url": web,
                "commit": body["commit"],
                "branch": body["branch"],
                "message": body.get("message", ""),
            }


class _BuildkiteHandler(BaseHTTPRequestHandler):
    owner: FakeBuildkite
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        status, answer = self.owner.answer(method, self.path, self.headers.get("Authorization"), body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self._serve("POST")

    def do_GET(self) -> None:
        self._serve("GET")


STATUS_STATES = ("error", "failure", "pending", "success")


@route("POST", r"/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/statuses/(?P<sha>[0-9a-f]{40})")
def _create_status(h: _Handler, m: re.Match[str]) -> Any:
    """GitHub's ``POST statuses/{sha}`` for the fake GitHub: 201 with the status (the request is recorded in
    ``fake.requests`` like every other); 422 for a state GitHub does not know or a description over 140."""
    repo = h.repo(m)
    body = h.body if isinstance(h.body, dict) else {}
    if body.get("state") not in STATUS_STATES or len(str(body.get("description", ""))) > 140:
        raise Reply(422, {"message": "Validation Failed"})
    url = f"{h.base}/repos/{repo}/statuses/{m['sha']}"
    raise Reply(201, {"id": 1, "url": url, "context": body.get("context", "default"), **body})
