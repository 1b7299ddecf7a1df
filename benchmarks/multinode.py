"""Per-request overhead of the builtin engine's MLP split over nodes (tensor_parallel.py) on loopback.

Starts a one-node engine and an N-node one (rank 0 in this process, ranks 1..N-1 as worker threads over real
TCP on 127.0.0.1), sends the same greedy requests to each and prints a table of wall time per request. Each
decode step costs one round trip per layer and worker (the all-reduce), so the overhead grows with the steps.

    .venv/bin/python benchmarks/multinode.py [--preset tiny|hybrid] [--nnodes 2] [--reps 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
from collections.abc import Callable

import httpx
import torch

from precisionbot.builtin import BuiltinServer, EngineOptions
from precisionbot.builtin.dist_config import DistConfig
from precisionbot.builtin.model import Model
from precisionbot.builtin.tensor_parallel import connect_to_rank0, serve_worker
from precisionbot.builtin.weights import build_weights

SHAPES = [(512, 0, 1), (512, 32, 1), (512, 32, 8), (2048, 0, 1)]
"""(prompt tokens, new tokens, requests in one /generate call)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _time(url: str, prompt: int, new: int, batch: int, reps: int) -> float:
    ids = [[(7 * i + j) % 250 + 3 for j in range(prompt)] for i in range(batch)]
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new, "temperature": 0}}
    times = []
    with httpx.Client(timeout=600) as client:
        for _ in range(reps + 1):  # the first is a warm-up
            client.post(f"{url}/flush_cache")
            t0 = time.perf_counter()
            assert client.post(f"{url}/generate", json=body).status_code == 200
            times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def _with_engine(options: EngineOptions, fn: Callable[[str], list[float]]) -> list[float]:
    if options.nnodes == 1:
        with BuiltinServer(options) as server:
            return fn(server.url)
    port = _free_port()
    for rank in range(1, options.nnodes):
        dist = DistConfig(options.nnodes, rank, "127.0.0.1", port, 60)
        model = Model(options, build_weights(options), 0, torch.device("cpu"))
        threading.Thread(
            target=lambda d=dist, m=model: serve_worker(m, d, connect_to_rank0(options, d)), daemon=True
        ).start()
    with BuiltinServer(options, dist=DistConfig(options.nnodes, 0, "127.0.0.1", port, 60)) as server:
        return fn(server.url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=("tiny", "hybrid"))
    parser.add_argument("--nnodes", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    def run(url: str) -> list[float]:
        return [_time(url, p, n, b, args.reps) for p, n, b in SHAPES]

    one = _with_engine(EngineOptions(preset=args.preset), run)
    many = _with_engine(EngineOptions(preset=args.preset, nnodes=args.nnodes), run)
    print(f"| {args.preset}: prompt x new tokens x requests | 1 node (s) | {args.nnodes} nodes (s) | overhead |")
    print("| --- | ---: | ---: | ---: |")
    for (p, n, b), a, c in zip(SHAPES, one, many, strict=True):
        steps = n * len(EngineOptions(preset=args.preset).layer_kinds)
        per = f", {1000 * (c - a) / steps:.2f} ms per decode step x layer" if steps else ""
        print(f"| {p} x {n} x {b} | {a:.3f} | {c:.3f} | {100 * (c / a - 1):+.0f} %{per} |")


if __name__ == "__main__":
    main()
