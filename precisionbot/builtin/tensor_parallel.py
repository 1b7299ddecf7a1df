"""The builtin engine over several nodes: tensor parallelism of each layer's MLP, the cross-node all-reduce.

Rank 0 is the whole engine of one node (HTTP, scheduler, KV pool, attention) except a shard of every MLP; ranks
1..N-1 hold only their MLP shards and serve no HTTP. Rank ``r`` holds the columns ``[F r / N, F (r+1) / N)`` of
the gate and up projections and the matching rows of the down projection (F = ``mlp_hidden``): SwiGLU is
elementwise on the intermediate dimension, so each shard's down projection is a partial sum of the full one and
the shards need nothing from each other. Every rank builds the same weights from ``--seed`` (weights.py) and
takes its shard, so no weight crosses the network, and the MLP keeps no state, so no cache state does either:
per layer rank 0 sends the post-attention norm's output of the batch to every worker, computes its own partial
meanwhile, and sums the partials in rank order (the all-reduce). The wire format is wire.py's.

Numerics: each partial is the fp32 GEMM of its shard with the kernel its rows take (decode rows the split-K
tiling, numerics.py); the sum is fp32 and rounded once to the activation dtype. Against one node only the fp32
summation order of the down projection changes, a float32-ulp difference that the bf16 rounding hides at
almost every element: the same size as production numerics' own prefill-vs-decode difference.

The ``cross-node-bf16`` fault (options.py) is the bug of a custom all-reduce that engines use only for small
messages (one-shot, latency-bound) while NCCL carries the large ones: its buffers are bf16, so a message of at
most ``SMALL_MESSAGE_BYTES`` (the fp32 partial: padded rows x d_model x 4 bytes; 64 rows at d_model 128, i.e.
every decode step, whose batch is at most ``max_running_requests`` 64 rows, and prefill chunks of at most 64
tokens) travels as bf16 partials that are summed in bf16. Prefill chunks of more rows take the correct path.

The ``cross-node-stale`` fault is the other bug class of such an all-reduce: a missing wait on the peer's flag,
so a small message sums the peer's *previous* partial (the layer before, or the previous step's last layer)
instead of this one. Unlike ``cross-node-bf16`` (a bf16 rounding, at production noise), it moves decode logits
far beyond noise, so ``match`` and golden's decode steps fail under production numerics.

Start-up: rank 0 listens on ``--dist-init-addr`` and waits up to ``--dist-timeout`` seconds for every other rank's
HELLO (its rank and a digest of its engine options, which must equal rank 0's); workers retry connecting until
the same timeout, since a scheduler (Slurm) starts the ranks in any order. A worker exits when rank 0 closes the
connection; if a worker dies or breaks the protocol, rank 0's forward raises ``EngineError`` (the scheduler fails
the requests in flight with it, HTTP 500) and every later one too: the MLP shard is gone, so the engine reports
itself unhealthy until it is restarted.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import sys
import threading
import time
from dataclasses import replace

import torch

from precisionbot.builtin import wire
from precisionbot.builtin.dist_config import DistConfig
from precisionbot.builtin.model import TILE, Model
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.wire import Frame, WireError
from precisionbot.errors import EngineError, EngineStartError

SMALL_MESSAGE_BYTES = 32 * 1024
"""Largest all-reduce (fp32 bytes) the ``cross-node-bf16`` fault's custom all-reduce carries."""
RETRY_S = 0.2


def options_digest(options: EngineOptions) -> str:
    """What every rank must agree on: all engine options but the device (nodes may differ in accelerators)."""
    return hashlib.sha256(repr(replace(options, device=None)).encode()).hexdigest()[:16]


