"""A zero-latency SGLang-compatible engine for client benchmarks: answers recorded once from a real engine run,
served from memory, so a benchmark against it measures only precisionbot (HTTP, parsing, validation, stats).

Recording: ``RecordingTransport`` wraps the client's HTTP transport during a real run and keeps every
``/generate`` answer item by item, keyed by the item's request (prompt, sampling params, logprob options), plus
the static answers (``/server_info``, ``/flush_cache``). Item keys, not whole bodies, so a client that batches
or orders its requests differently replays the same answers. A key seen several times (match's decode and
prefill_cache_hit's decode send the same prompts; only ``cached_tokens`` differs) replays its answers in the
order they were recorded.

Serving: ``python benchmarks/replay_engine.py RECORDING`` listens on 127.0.0.1 (a free port), prints
``READY http://127.0.0.1:PORT`` and answers until its stdin closes (the parent exited or closed the pipe), so
it never outlives the benchmark that started it. ``GET /_replay/served`` answers the item and byte counts
served so far; ``POST /_replay/reset`` rewinds the per-key counters (a new run from the start).

Answer items are stored as orjson encodes them (compact, as SGLang's own server answers).
"""

from __future__ import annotations

import hashlib
import struct
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson

FORMAT = 1
STATIC_PATHS = ("/server_info", "/get_server_info", "/flush_cache", "/health_generate", "/health")


def _per_item(value: Any, i: int, n: int) -> Any:
    """SGLang's batch options are a list (one per prompt) or one value for all."""
    return value[i] if isinstance(value, list) and len(value) == n else value


def item_keys(body: Any) -> list[bytes]:
    """One key per prompt of a ``/generate`` body: a digest of everything that decides that prompt's answer."""
    if not isinstance(body, dict):
        raise ValueError("a /generate body is a JSON object")
    prompts = body.get("input_ids", body.get("text"))
    if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    if not isinstance(prompts, list):
        raise ValueError("a /generate body has input_ids or text")
    n = len(prompts)
    keys = []
    for i, prompt in enumerate(prompts):
        parts = [
            prompt,
            _per_item(body.get("sampling_params"), i, n),
            _per_item(body.get("logprob_start_len", -1), i, n),
            _per_item(body.get("top_logprobs_num", 0), i, n),
            bool(body.get("return_logprob", False)),
            bool(body.get("return_text_in_logprobs", False)),
        ]
        keys.append(hashlib.blake2b(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS), digest_size=16).digest())
    return keys


@dataclass
class Recording:
    """Answers by item key (in recorded order), static answers by path, and each part's served item sequence."""

    items: dict[bytes, list[bytes]] = field(default_factory=dict)
    static: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    parts: dict[str, list[tuple[bytes, int]]] = field(default_factory=dict)
    """Per named part of the recorded run, the (key, occurrence) of each item the client received, in order."""
    _part: str = "default"

    def begin(self, part: str) -> None:
        self._part = part
        self.parts.setdefault(part, [])

    def add(self, key: bytes, answer: bytes) -> None:
        answers = self.items.setdefault(key, [])
        self.parts.setdefault(self._part, []).append((key, len(answers)))
        answers.append(answer)

    def part_items(self, part: str) -> Iterator[bytes]:
        """The answer items of ``part`` in the order the client received them."""
        for key, occurrence in self.parts[part]:
            yield self.items[key][occurrence]

    def save(self, path: Path) -> None:
        blob = bytearray()

        def put(data: bytes) -> list[int]:
            blob.extend(data)
            return [len(blob) - len(data), len(data)]

        index = {
            "format": FORMAT,
            "static": {p: [status, *put(data)] for p, (status, data) in self.static.items()},
            "items": [[key.hex(), [put(a) for a in answers]] for key, answers in self.items.items()],
            "parts": {name: [[k.hex(), o] for k, o in seq] for name, seq in self.parts.items()},
        }
        head = orjson.dumps(index)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as f:
            f.write(struct.pack("<Q", len(head)))
            f.write(head)
            f.write(blob)
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Recording:
        data = path.read_bytes()
        (n,) = struct.unpack_from("<Q", data)
        index = orjson.loads(data[8 : 8 + n])
        if index.get("format") != FORMAT:
            raise ValueError(f"{path}: recording format {index.get('format')}, expected {FORMAT}; re-record it")
        body = memoryview(data)[8 + n :]
        rec = cls()
        rec.static = {p: (int(s), bytes(body[o : o + ln])) for p, (s, o, ln) in index["static"].items()}
        rec.items = {bytes.fromhex(k): [bytes(body[o : o + ln]) for o, ln in spans] for k, spans in index["items"]}
        rec.parts = {name: [(bytes.fromhex(k), int(o)) for k, o in seq] for name, seq in index["parts"].items()}
        return rec


