"""Path globs for the ``pull_request`` trigger, with the meaning GitHub's ``paths:`` filter gives them. Pure.

``*`` matches within one path segment, ``**`` across segments (``**/`` also matches no directory at all),
``?`` one character except ``/``. A pattern without a slash still has to match the whole path, as in
GitHub (``*.cu`` matches ``a.cu`` but not ``csrc/a.cu``; write ``**/*.cu`` for that).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def matches(path: str, patterns: Iterable[str]) -> bool:
    """True when ``path`` matches any pattern (no patterns = every path matches)."""
    patterns = tuple(patterns)
    return not patterns or any(glob_regex(p).match(path) for p in patterns)


def first_match(paths: Iterable[str], patterns: Iterable[str]) -> str | None:
    """The first path that matches; stops reading ``paths`` there (they come page by page)."""
    patterns = tuple(patterns)
    for path in paths:
        if matches(path, patterns):
            return path
    return None
