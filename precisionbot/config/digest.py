"""Which config a result was judged with: the config file's digest, which ``check`` records in ``result.json``
and ``github comment`` compares with the trusted (base branch) config it reads itself.

It sits beside the loader because it names the same file ``load_config_or_default`` reads; the comparison and
the warning it leads to belong to the GitHub side (``gh/provenance.py``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from precisionbot.config.settings import DEFAULT_CONFIG_PATH

DIGEST_KEY = "config_sha256"
"""The ``result.json`` key (an extra key: schema 1 keeps unknown keys)."""
DEFAULTS_DIGEST = "defaults"
"""The digest of "no config file": the built-in defaults."""


def config_digest(path: str | None) -> str:
    """sha256 of the config file ``load_config_or_default(path)`` reads, or ``defaults``."""
    chosen = path or (DEFAULT_CONFIG_PATH if Path(DEFAULT_CONFIG_PATH).is_file() else None)
    if chosen is None:
        return DEFAULTS_DIGEST
    return hashlib.sha256(Path(chosen).read_bytes()).hexdigest()
