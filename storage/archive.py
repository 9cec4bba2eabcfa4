"""Content-addressed archive of fetched submission bytes behind a small object-store interface.

Keys are `archive/{digest[:2]}/{digest}` where digest is the SHA-256 of the raw bytes (the
`content_digest` of a SubmissionRecord), so a read can always be verified against its key.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import obstore as obs
from obstore.store import LocalStore
from sqlalchemy import select
from sqlalchemy.orm import Session

from storage import models as m


class BlobStore(Protocol):
    """Bytes by key. `get` raises KeyError for a key that is not there."""

    def put(self, key: str, data: bytes | Path) -> None: ...  # a Path: that file's bytes, streamed
    def get(self, key: str) -> bytes: ...
    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...


def _check_key(key: str) -> str:
    path = PurePosixPath(key)
    if not key or path.is_absolute() or ".." in path.parts:
        raise ValueError(f"unsafe blob key {key!r}")
    return key


class LocalBlobStore:
    """A folder on disk; writes are atomic (temp file then rename), so readers never see half a blob."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def put(self, key: str, data: bytes | Path) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                if isinstance(data, Path):
                    with open(data, "rb") as source:
                        shutil.copyfileobj(source, f, 8 << 20)  # a submission is never whole in memory
                else:
                    f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


class ObjectBlobStore:
    """Any obstore store: a local folder or an S3-compatible bucket."""

    def __init__(self, store: Any) -> None:
        self.store = store

    @classmethod
    def local(cls, root: Path | str) -> ObjectBlobStore:
        return cls(LocalStore(str(root), mkdir=True))

    def put(self, key: str, data: bytes | Path) -> None:
        obs.put(self.store, _check_key(key), data)  # obstore streams a Path

    def get(self, key: str) -> bytes:
        try:
            return bytes(obs.get(self.store, _check_key(key)).bytes())
        except FileNotFoundError:
            raise KeyError(key) from None

    def exists(self, key: str) -> bool:
        try:
            obs.head(self.store, _check_key(key))
        except FileNotFoundError:
            return False
        return True

    def delete(self, key: str) -> None:
        try:
            obs.delete(self.store, _check_key(key))
        except FileNotFoundError:
            return


class ArchiveCorruptError(ValueError):
    """The bytes under a key do not hash to the key's digest."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass(frozen=True, slots=True)
class ArchiveConfig:
    """How long archived submissions are kept: None keeps everything."""

    retention_windows: int | None = None

    def __post_init__(self) -> None:
        if self.retention_windows is not None and self.retention_windows < 1:
            raise ValueError("retention_windows must be >= 1 or None")


class SubmissionArchive:
    """Submission bytes by content digest, shared across windows (a re-upload is stored once)."""

    def __init__(self, store: BlobStore, config: ArchiveConfig | None = None) -> None:
        self.store = store
        self.config = config or ArchiveConfig()

    @staticmethod
    def key(digest: str) -> str:
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"not a lowercase hex SHA-256 digest: {digest!r}")
        return f"archive/{digest[:2]}/{digest}"

    def put(self, data: bytes | Path) -> str:
        """Store the bytes, or a file's (streamed, never read whole), once and return their digest."""
        digest = sha256_hex(data) if isinstance(data, bytes) else file_sha256(data)
        key = self.key(digest)
        if not self.store.exists(key):
            self.store.put(key, data)
        return digest

    def get(self, digest: str) -> bytes:
        data = self.store.get(self.key(digest))
        if sha256_hex(data) != digest:
            raise ArchiveCorruptError(f"archived bytes for {digest} are corrupt")
        return data

    def exists(self, digest: str) -> bool:
        return self.store.exists(self.key(digest))

    def prune(self, *, session: Session, current_window: int) -> int:
        """Delete blobs referenced only by windows older than the retention; returns how many."""
        if self.config.retention_windows is None:
            return 0
        cutoff = current_window - self.config.retention_windows
        digest = m.Submission.content_digest
        kept = select(digest).where(m.Submission.window >= cutoff, digest.is_not(None))
        stale = select(digest).where(m.Submission.window < cutoff, digest.is_not(None), digest.not_in(kept))
        deleted = 0
        for value in session.scalars(stale.distinct()):
            if value is not None and self.exists(value):
                self.store.delete(self.key(value))
                deleted += 1
        return deleted
