"""The SGLang-compatible HTTP server (stdlib ``ThreadingHTTPServer``) in a background thread of this process.

Handler threads parse and validate, ``submit`` to the scheduler thread and wait; one scheduler thread runs
the model. Every client error is HTTP 400 ``{"error": {"message": ...}}`` and the server keeps serving.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import torch

from precisionbot import __version__
from precisionbot.builtin import moe
from precisionbot.builtin.dist_config import DistConfig
from precisionbot.builtin.dumper import Dumper, route_method
from precisionbot.builtin.dumper_config import DumperRequestError, RuntimeFlags
from precisionbot.builtin.model import Model
from precisionbot.builtin.openai_api import (
    MODEL_NAME,
    completion_response,
    detokenize_response,
    parse_completions,
    tokenize_response,
)
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.request import LogprobParams, Request, SamplingParams
from precisionbot.builtin.scheduler import Scheduler
from precisionbot.builtin.sglang_api import BadRequest, parse_generate, response
from precisionbot.builtin.speculative import SpecDecoder
from precisionbot.builtin.tensor_parallel import MlpGroup
from precisionbot.builtin.tokenizer import vocab_for
from precisionbot.builtin.weights import build_weights
from precisionbot.errors import EngineStartError

REQUEST_TIMEOUT_S = 3600.0
MAX_BODY_BYTES = 64 * 1024 * 1024


class BuiltinRuntime:
    """Weights, model, KV pool and scheduler for ``options``."""

    def __init__(
        self, options: EngineOptions, flags: RuntimeFlags | None = None, dist: DistConfig | None = None
    ) -> None:
        self.options = options
        self.flags = flags or RuntimeFlags()
        device = options.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(device)
        self.vocab = vocab_for(options.vocab_name)
        weights = build_weights(options)
        model = Model(options, weights, options.kv_pool_tokens, self.device)
        self.group: MlpGroup | None = None
        """Rank 0 of a multi-node engine: the workers holding the other MLP shards (tensor_parallel.py)."""
        if dist is not None and dist.nnodes > 1:
            self.group = model.tp = MlpGroup.connect(model, dist)
        self.dumper = Dumper(self.flags.dumper)
        self.dumper.attach(model)
        spec = SpecDecoder(options, model, self.vocab, weights) if options.spec_algorithm is not None else None
        self.scheduler = Scheduler(options, model, self.vocab, spec)

    @property
    def healthy(self) -> bool:
        return self.scheduler.alive and (self.group is None or self.group.healthy)

    def close(self) -> None:
        self.scheduler.stop()
        if self.group is not None:
            self.group.close()

    def server_info(self) -> dict[str, Any]:
        o = self.options
        model_config = {
            "vocab_size": self.vocab.size, "vocab": self.vocab.name,
            "d_model": o.d_model, "n_layers": len(o.layer_kinds),
            "layer_types": list(o.layer_kinds), "n_heads": o.n_heads,
            "n_kv_heads": o.n_kv_heads, "head_dim": o.head_dim, "mlp_hidden": o.mlp_hidden,
            "bos_token_id": self.vocab.bos_id, "eos_token_id": self.vocab.eos_id,
        }  # fmt: skip
        return {
            "model_path": MODEL_NAME,
            "tokenizer_path": None,
            "served_model_name": MODEL_NAME,
            "dtype": o.dtype,
            "kv_cache_dtype": "auto",
            "device": self.device.type,
            # 1 although a multi-node engine splits its MLPs: attention, the KV cache and every other GEMM stay
            # whole on rank 0, and the MLP split is meant to be numerically neutral (tensor_parallel.py), so a
            # baseline recorded on one node is the reference for N nodes (a signature with tp 2 would refuse it).
            "tp_size": 1,
            "nnodes": o.nnodes,
            "mlp_tp_size": o.nnodes,
            "dp_size": 1,
            "page_size": o.page_size,
            "chunked_prefill_size": o.chunked_prefill_size,
            "disable_radix_cache": o.disable_radix_cache,
            "max_running_requests": o.max_running_requests,
            "context_length": o.max_context_tokens,
            "max_total_num_tokens": o.kv_pool_tokens,
            "attention_backend": "builtin",
            "disable_cuda_graph": self.flags.disable_cuda_graph,
            "disable_prefill_cuda_graph": self.flags.disable_prefill_cuda_graph,
            # SGLang's meaning: the server was started with the flag. The batch-variant and nondeterministic
            # faults break what the flag promises, so a server with them does not claim it.
            "enable_deterministic_inference": o.enable_deterministic_inference
            and not any(f.name in ("nondeterministic", "batch-variant") for f in o.faults),
            "model_preset": o.preset,
            # The builtin model's "revision": another preset or vocabulary is another model, so a golden
            # baseline of one is never compared with the other (the signature reads ``revision``).
            "revision": f"{o.preset}-{self.vocab.name}",
            **(_hybrid_info(o) if o.is_hybrid else {}),
            **(_moe_info(o) if o.moe_layers else {"enable_return_routed_experts": False}),
            # SGLang's server args: speculation is fixed at launch, and a spec engine is another engine.
            "speculative_algorithm": o.spec_algorithm,
            "speculative_num_draft_tokens": o.speculative_num_draft_tokens if o.spec_algorithm else None,
            "random_seed": o.seed,
            "faults": o.fault_specs(),
            "internal_states": [self.scheduler.internal_state()],
            "model_config": model_config,
            "torch_version": torch.__version__,
            "version": f"precisionbot-builtin {__version__}",
        }

    def run(self, requests: list[Request]) -> None:
        self.scheduler.submit(requests)
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        for req in requests:
            if not req.done.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"request {req.rid} did not finish in {REQUEST_TIMEOUT_S:.0f} s")


def _moe_info(o: EngineOptions) -> dict[str, Any]:
    """SGLang's server-arg name for routed experts (always on here: the MoE preset returns them on request) and
    the Hugging Face config names of the routing shape, which a client needs to split the flat answer."""
    return {
        "enable_return_routed_experts": True,
        "num_experts": moe.N_EXPERTS,
        "num_experts_per_tok": moe.TOP_K,
        "num_hidden_layers": len(o.layer_kinds),
        "moe_layers": list(o.moe_layers),
    }


def _hybrid_info(o: EngineOptions) -> dict[str, Any]:
    """SGLang's server-args names for hybrid (SWA + mamba/linear-attention) caches, with our values."""
    return {
        "mamba_track_interval": o.mamba_track_interval,
        "mamba_ssm_dtype": "float32",
        "mamba_radix_cache_strategy": "checkpoint",
        "sliding_window_size": o.sliding_window_size,
        # With disable_hybrid_swa_memory the sliding-window KV shares the full pool: the ratio is then 1.
        "swa_full_tokens_ratio": o.swa_full_tokens_ratio if o.uses_swa_pool else 1.0,
        "disable_hybrid_swa_memory": not o.uses_swa_pool,
        "swa_max_total_num_tokens": o.swa_pool_tokens if o.uses_swa_pool else o.kv_pool_tokens,
    }


