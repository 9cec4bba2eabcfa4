"""Peer object stores through obstore: S3-compatible buckets (R2, SeaweedFS, ...) or a local folder.

Fetching one submission: HEAD (size, last_modified, etag/version) → refuse oversize before any
GET → classify the upload time against the put window → GET pinned to the etag/version seen,
streamed with a hard byte limit. Many peers are fetched concurrently under one deadline.
Every outcome is a `FetchResult`; a peer's broken store is a recorded status, never an exception.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import obstore as obs
from obstore.exceptions import BaseError, PermissionDeniedError, UnauthenticatedError
from obstore.store import LocalStore, S3Store

from scoring.types import Reason
from validator.commitments import StorageLocation

if TYPE_CHECKING:
    from obstore import GetOptions
    from obstore.store import ObjectStore

_HOTKEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


class FetchStatus:
    """Outcome of one fetch (DESIGN.md §3); `invalid` is decided later, by the integrity checks."""

    OK = "ok"
    MISSING = "missing"
    EARLY = "early"
    LATE = "late"
    TOO_LARGE = "too_large"


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """Limits for fetching submissions."""

    max_bytes: int = 4 << 30
    put_window_s: float = 70.0
    grace_s: float = 5.0
    request_timeout_s: float = 60.0  # one HEAD or GET, including the body
    connect_timeout_s: float = 5.0
    retries: int = 2  # extra attempts after a transient failure
    retry_backoff_s: float = 0.5  # doubled per attempt
    concurrency: int = 32
    chunk_bytes: int = 8 << 20

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or self.chunk_bytes < 1 or self.concurrency < 1:
            raise ValueError("max_bytes, chunk_bytes and concurrency must be >= 1")
        if self.put_window_s <= 0 or self.grace_s < 0 or self.retry_backoff_s < 0:
            raise ValueError("put_window_s must be > 0; grace_s and retry_backoff_s >= 0")
        if self.request_timeout_s <= 0 or self.connect_timeout_s <= 0 or self.retries < 0:
            raise ValueError("timeouts must be > 0 and retries >= 0")


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Fetch `key` from a peer's location; `put_start` is T0, the first block time of window W+1."""

    hotkey: str
    location: StorageLocation
    key: str
    put_start: float


@dataclass(frozen=True, slots=True)
class FetchResult:
    hotkey: str
    status: str
    reason: str | None = None
    detail: str = ""
    data: bytes | None = field(default=None, repr=False)
    size: int | None = None
    etag: str | None = None
    last_modified: float | None = None  # unix seconds, as the store reports it
    fetched_at: float = 0.0


def object_key(window: int, hotkey: str) -> str:
    """The key of a submission: `gauntlet/1/{window}/{hotkey}.safetensors` (DESIGN.md §4.3)."""
    if window < 0 or not _HOTKEY.fullmatch(hotkey):
        raise ValueError(f"bad window {window} or hotkey {hotkey[:70]!r}")
    return f"gauntlet/1/{window}/{hotkey}.safetensors"


def classify(last_modified: float, put_start: float, config: FetchConfig) -> str:
    """`early` before T0, `late` after T0 + put_window_s + grace_s, else `ok`."""
    if last_modified < put_start:
        return FetchStatus.EARLY
    if last_modified > put_start + config.put_window_s + config.grace_s:
        return FetchStatus.LATE
    return FetchStatus.OK


def open_store(
    location: StorageLocation,
    config: FetchConfig | None = None,
    *,
    credentials: tuple[str, str] | None = None,
    create: bool = False,
) -> ObjectStore:
    """An obstore store for a location; `credentials` (key id, secret) override the committed ones.

    Only a writer (`create=True`) may create a `file://` folder: fetching must not make directories
    wherever a peer's commitment points."""
    config = config or FetchConfig()
    if location.is_file:
        return LocalStore(location.path, mkdir=create)
    key_id, secret = credentials or (location.access_key_id, location.secret_access_key)
    auth: dict[str, Any] = (
        {"access_key_id": key_id, "secret_access_key": secret} if key_id else {"skip_signature": True}
    )
    return S3Store(
        location.bucket,
        endpoint=location.endpoint,
        region=location.region,
        virtual_hosted_style_request=False,
        client_options={
            "allow_http": location.scheme == "http",
            "timeout": timedelta(seconds=config.request_timeout_s),
            "connect_timeout": timedelta(seconds=config.connect_timeout_s),
        },
        # Retries are ours (bounded, under the window deadline), not the client's.
        retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=config.request_timeout_s)},
        **auth,
    )


async def publish(
    location: StorageLocation,
    key: str,
    data: bytes,
    *,
    credentials: tuple[str, str] | None = None,
    mtime: float | None = None,
) -> None:
    """Put an object (simulated peers, a validator publishing its selection).

    `mtime` stamps a `file://` object's modification time, so a demo on a simulated chain clock
    can upload "at" a chosen block time; it is refused for S3, whose stores set their own.
    """
    if mtime is not None and not location.is_file:
        raise ValueError("mtime can only be set on file:// locations")
    store = open_store(location, credentials=credentials, create=True)
    await obs.put_async(store, key, data)
    if mtime is not None:
        os.utime(Path(location.path) / key, (mtime, mtime))


