"""Reading a file that may be hostile (an artifact of a job that ran PR code, a config, a corpus) with a size cap.

``Path.read_bytes`` on ``/dev/zero`` never ends, and ``read(cap + 1)`` allocates the whole cap up front even
for a small file; reading in chunks costs only what the file holds, up to the cap.
"""

from __future__ import annotations

from pathlib import Path

CHUNK_BYTES = 1024 * 1024


class TooLarge(Exception):
    """The file holds more than the cap; ``str()`` says how much is allowed."""


def read_capped(path: str | Path, cap_bytes: int) -> bytes:
    """The bytes of ``path``, or ``TooLarge`` once more than ``cap_bytes`` have been read (``OSError`` as usual)."""
    chunks: list[bytes] = []
    total = 0
    with Path(path).open("rb") as fh:
        while chunk := fh.read(min(CHUNK_BYTES, cap_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > cap_bytes:
                raise TooLarge(f"larger than {cap_bytes:,} bytes")
    return b"".join(chunks)