class MlpShard:
    """One rank's shard of every layer's MLP, computed with ``model``'s numerics."""

    def __init__(self, model: Model, rank: int, nnodes: int) -> None:
        self.model = model
        f = model.options.mlp_hidden
        a, b = f * rank // nnodes, f * (rank + 1) // nnodes
        self.weights = [
            (torch.cat([w_gu[:, a:b], w_gu[:, f + a : f + b]], dim=1).contiguous(), w_down[a:b].contiguous())
            for *_, w_gu, w_down in model.layers
        ]

    def partial(self, layer: int, h: torch.Tensor, rows: int, decode: torch.Tensor) -> torch.Tensor:
        """This shard's fp32 partial of the down projection for every row of ``h`` ([padded, d]), tile by tile
        as the one-node MLP (each tile takes the kernel of its rows)."""
        w_gu, w_down = self.weights[layer]
        tiles = range(0, h.shape[0], TILE)
        return torch.cat(
            [self.model.mlp_partial(layer, h[t : t + TILE], w_gu, w_down, rows, decode[t : t + TILE]) for t in tiles]
        )


class MlpGroup:
    """Rank 0's side: its own shard plus a connection to every worker (``Model.tp``)."""

    def __init__(self, model: Model, dist: DistConfig, peers: list[socket.socket]) -> None:
        self.model = model
        self.dist = dist
        self.local = MlpShard(model, 0, dist.nnodes)
        self.peers = peers
        """Worker sockets, index r - 1 for rank r."""
        self.carry_bf16 = model.options.has_fault("cross-node-bf16")
        self.stale = model.options.has_fault("cross-node-stale")
        self._previous: dict[int, torch.Tensor] = {}
        """``cross-node-stale``: the last partial each peer sent (index r - 1), what a racing one-shot reads."""
        self.broken: str | None = None
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, model: Model, dist: DistConfig) -> MlpGroup:
        """Listens on ``dist``'s address and returns once every worker has said HELLO (``EngineStartError`` naming
        the missing ranks after ``dist.timeout_s``)."""
        return cls(model, dist, _accept_workers(options_digest(model.options), dist))

    @property
    def healthy(self) -> bool:
        return self.broken is None

    def mlp(self, layer: int, h: torch.Tensor, rows: int, decode: torch.Tensor) -> torch.Tensor:
        with self._lock:
            if self.broken is not None:
                raise EngineError(self.broken)
            small = h.shape[0] * h.shape[1] * 4 <= SMALL_MESSAGE_BYTES
            carry = torch.bfloat16 if self.carry_bf16 and small else torch.float32
            header = {"layer": layer, "rows": rows, "reduce_dtype": str(carry).removeprefix("torch.")}
            message = wire.encode(Frame(wire.MLP, header, [h.to(self.model.act_dtype).cpu(), decode.cpu()]))
            rank = 0
            try:
                for i, peer in enumerate(self.peers):
                    rank = i + 1
                    peer.sendall(message)
                acc = self.local.partial(layer, h, rows, decode).to(carry)
                for i, peer in enumerate(self.peers):
                    rank = i + 1
                    part = _partial(wire.recv(peer), h.shape, carry)
                    if self.stale:
                        # The bug: the one-shot all-reduce of small messages reads the peer's buffer before the
                        # peer's flag says it was written, so it sums the peer's previous message (the layer
                        # before, or the last layer of the step before) whenever the shapes agree.
                        previous, self._previous[i] = self._previous.get(i), part
                        if small and previous is not None and previous.shape == part.shape:
                            part = previous
                    # fp32: one sum, rounded once below; the fault's custom all-reduce adds in bf16.
                    acc = (acc.float() + part.to(acc.device).float()).to(carry)
            except (OSError, WireError) as exc:
                self.broken = (
                    f"multi-node engine: rank {rank} of {self.dist.nnodes} failed during layer {layer}'s MLP "
                    f"all-reduce ({type(exc).__name__}: {exc}); restart every rank (rank 0 listens on "
                    f"{self.dist.addr})"
                )
                self.close()
                raise EngineError(self.broken) from exc
            return self.model.round(acc.float())

    def close(self) -> None:
        for peer in self.peers:
            with contextlib.suppress(OSError):
                peer.shutdown(socket.SHUT_RDWR)
            peer.close()


