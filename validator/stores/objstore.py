"""Peer object stores: S3-compatible buckets (R2, SeaweedFS, ...) or a local folder.

Writing (simulated peers, the archive) goes through obstore. Fetching a window's submissions:
every peer's HEAD is queued first, in an order shuffled with the window's secret seed, each under
a short timeout (size, etag, upload time judged against the put window from the validator's own
observations); each GET queues behind them, pinned to the etag seen, under a per-peer time budget
and a floor rate, never retried after a timeout; all under the window deadline. A peer the deadline
left untouched is `missing`/`not_attempted` (not its fault, not penalised). Every outcome is a
`FetchResult`; a peer's broken store is a recorded status, never an exception.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import obstore as obs
import structlog
from obstore.store import LocalStore, S3Store

from scoring.types import Reason
from validator.stores.commitments import StorageLocation
from validator.stores.fetch_deadline import get_budget, not_reached, unfinished
from validator.stores.fetch_order import StallMemory, fetch_order
from validator.stores.fetch_types import (
    FetchConfig,
    FetchRequest,
    FetchResult,
    classify,
    object_key,
    put_end,
)
from validator.stores.peer_fetch import Headed, failed, get_step, head_step, probe
from validator.stores.peer_http import HttpLimits, PeerHttp
from validator.stores.sightings import Kept, Poller, PollSchedule, Sightings
from validator.stores.sightings_file import SightingsFolder

if TYPE_CHECKING:
    from obstore.store import ObjectStore, S3Credential

log = structlog.get_logger(__name__)

__all__ = [
    "FetchConfig", "FetchRequest", "FetchResult", "Fetcher", "classify", "fetch_order",
    "object_key", "open_store", "publish",
]  # fmt: skip


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
    return S3Store(
        location.bucket,
        **_explicit(location, signed=bool(key_id)),
        client_options={
            "allow_http": location.scheme == "http",
            "timeout": timedelta(seconds=config.request_timeout_s),
            "connect_timeout": timedelta(seconds=config.connect_timeout_s),
        },
        # Retries are ours (bounded, under the window deadline), not the client's.
        retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=config.request_timeout_s)},
        credential_provider=StaticCredentials(key_id, secret) if key_id else None,
    )


@dataclass(frozen=True, slots=True)
class StaticCredentials:
    """A key pair and nothing else: given as a provider, it replaces every credential the AWS_*
    environment holds (a session token set to "" would still be sent, as an empty one)."""

    key_id: str
    secret: str = field(repr=False)

    def __call__(self) -> S3Credential:
        key, secret = self.key_id, self.secret
        return {"access_key_id": key, "secret_access_key": secret, "token": None, "expires_at": None}


def _explicit(location: StorageLocation, *, signed: bool) -> dict[str, Any]:
    """Every S3 setting that obstore would otherwise take from the AWS_* environment variables.

    S3Store always starts from the environment (AmazonS3Builder::from_env) and lets given values
    override it: without these, a peer's presigned URL carried the validator's session token, and
    its endpoint, signing or headers could follow the validator's settings. Credentials come from
    `StaticCredentials` (or none: an anonymous store skips signing), client options (AWS_PROXY_URL,
    ...) are replaced as a whole by `client_options`. Left to the environment are only settings of
    writes that have no neutral value (server-side encryption, checksums, copy-if-not-exists)."""
    return {
        "skip_signature": not signed,
        "endpoint": location.endpoint, "aws_endpoint_url_s3": location.endpoint,  # the latter wins
        "region": location.region, "virtual_hosted_style_request": False,
        "request_payer": False, "s3_express": False, "unsigned_payload": False,
        "conditional_put": "etag", "disable_tagging": False, "sse_bucket_key_enabled": False,
    }  # fmt: skip


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
    """Fetches submissions with one store client per peer location, reused across windows, and
    watches the next window's uploads (HEAD polls) when `poll_interval_s` is set."""

    def __init__(self, config: FetchConfig) -> None:
        self.config = config
        self._stores: dict[StorageLocation, ObjectStore] = {}
        self._pollers: dict[int, Poller] = {}
        # what the polls saw, kept until a later window is observed: a retried window (the round
        # failed after its fetch) must judge timing by the same sightings, not by the peer-controlled
        # Last-Modified that is all there is without them
        self._seen: dict[int, Sightings | None] = {}
        # ... and on disk, for a window fetched after a restart of the process
        self._saved = None if config.sightings_dir is None else SightingsFolder(config.sightings_dir)
        # peers whose fetch failed in one of their recent attempts (a store that stalled, trickled
        # or refused): they go after everyone else, those failing most last
        self._stalls = StallMemory()

    def retain(self, locations: set[StorageLocation]) -> None:
        """Drop clients of locations no peer uses any more (commitments are peer-controlled)."""
        for location in set(self._stores) - locations:
            del self._stores[location]

    def _store(self, location: StorageLocation) -> ObjectStore:
        store = self._stores.get(location)
        if store is None:
            store = self._stores[location] = open_store(location, self.config)
        return store

    def limits(self) -> HttpLimits:
        c = self.config
        return HttpLimits(c.connect_timeout_s, c.min_bytes_per_s, c.rate_grace_s, c.allow_private_hosts)

    def watch(self, window: int, requests: Sequence[FetchRequest], put_start: float) -> None:
        """Poll `window`'s keys from `poll_lead_s` before its put window (opening at about
        `put_start`, wall clock) until `poll_lead_s` after it closes or `observed(window)`."""
        remote = [r for r in requests if not r.location.is_file]
        if self.config.poll_interval_s <= 0 or not remote:
            return
        stores = {r.location: self._store(r.location) for r in remote}  # the poller's own copy

        def head(http: PeerHttp, request: FetchRequest) -> Awaitable[str | None]:
            return probe(http, stores[request.location], request)

        # watched again (its window's round was retried): the new polls continue the old ones'
        resume = old.stop() if (old := self._pollers.pop(window, None)) is not None else None
        lead, end = self.config.poll_lead_s, put_end(put_start, self.config)
        schedule = PollSchedule(
            start_at=put_start - lead,
            stop_at=end + lead,
            interval_s=self.config.poll_interval_s,
            head_timeout_s=self.config.head_timeout_s,
            # peers running their own stores may name a victim's host: their polls to it are capped
            host_rate=0.0 if self.config.stores_trusted else self.config.poll_host_rate,
        )
        kept = Kept(resume)
        if self._saved is not None:  # a restarted process continues the polls an earlier one began
            earlier = resume if resume is not None else self._saved.load(window)
            kept = Kept(earlier, partial(self._saved.save, window))
        poller = Poller(head, remote, self.limits(), schedule, kept=kept)
        self._pollers[window] = poller.start()

    def observed(self, window: int) -> Sightings | None:
        """Stop watching `window` (and anything older) and return what the polls saw; the same
        again when the window is fetched again."""
        for old in [w for w in self._pollers if w < window]:
            self._pollers.pop(old).stop()
        for old in [w for w in self._seen if w < window]:
            del self._seen[old]
        if (poller := self._pollers.pop(window, None)) is not None:
            self._seen[window] = poller.stop()
        elif window not in self._seen and self._saved is not None:  # polled before a restart
            self._seen[window] = self._saved.load(window)
        if self._saved is not None:
            self._saved.prune(before=window)
        return self._seen.get(window)

    async def fetch_all(
        self,
        requests: Sequence[FetchRequest],
        deadline_s: float,
        on_result: Callable[[FetchResult], None] | None = None,
        *,
        seed: int | str | None = None,
        sightings: Sightings | None = None,
        first: Collection[str] = frozenset(),
    ) -> list[FetchResult]:
        """One result per request, in request order, within `deadline_s`; the hotkeys in `first`
        are fetched ahead of the others (`fetch_order`).

        `on_result` sees each result as soon as it is complete (to start decoding it early)."""
        deadline = time.monotonic() + deadline_s
        results: list[FetchResult | None] = [None] * len(requests)
        stage: dict[int, str] = {}  # how far each peer got: head, headed, get
        gate = asyncio.Semaphore(self.config.concurrency)

        def finish(i: int, result: FetchResult) -> None:
            results[i] = result
            if on_result is not None:
                on_result(result)

        async with PeerHttp(self.limits(), connections=self.config.concurrency) as http:

            async def one(i: int) -> None:
                # The gate is FIFO and every HEAD queues before any GET: HEADs go first, and a
                # GET starts as soon as a slot is free, not when the slowest HEAD has ended.
                async with gate:
                    stage[i] = "head"
                    out = await self._head(http, requests[i], sightings)
                if not isinstance(out, Headed):
                    return finish(i, out)
                stage[i] = "headed"
                async with gate:
                    if (budget := get_budget(self.config.peer_budget_s, deadline)) is None:
                        return finish(i, not_reached(requests[i]))
                    stage[i] = "get"
                    store = self._store(out.request.location)
                    finish(i, await get_step(http, store, out, self.config, sightings, budget))

            ahead = [i for i, r in enumerate(requests) if r.hotkey in first]
            failures = self._stalls.failures
            behind = {i: failures[r.hotkey] for i, r in enumerate(requests) if r.hotkey in failures}
            order = fetch_order(len(requests), seed, ahead, behind)
            await _run_until([one(i) for i in order], deadline)
        out = [r or unfinished(requests[i], stage.get(i)) for i, r in enumerate(results)]
        self._stalls.note((r.hotkey, r.reason) for r in out)
        return out

    @property
    def stalled(self) -> frozenset[str]:
        """Peers fetched last, their store having failed in one of its recent attempts."""
        return self._stalls.stalled

    async def fetch(self, request: FetchRequest, sightings: Sightings | None = None) -> FetchResult:
        """One submission on its own: HEAD, then GET within the per-peer budget."""
        async with PeerHttp(self.limits()) as http:
            out = await self._head(http, request, sightings)
            if not isinstance(out, Headed):
                return out
            store = self._store(request.location)
            return await get_step(http, store, out, self.config, sightings, self.config.peer_budget_s)

    async def _head(
        self, http: PeerHttp, request: FetchRequest, sightings: Sightings | None
    ) -> FetchResult | Headed:
        if request.location.is_file and not Path(request.location.path).is_dir():
            # nothing was ever published there (and fetching never creates a peer's folder)
            return failed(request.hotkey, Reason.MISSING, "no submission in the store")
        return await head_step(http, self._store(request.location), request, self.config, sightings)


async def _run_until(coroutines: Sequence[Awaitable[None]], deadline: float) -> None:
    """Run all until done or the deadline, then cancel what is left."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    if tasks:
        await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
    for task in tasks:
        task.cancel()  # a no-op on finished ones
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(outcome, Exception):  # a bug, not a peer's fault: logged, the peer ends unfinished
            log.error("fetch_task_failed", error=repr(outcome)[:300])
