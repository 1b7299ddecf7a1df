"""The HTTP boundary shared by the engine clients: one pooled ``httpx.Client``, timeouts, bounded retries.

Retries only where a retry is safe and useful: connection errors (the engine is restarting, a connection was
dropped) and HTTP 503 (SGLang answers it while starting or stopping). Never 400 (our request is wrong or the
engine refuses it: retrying cannot help) and never a timeout (a hang would only hang again, longer).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from typing import Any

import httpx

from precisionbot.engines import jsoncodec
from precisionbot.errors import EngineError, EngineStalled

RETRY_STATUS = frozenset({503})
_JSON_HEADERS = {"Content-Type": "application/json"}
NO_DELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def error_message(response: httpx.Response) -> str:
    """The engine's own error text (SGLang: ``{"error": {"message": ...}}``), shortened to one line."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        body = response.text[:400]
    if isinstance(body, Mapping):
        err = body.get("error", body.get("detail", body.get("message", body)))
        if isinstance(err, Mapping):
            err = err.get("message", err)
        body = err
    text = " ".join(str(body).split())
    return text[:200] + ("..." if len(text) > 200 else "")


class HttpClient:
    """Pooled JSON-over-HTTP calls to one engine, thread-safe (httpx.Client is)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        pool_size: int = 8,
        retries: int = 4,
        backoff_s: float = 0.25,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.busy_s = 0.0
        """Sum of the wall time of every HTTP exchange (a benchmark figure; overlapping calls add up)."""
        limits = httpx.Limits(max_connections=pool_size, max_keepalive_connections=pool_size)
        if transport is None:
            # httpcore writes a request's headers and body separately: with Nagle's algorithm on, the body
            # waits for the ACK of the headers, which the engine's TCP stack may delay by up to 40 ms.
            transport = httpx.HTTPTransport(limits=limits, socket_options=NO_DELAY, trust_env=False)
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            limits=limits,
            transport=transport,
            # Engines run on localhost or a private network; an HTTP(S)_PROXY meant for the internet must not
            # capture them.
            trust_env=False,
        )

    def close(self) -> None:
        self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        what: str,
        timeout_s: float | None = None,
        retry: bool = True,
    ) -> httpx.Response:
        """Send with retries on connection errors and 503; raise ``EngineError`` naming ``what`` otherwise.

        Returns the response whatever its status (other than 503 after the retries): callers decide what a
        4xx means for their endpoint.
        """
        attempts = self.retries + 1 if retry else 1
        last = ""
        body = None if json is None else jsoncodec.encode(json)
        headers = None if json is None else _JSON_HEADERS
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            t0 = time.perf_counter()
            try:
                response = self._client.request(
                    method,
                    path,
                    content=body,
                    headers=headers,
                    timeout=self.timeout_s if timeout_s is None else timeout_s,
                )
            except httpx.TimeoutException as exc:
                limit = self.timeout_s if timeout_s is None else timeout_s
                raise EngineStalled(
                    f"{what}: no answer from {self.base_url}{path} within {limit:g} s ({type(exc).__name__}); "
                    "raise engine.request_timeout_s if the engine is just slow"
                ) from exc
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            except httpx.HTTPError as exc:
                raise EngineError(f"{what}: HTTP error talking to {self.base_url}{path}: {exc}") from exc
            finally:
                self.busy_s += time.perf_counter() - t0
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code} {error_message(response)}"
                continue
            return response
        raise EngineError(
            f"{what}: {self.base_url}{path} failed after {attempts} attempt(s) ({last}); is the engine running?"
        )

    def content_call(
        self, method: str, path: str, *, json: Any = None, what: str, timeout_s: float | None = None
    ) -> bytes:
        """A call that must answer 200; its body's bytes (for a parser that reads them directly)."""
        response = self.request(method, path, json=json, what=what, timeout_s=timeout_s)
        if response.status_code != 200:
            raise EngineError(f"{what}: {path} answered HTTP {response.status_code}: {error_message(response)}")
        return response.content

    def json_call(self, method: str, path: str, *, json: Any = None, what: str, timeout_s: float | None = None) -> Any:
        """A call that must answer 200 with JSON."""
        content = self.content_call(method, path, json=json, what=what, timeout_s=timeout_s)
        with jsoncodec.gc_paused():
            return jsoncodec.decode(content, f"{what}: {path}")
