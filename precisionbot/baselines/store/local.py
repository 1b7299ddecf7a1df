"""A ``Store`` in a local directory (``file:///dir`` or a plain path)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from precisionbot.baselines.store.base import ObjectNotFound, check_key
from precisionbot.errors import StoreError


class LocalStore:
    """Objects are files under ``root``; writes go to a temp file first and are published with ``os.link``,
    which fails if the name exists: create-only and atomic, so concurrent writers never clobber each other."""

    def __init__(self, root: Path, uri: str | None = None) -> None:
        self.root = root
        self._uri = uri or str(root)

    @classmethod
    def from_uri(cls, uri: str) -> LocalStore:
        path = unquote(urlparse(uri).path) if uri.startswith("file://") else uri
        if not path:
            raise StoreError(f"baseline store URI {uri!r} names no directory")
        return cls(Path(path).expanduser(), uri)

    @property
    def uri(self) -> str:
        return self._uri

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def put_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.link(tmp, path)
            finally:
                os.unlink(tmp)
        except FileExistsError as exc:
            raise StoreError(f"baseline store object {key} already exists in {self.uri} (keys are immutable)") from exc
        except OSError as exc:
            raise StoreError(f"cannot write {key} to baseline store {self.uri}: {exc.strerror or exc}") from exc

    def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError as exc:
            raise ObjectNotFound(f"baseline store object {key} not found in {self.uri}") from exc
        except OSError as exc:
            raise StoreError(f"cannot read {key} from baseline store {self.uri}: {exc.strerror or exc}") from exc

    def list_keys(self, prefix: str) -> list[str]:
        if not self.root.exists():
            return []
        if not self.root.is_dir():
            raise StoreError(f"baseline store {self.uri} is not a directory")
        keys: list[str] = []
        try:
            for dirpath, _dirs, files in os.walk(self.root):
                rel = Path(dirpath).relative_to(self.root)
                for name in files:
                    if name.startswith(".tmp-"):
                        continue  # a write in progress (or one killed mid-way): not an object
                    key = "/".join((*rel.parts, name))
                    if key.startswith(prefix):
                        keys.append(key)
        except OSError as exc:
            raise StoreError(f"cannot list baseline store {self.uri}: {exc.strerror or exc}") from exc
        return sorted(keys)
