"""A tiny vLLM-shaped ``/v1/completions`` server (prompt ids in, ``token_id:N`` tokens, ``prompt_logprobs``).

Modes ``vllm*`` add what a vLLM server started for the ``vllm`` kind answers: ``/version``, ``/metrics``
(``vllm:cache_config_info``), the dev-mode flush and ``usage.prompt_tokens_details``; ``vllm_no_dev`` lacks
the flush (404), ``vllm_no_details`` the cached-token counts; ``vllm_bad_json`` answers every ``/v1/completions`` with
bytes that are not JSON (a malformed answer: the same fault as the SGLang fake's ``bad_json``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.fake_sglang import BOS, VOCAB, toy_logprobs


def _top(row: list[float], k: int) -> list[int]:
    return sorted(range(VOCAB), key=lambda j: -row[j])[:k]


def _completion(body: dict[str, Any], mode: str) -> dict[str, Any]:
    ids = list(body["prompt"])
    seq = list(ids)
    k = int(body.get("logprobs") or 0)
    tokens, lps, tops = [], [], []
    for _ in range(int(body["max_tokens"])):
        row = toy_logprobs(seq)
        tok = max(range(VOCAB), key=lambda j: row[j])
        tokens.append(f"token_id:{tok}" if mode != "text_tokens" else f"t{tok}")
        lps.append(row[tok] if mode != "nan_logprob" else float("nan"))
        # vLLM lists the top-k as {"token_id:N": logprob}, in no promised order.
        tops.append({f"token_id:{j}": row[j] for j in reversed(_top(row, k))})
        seq.append(tok)
    choice: dict[str, Any] = {
        "index": 0,
        "text": "",
        "finish_reason": "length",
        "logprobs": {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": []},
    }
    if body.get("prompt_logprobs") is not None:
        plp: list[Any] = [None]
        kp = int(body["prompt_logprobs"])
        for pos in range(1, len(ids)):
            row = toy_logprobs(ids[:pos])
            # The prompt token and the top-k (k + 1 entries when the token is not among them).
            entry = {
                str(j): {"logprob": row[j], "rank": r + 1, "decoded_token": "x"} for r, j in enumerate(_top(row, kp))
            }
            entry.setdefault(str(ids[pos]), {"logprob": row[ids[pos]], "rank": 99, "decoded_token": "x"})
            plp.append(entry)
        if mode == "short_prompt_logprobs":
            plp = plp[:-1]
        choice["prompt_logprobs"] = plp
    usage: dict[str, Any] = {"prompt_tokens": len(ids), "completion_tokens": len(tokens)}
    if mode.startswith("vllm") and mode != "vllm_no_details":
        usage["prompt_tokens_details"] = {"cached_tokens": 0}
    return {"choices": [choice], "usage": usage}


METRICS = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
    'gpu_memory_utilization="0.9",sliding_window="None"} 1.0\n'
)


@contextmanager
def fake_vllm(mode: str = "ok") -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: Any, raw: bytes | None = None) -> None:
            data = raw if raw is not None else json.dumps(body).encode()
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
            elif self.path == "/version" and mode.startswith("vllm"):
                self._send(200, {"version": "0.32.0"})
            elif self.path == "/metrics" and mode.startswith("vllm"):
                data = METRICS.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/v1/completions" and mode == "vllm_bad_json":
                self._send(200, None, raw=b"{not json")
            elif self.path == "/v1/completions":
                self._send(200, _completion(body, mode))
            elif self.path == "/reset_prefix_cache" and mode.startswith("vllm") and mode != "vllm_no_dev":
                self._send(200, {"success": True})
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
