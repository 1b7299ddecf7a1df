"""Which config a result was judged with: the digest ``check`` recorded in ``result.json``
(``config/digest.py``), compared by ``github comment`` with the trusted (base branch) config it reads itself.

The GPU job runs the PR's code, so a PR can change .github/precision.yml (or the file the check reads) and
with it the thresholds and checks behind the verdict. The comment job reads the base branch's config; when a
result names another digest, or none, the comment says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from precisionbot.config import DIGEST_KEY


def foreign_config_note(trusted: str, results: Sequence[tuple[str, Mapping[str, Any]]]) -> str | None:
    """A one-paragraph warning naming the sections whose recorded digest is not ``trusted`` (None if all match).

    ``results`` pairs each section's label with its result's extra keys."""
    odd = [label for label, extra in results if extra.get(DIGEST_KEY) != trusted]
    if not odd:
        return None
    names = ", ".join(f"`{label.replace('`', '')}`" for label in odd[:8]) + (" ..." if len(odd) > 8 else "")
    return (
        f"> [!WARNING]\n> {names}: the checks ran with a config that is not the base branch's "
        f"(`{trusted[:12]}`), or did not say which. The PR may have changed the checks or thresholds behind "
        "this verdict; review its changes to .github/precision.yml.\n"
    )
