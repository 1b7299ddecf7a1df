"""A tiny vLLM-shaped ``/v1/completions`` server (prompt ids in, ``token_id:N`` tokens, ``prompt_logprobs``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.engines.fake_sglang import BOS, VOCAB, toy_logprobs


def _completion(body: dict[str, Any], mode: str) -> dict[str, Any]:
    ids = list(body["prompt"])
    seq = list(ids)
    tokens, lps = [], []
    for _ in range(int(body["max_tokens"])):
        row = toy_logprobs(seq)
        tok = max(range(VOCAB), key=lambda j: row[j])
        tokens.append(f"token_id:{tok}" if mode != "text_tokens" else f"t{tok}")
        lps.append(row[tok] if mode != "nan_logprob" else float("nan"))
        seq.append(tok)
    choice: dict[str, Any] = {
        "index": 0,
        "text": "",
        "finish_reason": "length",
        "logprobs": {"tokens": tokens, "token_logprobs": lps, "top_logprobs": None, "text_offset": []},
    }
    if body.get("prompt_logprobs") is not None:
        plp: list[Any] = [None]
        for pos in range(1, len(ids)):
            row = toy_logprobs(ids[:pos])
            plp.append({str(ids[pos]): {"logprob": row[ids[pos]], "rank": 1, "decoded_token": "x"}})
        if mode == "short_prompt_logprobs":
            plp = plp[:-1]
        choice["prompt_logprobs"] = plp
    return {"choices": [choice], "usage": {"prompt_tokens": len(ids), "completion_tokens": len(tokens)}}


@contextmanager
def fake_vllm(mode: str = "ok") -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._send(200, {"data": [{"id": "toy"}]})
            elif self.path == "/health":
                self._send(200, {})
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/v1/completions":
                self._send(200, _completion(body, mode))
            elif self.path == "/tokenize":
                # llama_tokenize: llama-server answers vLLM's {model, prompt} with no tokens, reads {content}.
                text = body.get("content" if mode == "llama_tokenize" else "prompt")
                if mode == "no_token_list":
                    self._send(200, {"result": "ok"})
                elif text is None or mode == "empty_tokenize":
                    self._send(200, {"tokens": []})
                else:
                    self._send(200, {"tokens": [BOS] + [2 + (ord(c) % (VOCAB - 2)) for c in text]})
            else:
                self._send(404, {"detail": "Not Found"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
