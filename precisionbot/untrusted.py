"""Reading a file that may be hostile (an artifact of a job that ran PR code, a config, a corpus) with a size cap.

``Path.read_bytes`` on ``/dev/zero`` never ends, and ``read(cap + 1)`` allocates the whole cap up front even
for a small file; reading in chunks costs only what the file holds, up to the cap.

And :data:`FULL_SHA`, the one spelling of a commit id that any untrusted source (an event payload, a slash
command, a plan output, a file a PR's job wrote) must use, for the GitHub side and the report alike.
"""

from __future__ import annotations

import re
from pathlib import Path

CHUNK_BYTES = 1024 * 1024

FULL_SHA = re.compile(r"[0-9a-f]{40}")
"""A full commit id: 40 lower-case hex digits, what GitHub sends (``head.sha``, ``GITHUB_SHA``) and checks out.
Not 64 (git's SHA-256 object format): GitHub hosts no SHA-256 repository, so its API never sends one, and
the event parser, the first gate every id passes, must agree with each later check; one constant keeps
them agreeing should that change. Never a prefix: a short id pins nothing (a colliding commit can be
ground and pushed). Use with ``fullmatch``."""


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
