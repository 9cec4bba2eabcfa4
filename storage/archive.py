"""Content-addressed archive of fetched submission bytes behind a small object-store interface.

Keys are `archive/{digest[:2]}/{digest}` where digest is the SHA-256 of the raw bytes (the
`content_digest` of a SubmissionRecord), so a read can always be verified against its key.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple, Protocol

import obstore as obs
from obstore.store import LocalStore
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from storage import models as m


class Listed(NamedTuple):
    key: str
    modified: float  # last modified, POSIX seconds (wall clock)


class BlobStore(Protocol):
    """Bytes by key. `get` raises KeyError for a key that is not there; `listing` yields every key
    under a folder-like prefix (`archive` lists `archive/...`), streamed, in no particular order."""

    def put(self, key: str, data: bytes | Path) -> None: ...  # a Path: that file's bytes, streamed
    def get(self, key: str) -> bytes: ...
    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...
    def listing(self, prefix: str) -> Iterator[Listed]: ...


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
                # durable before the database row that names it commits (that one is fsynced): a
                # power loss otherwise left a row naming a short or empty checkpoint
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _sync_folder(path.parent)
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

    def listing(self, prefix: str) -> Iterator[Listed]:
        for folder, _, names in os.walk(self._path(prefix.rstrip("/"))):
            for name in names:
                if name.startswith(".tmp-"):
                    continue  # a put in progress (or one killed mid-write): not a blob
                path = Path(folder) / name
                try:
                    modified = path.stat().st_mtime
                except FileNotFoundError:
                    continue  # deleted since the walk saw it
                yield Listed(path.relative_to(self.root).as_posix(), modified)


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

    def listing(self, prefix: str) -> Iterator[Listed]:
        for batch in obs.list(self.store, prefix=_check_key(prefix.rstrip("/"))):
            for meta in batch:
                yield Listed(meta["path"], meta["last_modified"].timestamp())


def _sync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (POSIX: the directory entry is the folder's data)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ArchiveCorruptError(ValueError):
    """The bytes under a key do not hash to the key's digest."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


_ARCHIVE_KEY = re.compile(r"archive/([0-9a-f]{2})/(\1[0-9a-f]{62})")
_BATCH = 500  # digests per `IN (...)`: well under every database's bound on parameters
_PRUNE_WINDOWS = 16  # old windows a prune reads at most: its cost stays bounded after a long gap


def _digests(keys: Iterable[str]) -> Iterator[str]:
    """The digests of well-formed archive keys; anything else under `archive/` is not ours to delete."""
    for key in keys:
        if match := _ARCHIVE_KEY.fullmatch(key):
            yield match.group(2)


@dataclass(frozen=True, slots=True)
class ArchiveConfig:
    """How long archived submissions are kept: None keeps everything (orphans included).

    An orphan is a blob no submission row references: the bytes of a window attempt that never
    committed. It is deleted once older than `orphan_grace_s`, which must outlast any attempt in
    progress (its blobs are orphans until it commits, in this process or in a racing one)."""

    retention_windows: int | None = None
    orphan_grace_s: float = 6 * 3600.0

    def __post_init__(self) -> None:
        if self.retention_windows is not None and self.retention_windows < 1:
            raise ValueError("retention_windows must be >= 1 or None")
        if not self.orphan_grace_s > 0:
            raise ValueError("orphan_grace_s must be > 0")


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
        """Delete blobs referenced only by windows older than the retention; returns how many.

        Only windows not pruned before are read, at most `_PRUNE_WINDOWS` of them a call (a first
        prune after an upgrade or a shorter retention catches up over the next windows): reading
        every old window again asked the store about every blob ever deleted, every window."""
        if self.config.retention_windows is None:
            return 0
        cutoff = current_window - self.config.retention_windows
        due = select(m.Window.window).where(m.Window.window < cutoff, m.Window.archive_pruned.is_(False))
        windows = list(session.scalars(due.order_by(m.Window.window).limit(_PRUNE_WINDOWS)))
        if not windows:
            return 0
        digest = m.Submission.content_digest
        kept = select(digest).where(m.Submission.window >= cutoff, digest.is_not(None))
        fallen = m.Submission.window.in_(windows)
        stale = select(digest).where(fallen, digest.is_not(None), digest.not_in(kept))
        deleted = 0
        for value in session.scalars(stale.distinct()):
            if value is not None and self.exists(value):
                self.store.delete(self.key(value))
                deleted += 1
        session.execute(update(m.Window).where(m.Window.window.in_(windows)).values(archive_pruned=True))
        return deleted

    def prune_orphans(self, *, session: Session, now: float | None = None) -> int:
        """Delete blobs that no submission row of any window references and that were last written
        over `orphan_grace_s` before `now` (wall clock); returns how many. Retention None keeps them.

        `prune` finds blobs through rows, so it never sees these: this lists the archive instead,
        and asks the database about 500 digests at a time."""
        if self.config.retention_windows is None:
            return 0
        cutoff = (time.time() if now is None else now) - self.config.orphan_grace_s
        old = _digests(item.key for item in self.store.listing("archive") if item.modified < cutoff)
        deleted = 0
        while batch := list(itertools.islice(old, _BATCH)):
            digest = m.Submission.content_digest
            referenced = set(session.scalars(select(digest).where(digest.in_(batch)).distinct()))
            for value in batch:
                if value not in referenced:
                    self.store.delete(self.key(value))
                    deleted += 1
        return deleted
