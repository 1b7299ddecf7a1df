"""Reading a result directory's ``<check>.npz`` safely: sizes checked from the npy headers before decompressing.

The archive may come from a job that ran PR code. ``np.load`` would allocate whatever a header declares
(shape ``(10**11,)`` is 745 GiB before a byte is read) and inflate a zip bomb whole, so each member's npy
header is read first and checked against caps and against the member's own size; only then is the array
read, from a stream that stops at the declared size. Anything else malformed (not a zip, an unknown member,
a 0-d array, strings or objects where numbers belong, lengths that disagree) is a ``DataError`` naming the
file: the report shows that cell as damaged and renders the rest.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionbot.errors import DataError

MAX_ARRAY_BYTES = 64 * 1024 * 1024
"""Largest decompressed array: 8M positions of float64, or 400k of top-20 (a real check has tens of thousands;
the comment job on a small hosted runner holds every cell's arrays at once)."""
MAX_ARCHIVE_BYTES = 256 * 1024 * 1024
"""Largest sum of an archive's decompressed arrays."""
MAX_TOP_K = 1024

COLUMNS = ("sample", "position", "token_id", "lp_ref", "lp_test")
TOP_K = ("top_ids_ref", "top_lp_ref", "top_ids_test", "top_lp_test")
_KINDS = {"sample": "iu", "position": "iu", "token_id": "iu", "top_ids_ref": "iu", "top_ids_test": "iu"}
"""Integer columns; the others are logprobs (floats; integers are accepted and widened)."""


def _header(fh: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(fh, max_header_size=10_000)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(fh, max_header_size=10_000)
    else:
        raise ValueError(f"npy format version {version} is not supported")
    return tuple(int(n) for n in shape), dtype


def _member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, budget: int) -> npt.NDArray[Any]:
    name = info.filename.removesuffix(".npy")
    with zf.open(info) as fh:
        shape, dtype = _header(fh)
        header_bytes = fh.tell()
    want = _KINDS.get(name, "iuf")
    if dtype.kind not in want or dtype.hasobject or dtype.itemsize > 8:
        raise ValueError(f"{name} holds {dtype}, expected {'integers' if want == 'iu' else 'numbers'}")
    ndim = 2 if name in TOP_K else 1
    if len(shape) != ndim or (ndim == 2 and not 1 <= shape[1] <= MAX_TOP_K):
        raise ValueError(f"{name} has shape {shape}, expected {ndim} dimension(s)")
    size = math.prod(shape) * dtype.itemsize
    if size > min(MAX_ARRAY_BYTES, budget):
        raise ValueError(f"{name} declares {size:,} bytes, above the cap of {min(MAX_ARRAY_BYTES, budget):,}")
    if size != info.file_size - header_bytes:
        raise ValueError(f"{name} declares {size:,} bytes of data but holds {info.file_size - header_bytes:,}")
    with zf.open(info) as fh:
        array = np.lib.format.read_array(fh, allow_pickle=False)
    return np.asarray(array, dtype=np.int64 if want == "iu" else np.float64)


def read_arrays(path: str | Path) -> dict[str, npt.NDArray[Any]]:
    """The arrays of a position-record ``.npz``, validated (``DataError`` naming the file otherwise)."""
    path = Path(path)
    known = {f"{n}.npy" for n in (*COLUMNS, *TOP_K)}
    out: dict[str, npt.NDArray[Any]] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            budget = MAX_ARCHIVE_BYTES
            for info in zf.infolist():
                if info.filename not in known:
                    raise ValueError(f"unexpected member {info.filename[:60]!r}")
                array = _member(zf, info, budget)
                budget -= array.nbytes
                out[info.filename.removesuffix(".npy")] = array
    except (OSError, EOFError, ValueError, TypeError, zipfile.BadZipFile, NotImplementedError, RuntimeError) as exc:
        raise DataError(f"{path} is not a valid position-record archive: {str(exc)[:200]}") from exc
    missing = [c for c in COLUMNS if c not in out]
    if missing:
        raise DataError(f"{path} is not a valid position-record archive: it lacks {', '.join(missing)}")
    n = len(out["sample"])
    for name, array in out.items():
        if array.shape[0] != n:
            raise DataError(f"{path}: {name} has {array.shape[0]} rows, sample has {n}")
    for prefix in ("ref", "test"):
        ids, lps = out.get(f"top_ids_{prefix}"), out.get(f"top_lp_{prefix}")
        if (ids is None) != (lps is None) or (ids is not None and lps is not None and ids.shape != lps.shape):
            raise DataError(f"{path}: top_ids_{prefix} and top_lp_{prefix} must be given together, same shape")
    return out
