"""The builtin engine's fixed training text: what its weights (bigram statistics) and its subword vocabulary
are built from. Pydoc topics and a few stdlib modules, both shipped with Python, so nothing is downloaded."""

from __future__ import annotations

import hashlib
import pydoc_data.topics
import sysconfig
from pathlib import Path

TRAINING_MODULES = ("textwrap.py", "json/decoder.py", "argparse.py", "heapq.py", "shlex.py", "fractions.py")
"""Stdlib sources mixed into the training text so code is as familiar to the model as prose."""

_TEXT_CACHE: list[bytes] = []


def training_documents() -> list[bytes]:
    """The fixed training text, one document per pydoc topic and per stdlib module."""
    if not _TEXT_CACHE:
        docs = [text.encode("utf-8") for _, text in sorted(pydoc_data.topics.topics.items())]
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        for name in TRAINING_MODULES:
            path = stdlib / name
            if path.is_file():
                docs.append(path.read_bytes())
        _TEXT_CACHE.extend(docs)
    return list(_TEXT_CACHE)


def training_digest() -> str:
    """sha256 of the training text (documents length-prefixed): it keys the cached vocabulary."""
    h = hashlib.sha256()
    for doc in training_documents():
        h.update(len(doc).to_bytes(8, "little"))
        h.update(doc)
    return h.hexdigest()
