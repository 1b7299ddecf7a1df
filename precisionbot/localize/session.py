"""Driving an engine's dumper over HTTP around localize's own requests, and the captures each path needs.

Dumping is switched on (``POST /dumper/configure {"enable": true, "dir": ..., "exp_name": ...}``) just before
one request and off just after it, so nothing else the engine ran (its warm-up, earlier traffic) lands on
disk; a watchdog switches it off at once if free disk on the dump folder falls below a floor (an enabled
dumper has filled terabytes before). The engine must write to a folder this process can read: same machine.

Paths (each a pair of captures that must agree row for row, line by line in core.py):

* ``decode``: the prompt's decode steps against one fresh prefill of the same tokens (the helpers' ``match``);
* ``prefill-cache-hit`` / ``decode-cache-hit``: a request that resumes from the prefix cache (a cached prompt,
  or a prompt plus its cached decoded tokens) against a fresh prefill of the same tokens;
* ``golden``: the same tokens prefilled by the baseline build and by the PR build;
* ``spec-decode``: the same prompt decoded by the plain arm and by the speculative arm (two engines of one
  build), each arm's rows of the tokens it emitted lined up by position (``localize.spec``).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precisionbot.engines.base import GenerateRequest
from precisionbot.errors import EngineError
from precisionbot.localize.core import Capture, LocalizationError
from precisionbot.localize.dumps import read_capture
from precisionbot.localize.spec import common_length, emitted_rows

PATHS = ("decode", "prefill-cache-hit", "decode-cache-hit", "golden", "spec-decode")
WATCH_INTERVAL_S = 0.05


class DiskFloorError(LocalizationError):
    """Free disk fell below the floor while dumping; dumping was switched off."""


class DumperDriver:
    """One engine: its dumper's routes, generation, cache flushes. ``engine`` is any of precisionbot's engine
    clients with an ``http`` client (SGLang's, the builtin engine's, vLLM's with precisionbot's dumper plugin):
    generation goes through the client, so each engine's own request shape and cached-token report are used."""

    def __init__(self, engine: Any, label: str) -> None:
        self.engine = engine
        self.label = label

    def call(self, method: str, body: dict[str, Any]) -> list[dict[str, Any]] | None:
        """``POST /dumper/{method}``; None on 404 (the routes are not registered)."""
        response = self.engine.http.request("POST", f"/dumper/{method}", json=body, what=f"/dumper/{method}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise EngineError(
                f"/dumper/{method} on the {self.label} engine answered {response.status_code}: {response.text[:300]}"
            )
        answer = response.json()
        if not isinstance(answer, list) or not answer or not isinstance(answer[0], dict):
            raise EngineError(f"/dumper/{method} answered {answer!r:.200}, not a list of one object per rank")
        return answer

    def state(self) -> dict[str, Any] | None:
        answer = self.call("get_state", {})
        return None if answer is None else answer[0]

    def configure(self, **changes: Any) -> None:
        if self.call("configure", changes) is None:
            raise EngineError(f"/dumper/configure on the {self.label} engine answered 404")

    def generate(self, input_ids: Sequence[int], max_new_tokens: int) -> tuple[list[int], int]:
        """Greedy generation; (output ids, cached prompt tokens)."""
        request = GenerateRequest(tuple(input_ids), max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=True)
        (answer,) = self.engine.generate([request])
        return list(answer.output_ids), int(answer.cached_tokens)


@dataclass
class Watchdog:
    """Switches dumping off when ``free_bytes(folder)`` drops below ``floor_bytes``."""

    driver: DumperDriver
    folder: Path
    floor_bytes: int
    free_bytes: Callable[[Path], int]
    tripped_at: int | None = None

    def check(self) -> bool:
        free = self.free_bytes(self.folder)
        if free < self.floor_bytes:
            self.tripped_at = free
            self.driver.configure(enable=False)
            return True
        return False


def free_disk_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).free