class _Handler(BaseHTTPRequestHandler):
    engine: BuiltinRuntime
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: with Nagle on, the client's delayed ACK stalls each
    # answer by ~40 ms (measured: 45 ms per /server_info round trip, 0.4 ms with this set).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests and CI logs stay readable
        pass

    # ---- plumbing ----
    def _send(self, status: int, payload: Any, content_type: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "code": status}})

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise BadRequest(f"request body too large ({length} bytes)")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequest(f"malformed JSON body: {exc}") from None

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        try:
            body = self._body() if method == "POST" else {}
            handler = _ROUTES.get(path)
            dumper_method = route_method(path) if method == "POST" and self.engine.dumper.routes else None
            if dumper_method is not None:
                self._dumper(dumper_method, body)
                return
            if handler is None:
                self._error(404, f"no route {path}")
                return
            handler(self, body)
        except BadRequest as exc:
            self._error(400, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # a bug of ours: answer 500 and keep serving
            self._error(500, f"{type(exc).__name__}: {exc}")

    # ---- endpoints ----
    def _dumper(self, method: str, body: Any) -> None:
        try:
            self._send(200, self.engine.dumper.handle(method, body))
        except DumperRequestError as exc:
            self._send(400, {"error": [str(exc)]})

    def health(self, body: Any) -> None:
        ok = self.engine.healthy
        self._send(200 if ok else 503, b"", "text/plain")

    def health_generate(self, body: Any) -> None:
        req = Request(
            "health", [self.engine.vocab.bos_id], SamplingParams(max_new_tokens=1, temperature=0.0), LogprobParams()
        )
        self.engine.run([req])
        self._send(200 if req.error is None else 503, b"", "text/plain")

    def flush_cache(self, body: Any) -> None:
        if self.engine.scheduler.flush():
            self._send(200, b"Cache flushed.\n", "text/plain")
        else:
            self._send(400, b"Cache not flushed: requests are running or waiting. Retry later.\n", "text/plain")

    def server_info(self, body: Any) -> None:
        self._send(200, self.engine.server_info())

    def model_info(self, body: Any) -> None:
        self._send(200, {"model_path": MODEL_NAME, "tokenizer_path": None, "is_generation": True})

    def models(self, body: Any) -> None:
        entry = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "precisionbot",
                 "root": MODEL_NAME, "max_model_len": self.engine.options.max_context_tokens}  # fmt: skip
        self._send(200, {"object": "list", "data": [entry]})

    def generate(self, body: Any) -> None:
        call = parse_generate(body, self.engine.options.max_context_tokens, self.engine.vocab)
        if call.stream:
            self._stream(call.requests, call.batch, call.text_in_logprobs)
            return
        self.engine.run(call.requests)
        failed = next((r.error for r in call.requests if r.error), None)
        if failed:
            self._error(500, failed)
            return
        now = time.perf_counter()
        out = [response(r, call.text_in_logprobs, now, self.engine.vocab) for r in call.requests]
        self._send(200, out if call.batch else out[0])

    def _stream(self, requests: list[Request], batch: bool, text_in: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self.engine.scheduler.submit(requests)
        for index, req in enumerate(requests):
            while True:
                event = req.events.get(timeout=REQUEST_TIMEOUT_S)
                while event >= 0 and not req.events.empty():  # a slow reader gets the latest state once
                    event = req.events.get_nowait()
                chunk = response(
                    req, text_in, time.perf_counter(), self.engine.vocab
                )  # lengths may lag by a token mid-stream
                if req.error:
                    chunk = {"error": {"message": req.error}}
                if batch:
                    chunk["index"] = index
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
                if event < 0:
                    break
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def completions(self, body: Any) -> None:
        requests, echo = parse_completions(body, self.engine.options.max_context_tokens, self.engine.vocab)
        self.engine.run(requests)
        failed = next((r.error for r in requests if r.error), None)
        if failed:
            self._error(500, failed)
            return
        self._send(200, completion_response(requests, body, echo, self.engine.vocab))

    def tokenize(self, body: Any) -> None:
        self._send(200, tokenize_response(body, self.engine.options.max_context_tokens, self.engine.vocab))

    def detokenize(self, body: Any) -> None:
        self._send(200, detokenize_response(body, self.engine.vocab))


_ROUTES = {
    "/health": _Handler.health,
    "/health_generate": _Handler.health_generate,
    "/flush_cache": _Handler.flush_cache,
    "/server_info": _Handler.server_info,
    "/get_server_info": _Handler.server_info,
    "/get_model_info": _Handler.model_info,
    "/v1/models": _Handler.models,
    "/generate": _Handler.generate,
    "/v1/completions": _Handler.completions,
    "/tokenize": _Handler.tokenize,
    "/detokenize": _Handler.detokenize,
}


class BuiltinServer:
    """The builtin engine behind an SGLang-compatible HTTP server, in background threads of this process.

    ``start()`` returns once ``/health`` would answer 200; ``url`` is then ``http://HOST:PORT``.
    """

    def __init__(
        self,
        options: EngineOptions,
        host: str = "127.0.0.1",
        port: int = 0,
        flags: RuntimeFlags | None = None,
        dist: DistConfig | None = None,
    ) -> None:
        self.options = options
        self.dist = dist
        """Rank 0's place in a multi-node engine (``serve --nnodes``); None: one node."""
        self.flags = flags
        """The dumper and the CUDA-graph flags /server_info reports (dumper_config.py); None: SGLang's defaults."""
        self.host = host
        self.port = port
        self.url = ""
        self._engine: BuiltinRuntime | None = None
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> BuiltinServer:
        engine = BuiltinRuntime(self.options, self.flags, self.dist)
        handler = type("Handler", (_Handler,), {"engine": engine})
        try:
            httpd = ThreadingHTTPServer((self.host, self.port), handler)
        except OSError as exc:
            engine.close()
            raise EngineStartError(f"cannot listen on {self.host}:{self.port}: {exc}; pick another --port") from exc
        httpd.daemon_threads = True
        engine.scheduler.start()
        self._engine, self._httpd = engine, httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="builtin-http", daemon=True)
        self._thread.start()
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        self.url = f"http://{host}:{httpd.server_address[1]}"
        self._wait_healthy(host, int(httpd.server_address[1]))
        if engine.dumper.config.armed:
            # SGLang's server sends this warm-up request once healthy, and a dumper enabled at start writes it.
            # Only with the dumper armed here, so that the engine's prefix cache otherwise starts empty as before.
            text = engine.vocab.encode("The capital city of France is")
            engine.run([Request("warmup", text, SamplingParams(8, 0.0), LogprobParams())])
        return self

    def _wait_healthy(self, host: str, port: int) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection(host, port, timeout=5)
                conn.request("GET", "/health")
                status = conn.getresponse().status
                conn.close()
                if status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise EngineStartError(f"the builtin engine at {self.url} did not become healthy in 30 s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._engine is not None:
            self._engine.close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd = self._engine = self._thread = None

    def __enter__(self) -> BuiltinServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