def _partial(frame: Frame, shape: torch.Size, carry: torch.dtype) -> torch.Tensor:
    if frame.kind == wire.ERROR:
        raise WireError(f"the worker reported: {frame.header.get('message')}")
    if frame.kind != wire.PARTIAL or len(frame.tensors) != 1:
        raise WireError(f"expected one PARTIAL tensor, got {wire.KINDS[frame.kind]} with {len(frame.tensors)}")
    part = frame.tensors[0]
    if tuple(part.shape) != tuple(shape) or part.dtype != carry:
        raise WireError(f"PARTIAL is {part.dtype} {list(part.shape)}, expected {carry} {list(shape)}")
    return part


def _accept_workers(digest: str, dist: DistConfig) -> list[socket.socket]:
    try:
        listener = socket.create_server((dist.host, dist.port), reuse_port=False)
    except OSError as exc:
        raise EngineStartError(
            f"rank 0 cannot listen on --dist-init-addr {dist.addr}: {exc}; give an address of this node and a free "
            "port (it must differ from the HTTP --port when both bind the same host)"
        ) from exc
    peers: dict[int, socket.socket] = {}
    deadline = time.monotonic() + dist.timeout_s
    try:
        while len(peers) < dist.nnodes - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [r for r in range(1, dist.nnodes) if r not in peers]
                raise EngineStartError(
                    f"multi-node engine: rank(s) {', '.join(map(str, missing))} of {dist.nnodes} did not connect to "
                    f"{dist.addr} within {dist.timeout_s:g} s; start them with the same flags and --node-rank R "
                    f"--dist-init-addr {dist.addr} (or raise --dist-timeout)"
                )
            listener.settimeout(min(left, 1.0))
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            rank = _hello(conn, digest, dist, peers)
            if rank is not None:
                peers[rank] = conn
    except BaseException:
        for conn in peers.values():
            conn.close()
        raise
    finally:
        listener.close()
    for conn in peers.values():
        conn.settimeout(dist.timeout_s)
    return [peers[r] for r in range(1, dist.nnodes)]


