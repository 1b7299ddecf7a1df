"""A tiny SGLang-shaped HTTP server for client and check tests: a deterministic toy "model", a toy prefix
cache, and switchable misbehaviour (wrong lengths, nulls, NaN, 500s, 503s, hangs, busy flushes).

Not the builtin engine: it exists to produce answers that are wrong in precise ways.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VOCAB = 40
BOS = 1


def toy_logprobs(prefix: list[int]) -> list[float]:
    """log_softmax of logits that depend on the last two tokens and the position (deterministic)."""
    a = prefix[-1] if prefix else 0
    b = prefix[-2] if len(prefix) > 1 else 0
    n = len(prefix)
    logits = [2.5 * math.sin(0.37 * a * (j + 1) + 0.11 * b + 0.05 * n + j) for j in range(VOCAB)]
    m = max(logits)
    lse = m + math.log(sum(math.exp(x - m) for x in logits))
    return [x - lse for x in logits]


@dataclass
class Behaviour:
    """Switches; each names one way to be wrong."""

    mode: str = "ok"
    """ok | short_output | short_input | null_output | null_input_mid | nan | wrong_batch | no_meta |
    status500 | status400 | hang | wrong_ids | bad_json | decode_bias | cache_bias"""
    busy_flushes: int = 0
    """Answer 400 to this many /flush_cache calls first."""
    unavailable: int = 0
    """Answer 503 to this many /generate calls first."""
    disable_radix_cache: bool = False
    server_info_404: bool = False
    hang_s: float = 5.0
    bias: float = 0.0
    never_cache: bool = False
    """Report cached_tokens 0 while claiming the radix cache is on."""
    cached_shift: int = 0
    """Report this many cached tokens fewer than the toy cache served (a wrong cached_tokens)."""
    server_info_extra: dict[str, Any] = field(default_factory=dict)
    """More /server_info fields (page_size, uses_mamba_radix_cache, mamba_track_interval ...)."""
    calls: list[str] = field(default_factory=list)
    bodies: list[Any] = field(default_factory=list)


class FakeState:
    def __init__(self, behaviour: Behaviour) -> None:
        self.b = behaviour
        self.cache: list[tuple[int, ...]] = []
        self.lock = threading.Lock()

    def cached(self, ids: list[int]) -> int:
        if self.b.disable_radix_cache or self.b.never_cache:
            return 0
        best = 0
        for seq in self.cache:
            n = 0
            for x, y in zip(seq, ids, strict=False):
                if x != y:
                    break
                n += 1
            best = max(best, n)
        # Like a paged cache: tiny accidental overlaps (a shared BOS) are not hits.
        return min(best, len(ids) - 1) if best >= 4 else 0

    def one(self, ids: list[int], sp: dict[str, Any], start: int, top: int, text: bool) -> dict[str, Any]:
        with self.lock:
            cached = self.cached(ids)
        seq = list(ids)
        out: list[list[Any]] = []
        out_top: list[Any] = []
        for _ in range(int(sp.get("max_new_tokens", 128))):
            lps = toy_logprobs(seq)
            if self.b.mode == "decode_bias" or (self.b.mode == "cache_bias" and cached > 0):
                lps = [lp - self.b.bias * ((j % 3) - 1) for j, lp in enumerate(lps)]
            tok = max(range(VOCAB), key=lambda j: lps[j])
            out.append([lps[tok], tok, f"t{tok}" if text else None])
            out_top.append(_top(lps, top, text))
            seq.append(tok)
        inp: list[list[Any]] = []
        inp_top: list[Any] = []
        if start >= 0:
            for pos in range(start, len(ids)):
                if pos == start:
                    inp.append([None, ids[pos], f"t{ids[pos]}" if text else None])
                    inp_top.append(None)
                    continue
                lps = toy_logprobs(ids[:pos])
                inp.append([lps[ids[pos]], ids[pos], f"t{ids[pos]}" if text else None])
                inp_top.append(_top(lps, top, text))
        with self.lock:
            self.cache.append(tuple(seq))
        meta = {
            "id": "x",
            "finish_reason": {"type": "length", "length": len(out)},
            "prompt_tokens": len(ids),
            "completion_tokens": len(out),
            "cached_tokens": max(0, cached - self.b.cached_shift) if cached else 0,
            "e2e_latency": 0.001,
            "input_token_logprobs": inp,
            "output_token_logprobs": out,
        }
        if top:
            meta["input_top_logprobs"] = inp_top
            meta["output_top_logprobs"] = out_top
        return {"text": "", "output_ids": [t[1] for t in out], "meta_info": meta}


def _top(lps: list[float], k: int, text: bool) -> list[list[Any]]:
    order = sorted(range(VOCAB), key=lambda j: -lps[j])[:k]
    return [[lps[j], j, f"t{j}" if text else None] for j in order]


def _per(value: Any, i: int, default: Any) -> Any:
    if isinstance(value, list):
        return value[i]
    return default if value is None else value


def _corrupt(mode: str, items: list[dict[str, Any]]) -> Any:
    meta = items[0]["meta_info"]
    if mode == "short_output":
        meta["output_token_logprobs"] = meta["output_token_logprobs"][:-1]
    elif mode == "short_input" and meta["input_token_logprobs"]:
        meta["input_token_logprobs"] = meta["input_token_logprobs"][:-1]
    elif mode == "null_output" and meta["output_token_logprobs"]:
        meta["output_token_logprobs"][0][0] = None
    elif mode == "null_input_mid" and len(meta["input_token_logprobs"]) > 2:
        meta["input_token_logprobs"][2][0] = None
    elif mode == "nan" and meta["output_token_logprobs"]:
        meta["output_token_logprobs"][0][0] = float("nan")
    elif mode == "wrong_ids" and meta["output_token_logprobs"]:
        items[0]["output_ids"][0] += 1
    elif mode == "no_meta":
        del items[0]["meta_info"]
    elif mode == "wrong_batch":
        return items[:-1] if len(items) > 1 else items + items
    return items


class _Handler(BaseHTTPRequestHandler):
    state: FakeState
    disable_nagle_algorithm = True  # else each answer waits ~40 ms for a delayed ACK

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(body).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def do_GET(self) -> None:
        b = self.state.b
        b.calls.append(f"GET {self.path}")
        if self.path == "/server_info" and not b.server_info_404:
            info = {"disable_radix_cache": b.disable_radix_cache, "version": "fake", "tp_size": 1}
            self._send(200, {**info, **b.server_info_extra})
        elif self.path == "/get_server_info":
            self._send(200, {"disable_radix_cache": b.disable_radix_cache, "version": "fake-old"})
        elif self.path in ("/health", "/health_generate"):
            self._send(200, {})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        b, st = self.state.b, self.state
        b.calls.append(f"POST {self.path}")
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        b.bodies.append(body)
        if self.path == "/flush_cache":
            if b.busy_flushes > 0:
                b.busy_flushes -= 1
                self._send(400, {"error": {"message": "busy"}})
                return
            with st.lock:
                st.cache.clear()
            self._send(200, {})
            return
        if self.path != "/generate":
            self._send(404, {"error": {"message": "not found"}})
            return
        if b.unavailable > 0:
            b.unavailable -= 1
            self._send(503, {"error": {"message": "starting"}})
            return
        if b.mode == "status500":
            self._send(500, {"error": {"message": "CUDA error: an illegal memory access"}})
            return
        if b.mode == "status400":
            self._send(400, {"error": {"message": "input_ids out of range"}})
            return
        if b.mode == "hang":
            time.sleep(b.hang_s)
        if b.mode == "bad_json":
            self._send(200, None, raw=b"{not json")
            return
        if "text" in body:
            texts = body["text"]
            batch = [[BOS] + [2 + (ord(c) % (VOCAB - 2)) for c in t] for t in texts]
        else:
            batch = body["input_ids"]
        items = [
            st.one(
                ids,
                _per(body.get("sampling_params"), i, {}),
                _per(body.get("logprob_start_len"), i, -1),
                _per(body.get("top_logprobs_num"), i, 0),
                bool(body.get("return_text_in_logprobs")),
            )
            for i, ids in enumerate(batch)
        ]
        self._send(200, _corrupt(b.mode, items))


@contextmanager
def fake_sglang(behaviour: Behaviour | None = None) -> Iterator[tuple[str, Behaviour]]:
    b = behaviour or Behaviour()
    handler = type("H", (_Handler,), {"state": FakeState(b)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", b
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def main() -> None:
    """``python -m tests.support.fake_sglang --port N [--die]``: the fake as a process (launcher tests)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-path", help="ignored: the fake serves its own model")
    parser.add_argument("--die", action="store_true", help="print a log line and exit 7 (a crashing engine)")
    parser.add_argument("--never-healthy", action="store_true")
    parser.add_argument("--hang", action="store_true", help="log a line, then never answer /generate (a stall)")
    args = parser.parse_args()
    print(f"fake engine starting on port {args.port}", flush=True)
    if args.die:
        print("RuntimeError: CUDA out of memory", flush=True)
        sys.exit(7)
    if args.never_healthy:
        time.sleep(3600)
    behaviour = Behaviour()
    if args.hang:
        print("scheduler: waiting for rank 1 in all_reduce", flush=True)
        behaviour = Behaviour(mode="hang", hang_s=3600.0)
    handler = type("H", (_Handler,), {"state": FakeState(behaviour)})
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    server.daemon_threads = True
    server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
