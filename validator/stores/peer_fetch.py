"""One peer's fetch, in two steps: a short HEAD that judges size and timing, then a budgeted GET.

`file://` folders (the demo, tests) are read through obstore; S3 stores through `PeerHttp` (pinned,
checked, no redirects). The timing evidence is the validator's own: a poller's first sighting of the
version read (validator/stores/sightings.py), or in a local subnet the folder's modification time, which
the simulation writes from its own clock. The store's `Last-Modified` decides only when there is no
observation at all. Details that could map the validator's network (error texts, timings) go to the
log; results carry a reason code and a generic sentence.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import obstore as obs
import structlog
from obstore.exceptions import BaseError, PermissionDeniedError, UnauthenticatedError
from obstore.store import S3Store

from scoring.ranking import Status
from scoring.types import Reason
from validator.stores.fetch_types import (
    FetchConfig,
    FetchRequest,
    FetchResult,
    classify,
    object_key,
    plausible_time,
    put_end,
)
from validator.stores.peer_http import Body, ObjectHead, PeerHttp, StoreError
from validator.stores.sightings import Sightings

if TYPE_CHECKING:
    from obstore import GetOptions
    from obstore.store import ObjectStore

log = structlog.get_logger(__name__)

GENERIC = {
    Reason.MISSING: "no submission in the store",
    Reason.FETCH_FAILED: "the store could not be read",
    Reason.BAD_LOCATION: "the storage host is refused (not a public address)",
}
TIMED_OUT = "the store did not answer within its time budget"
CUT_SHORT = "the window's fetch deadline cut its time"


@dataclass(frozen=True, slots=True)
class Headed:
    """A HEAD that found an acceptable object: what the GET needs."""

    request: FetchRequest
    head: ObjectHead
    seen: FetchResult  # everything but the bytes


async def head_step(
    http: PeerHttp,
    store: ObjectStore,
    request: FetchRequest,
    config: FetchConfig,
    sightings: Sightings | None,
) -> FetchResult | Headed:
    """HEAD under `head_timeout_s` (a timeout is final); judge the size and the upload time."""
    try:
        async with asyncio.timeout(config.head_timeout_s):
            head = await _retrying(lambda: _head(http, store, request), config)
    except (StoreError, BaseError, OSError, TimeoutError) as error:
        return _failure(request, error)
    seen = FetchResult(
        request.hotkey, Status.OK, size=head.size, etag=head.etag, version=head.version,
        last_modified=head.last_modified,
    )  # fmt: skip
    if head.size > config.max_bytes:
        return _final(seen, Status.INVALID, Reason.TOO_LARGE, f"{head.size} bytes > limit {config.max_bytes}")
    status, first_seen, resolution = _timing(request, head, config, sightings)
    seen = replace(seen, first_seen=first_seen, seen_resolution_s=resolution)
    if status is None:
        return _final(seen, Status.MISSING, Reason.FETCH_FAILED, "the store gave no upload time")
    if status != Status.OK:
        return _final(seen, status, status, f"{status}: outside the put window")
    return Headed(request, head, seen)


async def get_step(
    http: PeerHttp, store: ObjectStore, headed: Headed, config: FetchConfig, sightings: Sightings | None,
    budget_s: float,
) -> FetchResult:  # fmt: skip
    """GET within `budget_s`; a changed object is HEADed and judged again (bounded retries)."""
    request = headed.request
    try:
        async with asyncio.timeout(budget_s):
            for attempt in range(config.retries + 1):
                try:
                    body = await _get(http, store, headed, config)
                    data, path = (body, None) if isinstance(body, bytes) else (None, body)
                    fetched = replace(headed.seen, data=data, path=path, fetched_at=time.time())
                    return await bound_timing(fetched, headed, config, sightings)
                except (StoreError, BaseError, OSError) as error:
                    if attempt == config.retries or not _transient(error):
                        raise
                    log.info("fetch_retry", hotkey=request.hotkey, error=_short(error))
                await asyncio.sleep(config.retry_backoff_s * 2**attempt)
                again = await head_step(http, store, request, config, sightings)
                if isinstance(again, FetchResult):
                    return again
                headed = again
    except TimeoutError as error:
        if budget_s < config.peer_budget_s and http.on_pace(request.key, config.peer_budget_s):
            # the window's deadline cut its time, and at its pace it would have finished within its
            # budget: the validator's shortfall (peers before it held the slots), not penalised
            return failed(request.hotkey, Reason.NOT_ATTEMPTED, CUT_SHORT)
        return _failure(request, error)
    except (StoreError, BaseError, OSError) as error:
        return _failure(request, error)
    raise AssertionError("unreachable")  # pragma: no cover


async def probe(http: PeerHttp, store: ObjectStore, request: FetchRequest) -> str | None:
    """The etag of the object there now, None when there is none (the poller's HEAD)."""
    try:
        return (await _head(http, store, request)).etag or ""
    except FileNotFoundError:
        return None


def _timing(
    request: FetchRequest, head: ObjectHead, config: FetchConfig, sightings: Sightings | None
) -> tuple[Status | None, float | None, float | None]:
    """(status, first_seen, resolution); status None when there is no evidence at all."""
    start = request.put_start
    if request.location.is_file and head.last_modified is not None:
        # a local subnet: the simulation stamps its own clock on the files it writes
        return classify(head.last_modified, start, config), head.last_modified, 0.0
    seen = sightings.lookup(request.hotkey, head.etag or "") if sightings is not None else None
    if seen is not None:
        return classify(seen.first_seen, start, config, seen.resolution_s), seen.first_seen, seen.resolution_s
    answered = sightings.answered_until(request.hotkey) if sightings is not None else None
    if answered is not None and answered > put_end(start, config):
        return Status.LATE, None, None  # answered polls after the window closed never saw it
    if head.last_modified is None or not config.stores_trusted:  # a peer's own clock alone is no evidence
        return None, None, None
    return classify(head.last_modified, start, config), None, None  # no observation: the provider's clock


async def bound_timing(
    fetched: FetchResult, headed: Headed, config: FetchConfig, sightings: Sightings | None
) -> FetchResult:
    """`fetched`, whose timing came from a poll's sighting of an ETag, if the bytes read are that
    version; else judged again without the sighting. A store a peer runs itself can show a
    placeholder under one ETag while the polls watch, then serve another peer's bytes under the same
    ETag (or under none): the placeholder's early sighting made the honest victim the later uploader
    of the pair. The MD5 of the bytes read is the ETag of a single-part S3 upload, which no peer can
    choose before the bytes exist; a trusted provider computes its ETags itself."""
    request, head = headed.request, headed.head
    if config.stores_trusted or request.location.is_file or fetched.first_seen is None:
        return fetched
    if await asyncio.to_thread(_content_md5, fetched) == _plain_etag(head.etag):  # off the fetch loop
        return fetched
    log.info("sighting_not_bound", hotkey=request.hotkey, etag=head.etag)
    unbound = replace(fetched, first_seen=None, seen_resolution_s=None, data=None, path=None)
    answered = sightings.answered_until(request.hotkey) if sightings is not None else None
    if answered is not None and answered > put_end(request.put_start, config):
        return _final(
            unbound, Status.LATE, Status.LATE, "late: answered polls after the put window never saw it"
        )
    detail = "no upload time: the ETag sighted is not the MD5 of the bytes served"
    return _final(unbound, Status.MISSING, Reason.FETCH_FAILED, detail)


def _plain_etag(etag: str | None) -> str | None:
    """The hex digest in an ETag (`"…"` or `W/"…"`), lower-cased; None for anything else."""
    text = (etag or "").removeprefix("W/").strip('"').lower()
    return text if len(text) == 32 and all(c in "0123456789abcdef" for c in text) else None


def _content_md5(fetched: FetchResult) -> str:
    digest = hashlib.md5(usedforsecurity=False)  # S3's ETag, not a security boundary of its own
    if fetched.data is not None:
        digest.update(fetched.data)
    elif fetched.path is not None:
        with open(fetched.path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


async def _head(http: PeerHttp, store: ObjectStore, request: FetchRequest) -> ObjectHead:
    """Either store's HEAD. A time no clock reads (year 9999: any store, a folder's mtime too, may
    claim it) is no time from here on, as the record stores it, so live and replay agree."""
    if not request.location.is_file:
        head = await http.head(request.location, _s3(store), request.key)
    else:
        meta = await obs.head_async(store, request.key)
        # microseconds, as storage keeps them: replay must see the same timestamps as the live round
        modified = round(meta["last_modified"].timestamp(), 6)
        head = ObjectHead(int(meta["size"]), meta["e_tag"], meta["version"], modified)
    return replace(head, last_modified=plausible_time(head.last_modified))


async def _get(http: PeerHttp, store: ObjectStore, headed: Headed, config: FetchConfig) -> bytes | Path:
    request, head = headed.request, headed.head
    spool = spool_path(config.spool_dir, request.key) if config.spool_dir is not None else None
    if not request.location.is_file:
        return await http.get(request.location, _s3(store), request.key, head, spool)
    options: GetOptions = {}
    if head.etag:
        options["if_match"] = head.etag  # the bytes we read are the object we classified
    response = await obs.get_async(store, request.key, options=options)
    return await read_stream(response, head.size, config.chunk_bytes, spool)


def spool_path(folder: Path, key: str) -> Path:
    """The file a spooled body is written to: one per object key (the key's hotkey is checked)."""
    return folder / key.replace("/", "-")


def clear_spool(folder: Path, window: int) -> int:
    """Remove the spooled bodies of every other window (and unfinished ones); returns how many.

    A window's files are read until its aggregate is applied, so the next window's fetch is the
    first moment they are surely unused."""
    keep = spool_path(folder, object_key(window, "x")).name.removesuffix("x.safetensors")
    removed = 0
    for path in folder.iterdir() if folder.is_dir() else ():
        if path.is_file() and not (path.name.startswith(keep) and path.name.endswith(".safetensors")):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


async def read_stream(
    response: Any, size: int, chunk_bytes: int = 8 << 20, spool: Path | None = None
) -> bytes | Path:
    """Stream a body (into `spool` when given); stop as soon as it would exceed the size HEAD reported."""
    with Body(size, spool) as body:
        async for chunk in response.stream(min_chunk_size=chunk_bytes):
            await body.add(memoryview(chunk))
        return body.finish()


async def _retrying(attempt: Callable[[], Awaitable[ObjectHead]], config: FetchConfig) -> ObjectHead:
    """Fast transient failures (refused connection, 5xx) get `retries` more attempts; timeouts none."""
    for n in range(config.retries + 1):
        try:
            return await attempt()
        except (StoreError, BaseError, OSError) as error:
            if n == config.retries or not _transient(error):
                raise
        await asyncio.sleep(config.retry_backoff_s * 2**n)
    raise AssertionError("unreachable")  # pragma: no cover


def _transient(error: BaseException) -> bool:
    if isinstance(error, StoreError):
        return error.transient
    if isinstance(error, FileNotFoundError | PermissionDeniedError | UnauthenticatedError | TimeoutError):
        return False
    return isinstance(error, BaseError | OSError)


def _failure(request: FetchRequest, error: BaseException) -> FetchResult:
    """The verdict for a failed fetch: a reason code and a generic sentence; the error to the log."""
    if isinstance(error, FileNotFoundError):
        return failed(request.hotkey, Reason.MISSING, GENERIC[Reason.MISSING])
    log.info("fetch_failed", hotkey=request.hotkey, key=request.key, error=_short(error))
    if isinstance(error, TimeoutError):
        return failed(request.hotkey, Reason.FETCH_FAILED, TIMED_OUT)
    reason = error.reason if isinstance(error, StoreError) else Reason.FETCH_FAILED
    return failed(request.hotkey, reason, GENERIC.get(reason, GENERIC[Reason.FETCH_FAILED]))


def failed(hotkey: str, reason: str, detail: str) -> FetchResult:
    return FetchResult(hotkey, Status.MISSING, reason, detail, fetched_at=time.time())


def _final(seen: FetchResult, status: Status, reason: str, detail: str) -> FetchResult:
    return replace(seen, status=status, reason=reason, detail=detail, fetched_at=time.time())


def _s3(store: ObjectStore) -> S3Store:
    if not isinstance(store, S3Store):
        raise TypeError("an S3 location needs an S3 store")
    return store


def _short(error: BaseException) -> str:
    """The first line of an error, bounded: obstore messages carry multi-line debug dumps."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"[:300]
