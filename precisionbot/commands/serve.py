"""``precisionbot serve``: the builtin engine as an SGLang-compatible HTTP server.

Prints the URL once ``/health`` answers and serves until Ctrl-C or SIGTERM. torch is imported inside the
handler so the rest of the CLI starts without it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from precisionbot.builtin.dist_config import DistConfig, parse_dist_addr
from precisionbot.builtin.dumper_config import RuntimeFlags, config_from_env
from precisionbot.builtin.options import DTYPES, FAULT_NAMES, SPEC_ALGORITHMS, EngineOptions, parse_fault
from precisionbot.commands.options.builtin import add_engine_flags, engine_kwargs
from precisionbot.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the builtin engine as an SGLang-compatible HTTP server",
        description="Runs the builtin reference engine behind an SGLang-compatible HTTP API "
        "(/generate, /flush_cache, /server_info, /v1/completions, ...). Prints its URL once healthy. Honours "
        "SGLang's DUMPER_* environment variables (DUMPER_SERVER_PORT=reuse adds POST /dumper/{configure,get_state,"
        "reset}; docs/localize.md). --nnodes N splits each MLP over N nodes: start every rank with the same flags "
        "and its --node-rank (docs/builtin-engine.md, multi-node serving).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=30000, help="port (default 30000; 0 picks a free one)")
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help=f"switch on a fault (repeatable): {', '.join(FAULT_NAMES)}; mantissa, state-mantissa and mlp-bf16 take =N",
    )
    parser.add_argument("--seed", type=int, default=0, help="weight and sampling seed (default 0)")
    parser.add_argument("--page-size", type=int, default=16, help="KV page size in tokens (default 16)")
    parser.add_argument("--chunked-prefill-size", type=int, default=512, help="prefill chunk (default 512)")
    parser.add_argument("--disable-radix-cache", action="store_true", help="no prefix cache")
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="activation dtype")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    parser.add_argument(
        "--sliding-window-size", type=int, default=256, help="hybrid preset: keys a sliding-window layer sees"
    )
    parser.add_argument(
        "--mamba-track-interval", type=int, default=64, help="hybrid preset: tokens between state checkpoints"
    )
    parser.add_argument(
        "--swa-full-tokens-ratio",
        type=float,
        default=0.8,
        help="hybrid preset: size of the sliding-window layers' KV pool as a fraction of the full pool (SGLang's "
        "name and default, 0.8)",
    )
    parser.add_argument(
        "--disable-hybrid-swa-memory",
        action="store_true",
        help="hybrid preset: keep the sliding-window KV in the full pool (no SWA pool, no out-of-window freeing)",
    )
    parser.add_argument(
        "--disable-cuda-graph",
        action="store_true",
        help="SGLang's flag, reported in /server_info; the builtin engine has no CUDA graphs, so the dumper's "
        "hooks run on every forward either way",
    )
    parser.add_argument(
        "--disable-prefill-cuda-graph",
        action="store_true",
        help="SGLang's flag, reported in /server_info; the builtin engine has no CUDA graphs, so the dumper's "
        "hooks run on every forward either way",
    )
    parser.add_argument(
        "--nnodes",
        type=int,
        default=1,
        help="nodes the engine runs on (SGLang's flag; default 1): each layer's MLP is split over them, rank 0 "
        "serves HTTP (docs/builtin-engine.md, multi-node serving)",
    )
    parser.add_argument(
        "--node-rank", type=int, default=0, help="this node's rank 0..nnodes-1 (SGLang's flag; default 0)"
    )
    parser.add_argument(
        "--dist-init-addr",
        default=None,
        metavar="HOST:PORT",
        help="with --nnodes > 1: rank 0 listens here for the other ranks, which connect to it (SGLang's flag)",
    )
    parser.add_argument(
        "--dist-timeout",
        type=float,
        default=300.0,
        help="seconds rank 0 waits for every other rank at start-up, and a rank for rank 0 (default 300)",
    )
    parser.add_argument(
        "--speculative-algorithm",
        choices=SPEC_ALGORITHMS,
        default=None,
        help="speculative decoding (SGLang's flag): NGRAM drafts from the request's own tokens, STANDALONE from "
        "a one-layer draft model sharing the embeddings; /server_info's internal_states count acceptance",
    )
    parser.add_argument(
        "--speculative-num-draft-tokens",
        type=int,
        default=4,
        help="tokens one verify scores, the last accepted one plus the drafts (SGLang's flag; default 4)",
    )
    add_engine_flags(parser)
    parser.set_defaults(handler=run)


def options_from_args(args: argparse.Namespace) -> EngineOptions:
    return EngineOptions(
        seed=args.seed,
        page_size=args.page_size,
        chunked_prefill_size=args.chunked_prefill_size,
        disable_radix_cache=args.disable_radix_cache,
        speculative_algorithm=args.speculative_algorithm,
        speculative_num_draft_tokens=args.speculative_num_draft_tokens,
        faults=tuple(parse_fault(spec) for spec in args.fault),
        dtype=args.dtype,
        device=args.device,
        sliding_window_size=args.sliding_window_size,
        mamba_track_interval=args.mamba_track_interval,
        swa_full_tokens_ratio=args.swa_full_tokens_ratio,
        disable_hybrid_swa_memory=args.disable_hybrid_swa_memory,
        nnodes=args.nnodes,
        **engine_kwargs(args),
    )


def dist_from_args(args: argparse.Namespace) -> DistConfig | None:
    """The multi-node flags, checked (``ConfigError`` naming the fix); None for a one-node engine."""
    if args.nnodes < 1:
        raise ConfigError(f"--nnodes must be >= 1 (got {args.nnodes})")
    if not 0 <= args.node_rank < args.nnodes:
        raise ConfigError(f"--node-rank must be 0..{args.nnodes - 1} for --nnodes {args.nnodes} (got {args.node_rank})")
    if args.nnodes == 1:
        # Accepted and unused, as SGLang does: one launch template ({nnodes} {node_rank} {dist_init_addr}) then
        # serves a one-node allocation and a two-node one alike.
        return None
    if args.dist_init_addr is None:
        raise ConfigError(
            f"--nnodes {args.nnodes} needs --dist-init-addr HOST:PORT (rank 0's address, the same on every rank)"
        )
    if args.dist_timeout <= 0:
        raise ConfigError(f"--dist-timeout must be > 0 seconds (got {args.dist_timeout})")
    host, port = parse_dist_addr(args.dist_init_addr)
    return DistConfig(args.nnodes, args.node_rank, host, port, args.dist_timeout)


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)  # bad faults/options fail here, before torch loads
    dist = dist_from_args(args)
    if dist is not None and dist.node_rank > 0:
        return run_worker(options, dist)
    runtime = RuntimeFlags(args.disable_cuda_graph, args.disable_prefill_cuda_graph, config_from_env(os.environ))
    from precisionbot.builtin.server import BuiltinServer

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    server = BuiltinServer(options, host=args.host, port=args.port, flags=runtime, dist=dist).start()
    try:
        faults = ", ".join(options.fault_specs()) or "none"
        numerics = "deterministic" if options.enable_deterministic_inference else "production"
        nodes = f", {options.nnodes} nodes" if options.nnodes > 1 else ""
        print(server.url, flush=True)
        print(
            f"precisionbot builtin engine ready ({options.preset} model, {numerics} numerics{nodes}, "
            f"faults: {faults}); Ctrl-C to stop",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
    return 0


def run_worker(options: EngineOptions, dist: DistConfig) -> int:
    """Rank > 0: no HTTP; answers rank 0's MLP shard requests until rank 0 closes the connection (exit 0)."""
    import torch

    from precisionbot.builtin.model import Model
    from precisionbot.builtin.tensor_parallel import connect_to_rank0, serve_worker
    from precisionbot.builtin.weights import build_weights

    device = torch.device(options.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    # The whole model is built (the seeded weights are cheap) and the shard taken from it; no KV pool (0 slots).
    model = Model(options, build_weights(options), 0, device)
    sock = connect_to_rank0(options, dist)
    print(
        f"precisionbot builtin engine rank {dist.node_rank} of {dist.nnodes} connected to {dist.addr}",
        file=sys.stderr,
        flush=True,
    )
    serve_worker(model, dist, sock)
    print(f"precisionbot: rank 0 at {dist.addr} closed the connection; rank {dist.node_rank} exits", file=sys.stderr)
    return 0
