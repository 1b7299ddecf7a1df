"""The baseline-store option, one definition for every command that takes a store, and the rule that a named
local store must exist."""

from __future__ import annotations

from typing import Any

STORE_FLAGS = ("--store", "--baseline-store")
"""One option under two names: ``baseline record`` has always said ``--store``, ``check`` ``--baseline-store``;
either spelling works on every command."""


def add_store_option(parser: Any, *, dest: str = "store", help: str | None = None) -> None:
    """Adds ``--store`` / ``--baseline-store`` (a URI: s3://bucket/prefix, file:///dir or a directory)."""
    first, second = STORE_FLAGS if dest == "store" else STORE_FLAGS[::-1]
    parser.add_argument(first, second, dest=dest, metavar="URI", help=help)


def require_existing_store(store: Any, flag: str) -> None:
    """A local store directory that does not exist is a typo or a store never recorded into: a setup error
    (exit 3) in every command that reads baselines, so ``check`` and ``baseline list`` agree."""
    from precisionbot.baselines.store.local import LocalStore
    from precisionbot.errors import StoreError

    if isinstance(store, LocalStore) and not store.root.exists():
        raise StoreError(
            f"baseline store {store.uri} does not exist; check {flag} "
            "(or baselines.store in the config; `precisionbot baseline record` creates it)"
        )


def store_readers(config: Any, suite: Any) -> tuple[str, ...]:
    """What in ``check``'s suite reads the store: ``golden`` (unless ``baselines.mode: merge-base`` records its
    own), ``vs_main`` (the helpers against main's reruns), ``spec_acceptance`` (``spec_decode`` against main's
    stored acceptance)."""
    from precisionbot.results import CONSISTENCY_CHECKS

    out = []
    if "golden" in suite.checks and config.baselines.mode != "merge-base":
        out.append("golden")
    if config.baselines.vs_main and any(n in CONSISTENCY_CHECKS for n in suite.checks):
        out.append("vs_main")
    if config.baselines.vs_main and "spec_decode" in suite.checks:
        out.append("spec_acceptance")
    return tuple(out)


READ_FOR = {
    "vs_main": "the helpers' comparison with main's noise",
    "spec_acceptance": "spec_decode's comparison with main's acceptance",
}
"""The store's readers other than golden, in the words of the warning that golden does not run."""


def golden_not_in_suite(suite: Any, readers: tuple[str, ...]) -> str | None:
    """The warning for ``--baseline-store`` given to a suite without golden: the store's baseline is never
    compared, so a fault only golden catches passes (exit 0). None when golden runs."""
    if "golden" in suite.checks:
        return None
    compared = [what for key, what in READ_FOR.items() if key in readers]
    used = f" (it is read only for {' and '.join(compared)})" if compared else ""
    return (
        f"a baseline store was given, but suite {suite.name!r} has no golden check{used}: golden does not run; "
        f"add it with `--checks {','.join((*suite.checks, 'golden'))}` or `--suite pr`"
    )


def preflight_check_store(store: Any, readers: tuple[str, ...], model: Any) -> None:
    """``check``'s store verified before the engine starts (``baselines/preflight.py``): listed, and the newest
    good run of the model read (and verified, when small); ``StoreError`` otherwise."""
    from precisionbot.baselines.preflight import preflight_read

    if readers:
        preflight_read(store, None if model is None else model.name)


def preflight_record_store(store: Any, reference: Any, model: Any) -> None:
    """``baseline record``'s store verified before the engine starts: a probe object written where the run
    will be (a create-only policy allows it), and, for an acceptance, the store whose baseline it replaces
    read."""
    from precisionbot.baselines import now_utc
    from precisionbot.baselines.preflight import preflight_read, preflight_write
    from precisionbot.errors import StoreError

    try:
        preflight_write(store, now_utc(), "baseline record")
        if reference is not None:
            preflight_read(reference, None if model is None else model.name)
    except StoreError as exc:
        raise StoreError(f"the baseline store is not usable, the engine was not started: {exc}") from exc
