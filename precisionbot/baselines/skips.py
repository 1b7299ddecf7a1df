"""The one warning line for a run that listing or selection skipped because it is corrupt or foreign.

The store's recommended IAM policy is create-only (no deletes, no overwrites), so such a run stays: the
warning names its key, why, and the one way to silence it, an append-only quarantine marker
(``precisionbot baseline quarantine``). Said once per key and process, however often the store is listed.
"""

from __future__ import annotations

import sys
from typing import TextIO

from precisionbot.baselines.store import Store

_said: set[tuple[str, str]] = set()


def skip_warning(store: Store, key: str, why: str) -> str:
    """``skipped corrupt run KEY (why); to silence this, ...``: the line :func:`warn_skipped` prints."""
    run_id = key.split("/")[3] if key.count("/") >= 4 else key
    return (
        f"skipped corrupt run {key} in {store.uri} ({why}); to silence this, `precisionbot baseline quarantine "
        f"{run_id} --reason ... --store {store.uri}` (the store's policy forbids deletes)"
    )


def warn_skipped(store: Store, key: str, why: str, stream: TextIO | None = None) -> None:
    """Print :func:`skip_warning` on stderr, the first time this key of this store is skipped."""
    if (store.uri, key) in _said:
        return
    _said.add((store.uri, key))
    print(f"precisionbot: warning: {skip_warning(store, key, why)}", file=stream or sys.stderr)