def _hello(conn: socket.socket, digest: str, dist: DistConfig, peers: dict[int, socket.socket]) -> int | None:
    """The worker's rank once its HELLO checks out; None (refused, closed) for a malformed or stray one; an
    ``EngineStartError`` for a rank configured unlike rank 0 (the run cannot work without it)."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.settimeout(10.0)
    try:
        frame = wire.recv(conn)
        h = frame.header
        if frame.kind != wire.HELLO or h.get("version") != wire.VERSION or frame.tensors:
            raise WireError(f"expected HELLO version {wire.VERSION}, got {wire.KINDS[frame.kind]} {h!r}")
        rank, nnodes = h.get("rank"), h.get("nnodes")
        if not isinstance(rank, int) or not 1 <= rank < dist.nnodes or rank in peers:
            raise WireError(f"rank {rank!r} is not a free worker rank 1..{dist.nnodes - 1}")
    except (OSError, WireError) as exc:
        print(f"precisionbot: refused a connection on {dist.addr}: {exc}", file=sys.stderr, flush=True)
        _refuse(conn, str(exc))
        return None
    if nnodes != dist.nnodes or h.get("options") != digest:
        reason = (
            f"rank {rank} was started with other engine options than rank 0 (nnodes {nnodes} vs {dist.nnodes}, "
            f"options digest {h.get('options')} vs {digest}): every rank needs the same flags but --node-rank"
        )
        _refuse(conn, reason)
        raise EngineStartError(f"multi-node engine: {reason}")
    wire.send(conn, Frame(wire.WELCOME))
    return rank


def _refuse(conn: socket.socket, reason: str) -> None:
    with contextlib.suppress(OSError):
        wire.send(conn, Frame(wire.REFUSE, {"reason": reason}))
    conn.close()


# ---- ranks 1..N-1 ---------------------------------------------------------------------------------------------
def connect_to_rank0(options: EngineOptions, dist: DistConfig) -> socket.socket:
    """Connects (retrying until ``dist.timeout_s``) and says HELLO; ``EngineStartError`` if refused or late."""
    deadline = time.monotonic() + dist.timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection((dist.host, dist.port), timeout=max(0.1, deadline - time.monotonic()))
            break
        except OSError as exc:
            last = exc
            time.sleep(RETRY_S)
    else:
        raise EngineStartError(
            f"rank {dist.node_rank}: no rank 0 answered on {dist.addr} within {dist.timeout_s:g} s ({last}); "
            "start rank 0 with the same --dist-init-addr (or raise --dist-timeout)"
        )
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    hello = {"version": wire.VERSION, "rank": dist.node_rank, "nnodes": dist.nnodes, "options": options_digest(options)}
    try:
        wire.send(sock, Frame(wire.HELLO, hello))
        answer = wire.recv(sock)
    except (OSError, WireError) as exc:
        sock.close()
        raise EngineStartError(f"rank {dist.node_rank}: rank 0 at {dist.addr} broke off the handshake: {exc}") from exc
    if answer.kind != wire.WELCOME:
        sock.close()
        reason = answer.header.get("reason")
        raise EngineStartError(f"rank {dist.node_rank}: rank 0 at {dist.addr} refused it: {reason}")
    sock.settimeout(None)  # rank 0 may idle between requests for as long as it likes
    return sock


def serve_worker(model: Model, dist: DistConfig, sock: socket.socket) -> None:
    """Answers MLP frames until rank 0 closes the connection; a malformed frame or a lost rank 0 mid-frame
    raises ``EngineError`` (after telling rank 0, where it still listens)."""
    shard = MlpShard(model, dist.node_rank, dist.nnodes)
    try:
        while True:
            try:
                frame = wire.recv(sock)
            except wire.ConnectionClosed as exc:
                if exc.clean:
                    return
                raise
            try:
                layer, h, rows, decode, carry = _mlp_request(frame, model)
                out = shard.partial(layer, h.float().to(model.device), rows, decode.to(model.device)).to(carry)
            except WireError as exc:
                _send_error(sock, str(exc))
                raise
            wire.send(sock, Frame(wire.PARTIAL, {}, [out.cpu()]))
    finally:
        sock.close()


def _mlp_request(frame: Frame, model: Model) -> tuple[int, torch.Tensor, int, torch.Tensor, torch.dtype]:
    h_ = frame.header
    if frame.kind != wire.MLP or len(frame.tensors) != 2:
        raise WireError(f"expected an MLP frame with 2 tensors, got {wire.KINDS[frame.kind]}")
    layer, rows, carry = h_.get("layer"), h_.get("rows"), wire.DTYPES.get(str(h_.get("reduce_dtype")))
    h, decode = frame.tensors
    d = model.options.d_model
    if not isinstance(layer, int) or not 0 <= layer < len(model.layers):
        raise WireError(f"MLP frame: layer {layer!r} is not one of 0..{len(model.layers) - 1}")
    if carry not in (torch.float32, torch.bfloat16):
        raise WireError(f"MLP frame: reduce_dtype {h_.get('reduce_dtype')!r} is not float32 or bfloat16")
    padded = h.shape[0] if h.dim() == 2 else -1
    if h.dtype != model.act_dtype or h.dim() != 2 or h.shape[1] != d or padded % TILE or padded == 0:
        raise WireError(f"MLP frame: h is {h.dtype} {list(h.shape)}, expected {model.act_dtype} [k x {TILE}, {d}]")
    if decode.dtype != torch.bool or list(decode.shape) != [padded]:
        raise WireError(f"MLP frame: decode is {decode.dtype} {list(decode.shape)}, expected bool [{padded}]")
    if not isinstance(rows, int) or not 0 < rows <= padded:
        raise WireError(f"MLP frame: rows {rows!r} is not 1..{padded}")
    return layer, h, rows, decode, carry


def _send_error(sock: socket.socket, message: str) -> None:
    with contextlib.suppress(OSError):
        wire.send(sock, Frame(wire.ERROR, {"message": message}))
