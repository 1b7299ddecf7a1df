"""Which GPUs of a host are taken, by which container: lease files under one folder, changed under ``flock``.

A lease belongs to a container, not to the agent that made it: an agent that was killed leaves its container
running on those GPUs, and the lease stays taken until that container is gone. Several agents on one host
(one per GPU, as SGLang's hosts run one runner per GPU) share the folder; a lease whose container no longer
exists is stale and free again. ``flock`` makes "look, then write" one step across agents, and the kernel
drops it when its holder dies, so a killed agent never leaves the folder locked.
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


class GpuLeases:
    def __init__(self, folder: Path, gpus: Sequence[int]) -> None:
        self.folder, self.gpus = folder, tuple(gpus)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _holder(self, gpu: int) -> str | None:
        try:
            return (self.folder / f"gpu-{gpu}").read_text().strip() or None
        except FileNotFoundError:
            return None

    def acquire(self, count: int, owner: str, exists: Callable[[str], bool]) -> tuple[int, ...] | None:
        """``count`` free GPUs leased to container ``owner``, or ``None`` (nothing leased) if fewer are free.
        ``exists`` says whether a lease's container still exists (a stale lease is free)."""
        with self._locked():
            free = [g for g in self.gpus if (h := self._holder(g)) is None or h == owner or not exists(h)]
            if len(free) < count:
                return None
            chosen = tuple(free[:count])
            for gpu in chosen:
                (self.folder / f"gpu-{gpu}").write_text(owner)
            return chosen

    def release(self, owner: str) -> None:
        with self._locked():
            for gpu in self.gpus:
                if self._holder(gpu) == owner:
                    (self.folder / f"gpu-{gpu}").unlink()

    def holders(self) -> dict[int, str]:
        return {g: h for g in self.gpus if (h := self._holder(g)) is not None}