class Recorder:
    """Captures into ``root/<exp_name>``, each around one request, under the disk watchdog."""

    def __init__(self, root: Path, floor_bytes: int, free_bytes: Callable[[Path], int] = free_disk_bytes) -> None:
        self.root = root.resolve()
        self.floor_bytes = floor_bytes
        self.free_bytes = free_bytes
        self.names: list[str] = []

    @contextmanager
    def dumping(self, driver: DumperDriver, exp_name: str) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        if (self.root / exp_name).exists():
            shutil.rmtree(self.root / exp_name)
        dog = Watchdog(driver, self.root, self.floor_bytes, self.free_bytes)
        if dog.check():
            raise self._floor_error(dog)
        driver.configure(enable=True, dir=str(self.root), exp_name=exp_name, cleanup_previous=False)
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(WATCH_INTERVAL_S):
                if dog.check():
                    return

        thread = threading.Thread(target=watch, name="localize-disk-watchdog", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            driver.configure(enable=False)
        if dog.tripped_at is not None:
            raise self._floor_error(dog)
        self.names.append(exp_name)

    def _floor_error(self, dog: Watchdog) -> DiskFloorError:
        gib = 1024**3
        return DiskFloorError(
            f"free disk on {self.root} is {(dog.tripped_at or 0) / gib:.2f} GiB, below the floor of "
            f"{self.floor_bytes / gib:.2f} GiB: dumping was switched off; free space or lower --disk-floor-gib"
        )

    def read(self, exp_name: str, label: str) -> Capture:
        return read_capture(self.root / exp_name, label)


@dataclass(frozen=True)
class Captures:
    baseline: Capture
    target: Capture
    required: tuple[int, ...]
    prompt_tokens: int
    """Length of the prompt before any generated token (decode step k consumes position prompt_tokens + k - 1)."""
    tokens: tuple[int, ...] = ()
    """The tokens both captures consumed, in order."""


def capture_decode(rec: Recorder, driver: DumperDriver, prompt: Sequence[int], new_tokens: int) -> Captures:
    """Decode steps of ``prompt`` against one fresh prefill of the tokens they consumed."""
    if new_tokens < 2:
        raise LocalizationError("--max-new-tokens must be >= 2: the first decode step consumes the second new token")
    driver.engine.flush_cache()
    with rec.dumping(driver, "decode"):
        out, _ = driver.generate(prompt, new_tokens)
    consumed = list(prompt) + out[:-1]
    driver.engine.flush_cache()
    with rec.dumping(driver, "prefill"):
        driver.generate(consumed, 1)
    return Captures(
        rec.read("prefill", "fresh prefill"),
        rec.read("decode", "decode"),
        tuple(range(len(consumed))),
        len(prompt),
        tuple(consumed),
    )


def capture_cache_hit(
    rec: Recorder, driver: DumperDriver, prompt: Sequence[int], suffix: Sequence[int], decode_tokens: int
) -> Captures:
    """A request resuming from the prefix cache against a fresh prefill of the same tokens. ``decode_tokens``
    0: the prompt was cached by a prefill (``prefill_cache_hit``); more: by generating that many tokens, which
    the second request continues (``decode_cache_hit``)."""
    driver.engine.flush_cache()
    out, _ = driver.generate(prompt, max(decode_tokens, 1))
    tokens = list(prompt) + (out if decode_tokens else []) + list(suffix)
    with rec.dumping(driver, "hit"):
        _, cached = driver.generate(tokens, 1)
    if cached == 0:
        raise LocalizationError(
            "the second request reused no cached token (meta_info.cached_tokens 0): the engine's prefix cache is "
            "off or evicted; a cache-hit localization needs it on"
        )
    driver.engine.flush_cache()
    with rec.dumping(driver, "fresh"):
        driver.generate(tokens, 1)
    return Captures(
        rec.read("fresh", "fresh prefill"),
        rec.read("hit", "cache hit"),
        tuple(range(cached, len(tokens))),
        len(prompt),
        tuple(tokens),
    )


def capture_golden(rec: Recorder, baseline: DumperDriver, target: DumperDriver, tokens: Sequence[int]) -> Captures:
    """The same tokens prefilled by both builds."""
    for driver, name in ((baseline, "baseline"), (target, "target")):
        driver.engine.flush_cache()
        with rec.dumping(driver, name):
            driver.generate(tokens, 1)
    return Captures(
        rec.read("baseline", "baseline build"),
        rec.read("target", "PR build"),
        tuple(range(len(tokens))),
        len(tokens),
        tuple(tokens),
    )


def capture_spec(
    rec: Recorder, plain: DumperDriver, spec: DumperDriver, prompt: Sequence[int], new_tokens: int
) -> Captures:
    """The same prompt decoded greedily by the plain arm and by the spec arm, compared on the positions whose
    tokens both consumed alike: each arm's rows of the tokens it emitted (``localize.spec``), up to the first
    token where the arms' outputs part (past it the rows consume different tokens, and the row before it is
    the one whose numbers chose differently)."""
    if new_tokens < 2:
        raise LocalizationError("--max-new-tokens must be >= 2: the first verify consumes the second new token")
    outputs = {}
    for driver, name in ((plain, "plain"), (spec, "spec")):
        driver.engine.flush_cache()
        with rec.dumping(driver, name):
            outputs[name], _ = driver.generate(prompt, new_tokens)
    sequences = {name: list(prompt) + out for name, out in outputs.items()}
    # The last token is consumed by no forward; past the first differing token the arms consume different ones.
    n = min(common_length(sequences["plain"], sequences["spec"]), len(prompt) + new_tokens - 1)
    consumed = sequences["plain"][:n]
    return Captures(
        emitted_rows(rec.read("plain", "plain decode"), consumed),
        emitted_rows(rec.read("spec", "speculative decode"), consumed),
        tuple(range(n)),
        len(prompt),
        tuple(consumed),
    )


def capture_against_stored(rec: Recorder, stored: Capture, target: DumperDriver, tokens: Sequence[int]) -> Captures:
    """The PR build prefilling the tokens whose baseline-build capture was stored with the golden baseline."""
    target.engine.flush_cache()
    with rec.dumping(target, "target"):
        target.generate(tokens, 1)
    # The stored capture keeps only some rows (stored.py): those are the positions to find on both sides.
    kept = tuple(sorted(p for step in stored.steps for p in step.positions))
    return Captures(stored, rec.read("target", "PR build"), kept, len(tokens), tuple(tokens))
