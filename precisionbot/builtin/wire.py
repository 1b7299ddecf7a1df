"""The wire format between the builtin engine's nodes (tensor_parallel.py): length-prefixed frames over TCP.

Every message is one frame::

    magic      4 bytes   b"PBTP"
    kind       1 byte    HELLO 1, WELCOME 2, REFUSE 3, MLP 4, PARTIAL 5, ERROR 6
    head_len   4 bytes   unsigned big-endian, at most MAX_HEADER_BYTES
    header     head_len  UTF-8 JSON object; its "tensors" key (a list, may be empty) describes the payload:
                         [{"dtype": "float32" | "bfloat16" | "bool", "shape": [n, ...]}, ...]
    payload              each tensor's raw bytes in order: C-contiguous, little-endian, prod(shape) x itemsize
                         bytes (bf16 as its 2-byte storage), MAX_PAYLOAD_BYTES in all at most

The messages (``tensor_parallel.py`` says who sends which and when):

* HELLO (worker -> rank 0): ``{"version", "rank", "nnodes", "options"}`` (a digest of the engine options: every
  rank must build the same weights and numerics), no tensors.
* WELCOME / REFUSE (rank 0 -> worker): ``{}`` / ``{"reason"}``.
* MLP (rank 0 -> worker): ``{"layer", "rows", "reduce_dtype"}``, tensors ``h`` (the post-attention norm's
  output, [padded, d_model], in the activation dtype: its values are exactly representable there) and ``decode``
  ([padded] bool: rows that take the decode kernels).
* PARTIAL (worker -> rank 0): the worker's partial down-projection output [padded, d_model] in ``reduce_dtype``.
* ERROR (either way): ``{"message"}``; the sender closes the connection after it.

Why not pickle: a frame comes from the network, and unpickling runs code. Here every header is checked (its
size before it is read, its keys, dtypes and shapes) before a payload byte is allocated, and anything off is a
``WireError`` naming what was wrong; a clean end of stream at a frame boundary is ``ConnectionClosed``.
"""

from __future__ import annotations

import json
import math
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

import torch

from precisionbot.errors import EngineError

MAGIC = b"PBTP"
VERSION = 1
HELLO, WELCOME, REFUSE, MLP, PARTIAL, ERROR = 1, 2, 3, 4, 5, 6
KINDS = {HELLO: "HELLO", WELCOME: "WELCOME", REFUSE: "REFUSE", MLP: "MLP", PARTIAL: "PARTIAL", ERROR: "ERROR"}
MAX_HEADER_BYTES = 64 * 1024
MAX_PAYLOAD_BYTES = 1 << 30
"""A prefill chunk's activations are ``chunked_prefill_size`` x ``d_model`` x 4 bytes (256 KiB by default): a
gigabyte is far above any real frame and still refuses a corrupt length before allocating it."""
MAX_DIMS = 4
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "bool": torch.bool}
_PREFIX = struct.Struct(">4sBI")


class WireError(EngineError):
    """A malformed frame, or a peer that broke the protocol."""


class ConnectionClosed(WireError):
    """The peer closed the connection (at a frame boundary, or mid-frame: ``clean`` says which)."""

    def __init__(self, message: str, clean: bool) -> None:
        super().__init__(message)
        self.clean = clean


@dataclass
class Frame:
    kind: int
    header: dict[str, Any] = field(default_factory=dict)
    tensors: list[torch.Tensor] = field(default_factory=list)


def encode(frame: Frame) -> bytes:
    """The frame's bytes (``send`` writes them)."""
    if frame.kind not in KINDS:
        raise WireError(f"unknown frame kind {frame.kind}")
    specs, blobs = [], []
    for t in frame.tensors:
        name = next((n for n, d in DTYPES.items() if d == t.dtype), None)
        if name is None:
            raise WireError(f"cannot send a {t.dtype} tensor (allowed: {', '.join(DTYPES)})")
        flat = t.detach().to("cpu").contiguous()
        raw = flat.view(torch.int16) if t.dtype == torch.bfloat16 else flat
        specs.append({"dtype": name, "shape": list(t.shape)})
        blobs.append(raw.numpy().tobytes())
    head = json.dumps({**frame.header, "tensors": specs}).encode()
    if len(head) > MAX_HEADER_BYTES:
        raise WireError(f"header of {len(head)} bytes exceeds {MAX_HEADER_BYTES}")
    return _PREFIX.pack(MAGIC, frame.kind, len(head)) + head + b"".join(blobs)


def send(sock: socket.socket, frame: Frame) -> None:
    sock.sendall(encode(frame))


def recv(sock: socket.socket) -> Frame:
    """The next frame; ``ConnectionClosed`` at end of stream, ``WireError`` for anything malformed."""
    prefix = _read(sock, _PREFIX.size, at_boundary=True)
    magic, kind, head_len = _PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise WireError(f"bad magic {magic!r} (expected {MAGIC!r}): the peer is not a precisionbot engine node")
    if kind not in KINDS:
        raise WireError(f"unknown frame kind {kind}")
    if head_len > MAX_HEADER_BYTES:
        raise WireError(f"header length {head_len} exceeds {MAX_HEADER_BYTES} bytes")
    try:
        header = json.loads(_read(sock, head_len, at_boundary=False))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"{KINDS[kind]} header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError(f"{KINDS[kind]} header must be a JSON object")
    specs = _specs(header.pop("tensors", None), KINDS[kind])
    tensors = []
    for dtype, shape, nbytes in specs:
        raw = bytearray(_read(sock, nbytes, at_boundary=False))
        if dtype == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if nbytes else torch.empty(0, dtype=dtype)
        else:
            t = torch.frombuffer(raw, dtype=dtype) if nbytes else torch.empty(0, dtype=dtype)
        tensors.append(t.reshape(shape))
    return Frame(kind, header, tensors)


def _specs(raw: Any, kind: str) -> list[tuple[torch.dtype, list[int], int]]:
    if not isinstance(raw, list) or len(raw) > 16:
        raise WireError(f"{kind} header: 'tensors' must be a list of at most 16 tensor descriptions")
    out, total = [], 0
    for spec in raw:
        if not isinstance(spec, dict) or set(spec) != {"dtype", "shape"}:
            raise WireError(f"{kind} header: a tensor description must be {{'dtype', 'shape'}} (got {spec!r})")
        dtype = DTYPES.get(spec["dtype"]) if isinstance(spec["dtype"], str) else None
        if dtype is None:
            raise WireError(f"{kind} header: dtype {spec['dtype']!r} is not one of {', '.join(DTYPES)}")
        shape = spec["shape"]
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_DIMS
            or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 31 for n in shape)
        ):
            raise WireError(f"{kind} header: shape {shape!r} must be a list of at most {MAX_DIMS} sizes >= 0")
        nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        total += nbytes
        if total > MAX_PAYLOAD_BYTES:
            raise WireError(f"{kind} payload exceeds {MAX_PAYLOAD_BYTES} bytes")
        out.append((dtype, shape, nbytes))
    return out


def _read(sock: socket.socket, n: int, *, at_boundary: bool) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            clean = at_boundary and not buf
            where = "between frames" if clean else f"mid-frame ({len(buf)} of {n} bytes)"
            raise ConnectionClosed(f"the peer closed the connection {where}", clean)
        buf += chunk
    return bytes(buf)