class RecordingTransport(httpx.BaseTransport):
    """Passes every request to ``inner`` and files its answer in ``recording``."""

    def __init__(self, inner: httpx.BaseTransport, recording: Recording) -> None:
        self.inner = inner
        self.recording = recording
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        content = response.read()
        path = request.url.path
        with self._lock:
            if path == "/generate" and response.status_code == 200:
                keys = item_keys(orjson.loads(request.content))
                answer = orjson.loads(content)
                if isinstance(answer, dict):
                    answer = [answer]
                if len(answer) != len(keys):
                    raise RuntimeError(f"/generate answered {len(answer)} items for {len(keys)} prompts")
                for key, item in zip(keys, answer, strict=True):
                    self.recording.add(key, orjson.dumps(item))
            elif path in STATIC_PATHS:
                self.recording.static[path] = (response.status_code, content)
        return httpx.Response(response.status_code, headers=response.headers, content=content)

    def close(self) -> None:
        self.inner.close()


class _Replay:
    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.lock = threading.Lock()
        self.next: dict[bytes, int] = {}
        self.items_served = 0
        self.bytes_served = 0

    def answer(self, key: bytes) -> bytes | None:
        with self.lock:
            answers = self.recording.items.get(key)
            if not answers:
                return None
            i = self.next.get(key, 0)
            self.next[key] = i + 1
            out = answers[i % len(answers)]
            self.items_served += 1
            self.bytes_served += len(out)
            return out


class _Handler(BaseHTTPRequestHandler):
    replay: _Replay
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes (see the builtin server)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _static(self, path: str) -> None:
        if path == "/get_server_info" and path not in self.replay.recording.static:
            path = "/server_info"
        if path in ("/health", "/health_generate", "/flush_cache") and path not in self.replay.recording.static:
            self._send(200, b"{}")
            return
        status, data = self.replay.recording.static.get(path, (404, b'{"error":{"message":"not recorded"}}'))
        self._send(status, data)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/_replay/served":
            r = self.replay
            self._send(200, orjson.dumps({"items": r.items_served, "bytes": r.bytes_served}))
        else:
            self._static(path)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path == "/_replay/reset":
            with self.replay.lock:
                self.replay.next.clear()
                self.replay.items_served = self.replay.bytes_served = 0
            self._send(200, b"{}")
        elif path == "/generate":
            keys = item_keys(orjson.loads(body))
            answers = [self.replay.answer(k) for k in keys]
            missing = [i for i, a in enumerate(answers) if a is None]
            if missing:
                message = f"no recorded answer for prompt(s) {missing[:5]} of this batch; re-record (--record)"
                self._send(400, orjson.dumps({"error": {"message": message}}))
                return
            self._send(200, b"[" + b",".join(a for a in answers if a is not None) + b"]")
        else:
            self._static(path)


def serve(recording: Recording) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"replay": _Replay(recording)})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    return httpd


def main() -> None:
    recording = Recording.load(Path(sys.argv[1]))
    httpd = serve(recording)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    print(f"READY http://127.0.0.1:{httpd.server_address[1]}", flush=True)
    sys.stdin.read()  # returns when the parent closes the pipe or exits: the server never outlives it
    httpd.shutdown()


if __name__ == "__main__":
    main()