class Fetcher:
    """Fetches submissions with one store client per peer location, reused across windows."""

    def __init__(self, config: FetchConfig) -> None:
        self.config = config
        self._stores: dict[StorageLocation, ObjectStore] = {}

    def retain(self, locations: set[StorageLocation]) -> None:
        """Drop clients of locations no peer uses any more (commitments are peer-controlled)."""
        for location in set(self._stores) - locations:
            del self._stores[location]

    def _store(self, location: StorageLocation) -> ObjectStore:
        store = self._stores.get(location)
        if store is None:
            store = self._stores[location] = open_store(location, self.config)
        return store

    async def fetch_all(
        self,
        requests: Sequence[FetchRequest],
        deadline_s: float,
        on_result: Callable[[FetchResult], None] | None = None,
    ) -> list[FetchResult]:
        """Fetch all concurrently; whatever is unfinished at the deadline is `missing`/fetch_failed.

        `on_result` sees each result as soon as it is complete (to start decoding it early)."""
        gate = asyncio.Semaphore(self.config.concurrency)

        async def gated(request: FetchRequest) -> FetchResult:
            async with gate:
                result = await self.fetch(request)
            if on_result is not None:
                on_result(result)
            return result

        tasks = [asyncio.ensure_future(gated(r)) for r in requests]
        if tasks:
            await asyncio.wait(tasks, timeout=deadline_s)
        results = []
        for request, task in zip(requests, tasks, strict=True):
            if task.done() and not task.cancelled():
                results.append(task.result())
            else:
                task.cancel()
                detail = f"window deadline of {deadline_s:.1f} s passed"
                results.append(_failed(request.hotkey, Reason.FETCH_FAILED, detail))
        await asyncio.gather(*tasks, return_exceptions=True)  # let cancellations settle
        return results

    async def fetch(self, request: FetchRequest) -> FetchResult:
        """One submission, with bounded retries on transient errors."""
        if request.location.is_file and not Path(request.location.path).is_dir():
            # nothing was ever published there (and fetching never creates a peer's folder)
            return _failed(request.hotkey, Reason.MISSING, f"no object at {request.key}")
        detail = ""
        for attempt in range(self.config.retries + 1):
            try:
                return await self._attempt(request)
            except FileNotFoundError:
                return _failed(request.hotkey, Reason.MISSING, f"no object at {request.key}")
            except (PermissionDeniedError, UnauthenticatedError) as error:
                return _failed(request.hotkey, Reason.FETCH_FAILED, _short(error))  # retrying won't help
            except (BaseError, OSError, TimeoutError, _Truncated) as error:
                detail = f"attempt {attempt + 1}: {_short(error)}"
            if attempt < self.config.retries:
                await asyncio.sleep(self.config.retry_backoff_s * 2**attempt)
        return _failed(request.hotkey, Reason.FETCH_FAILED, detail)

    async def _attempt(self, request: FetchRequest) -> FetchResult:
        store = self._store(request.location)
        meta = await obs.head_async(store, request.key)
        size, etag, version = int(meta["size"]), meta["e_tag"], meta["version"]
        # microseconds, as storage keeps them: replay must see the same timestamps as the live round
        modified = round(meta["last_modified"].timestamp(), 6)
        seen = FetchResult(request.hotkey, FetchStatus.OK, size=size, etag=etag, last_modified=modified)
        if size > self.config.max_bytes:
            detail = f"{size} bytes > limit {self.config.max_bytes}"
            return _with(seen, FetchStatus.TOO_LARGE, Reason.TOO_LARGE, detail)
        status = classify(modified, request.put_start, self.config)
        if status != FetchStatus.OK:
            detail = f"uploaded at {modified:.0f}, put window starts at {request.put_start:.0f}"
            return _with(seen, status, status, detail)
        options: GetOptions = {}
        if etag:
            options["if_match"] = etag  # the bytes we read are the object we classified
        if version:
            options["version"] = version
        response = await obs.get_async(store, request.key, options=options)
        data = await self._read(response, size)
        return replace(seen, data=data, fetched_at=time.time())

    async def _read(self, response: Any, size: int) -> bytes:
        """Stream the body; stop as soon as it would exceed the size HEAD reported."""
        buffer = bytearray()
        async for chunk in response.stream(min_chunk_size=self.config.chunk_bytes):
            if len(buffer) + len(chunk) > size:
                raise _Truncated(f"body exceeds the {size} bytes HEAD reported")
            buffer += memoryview(chunk)
        if len(buffer) != size:
            raise _Truncated(f"body ended at {len(buffer)} of {size} bytes")
        return bytes(buffer)


class _Truncated(Exception):
    """The body did not match the HEAD size (a transient fault or a store that lies)."""


def _with(seen: FetchResult, status: str, reason: str, detail: str) -> FetchResult:
    return replace(seen, status=status, reason=reason, detail=detail, fetched_at=time.time())


def _failed(hotkey: str, reason: str, detail: str) -> FetchResult:
    return FetchResult(hotkey, FetchStatus.MISSING, reason, detail, fetched_at=time.time())


def _short(error: BaseException) -> str:
    """The first line of an error, bounded: obstore messages carry multi-line debug dumps."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"[:300]
