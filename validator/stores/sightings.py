"""The validator's own observations of when each peer's object appeared (DESIGN.md §3, §5.7).

A store's `Last-Modified` is set by whoever runs the store, which may be the peer itself, so the put
window and the copy offender rule rest on what the validator saw: during the put window a poller
HEADs every peer's expected key every `interval_s` and records, per object version (etag), the
first time a poll saw it. The upload then lies in `(previous answered poll sent, first sighting]`,
an interval whose width is the sighting's resolution.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog

from validator.stores.fetch_types import FetchRequest
from validator.stores.hostcheck import HostRefused
from validator.stores.peer_http import HttpLimits, PeerHttp, StoreError
from validator.stores.poll_throttle import HostThrottle

log = structlog.get_logger(__name__)

# HEAD of one request: the etag there now, None when the object does not exist; raises on failure
HeadProbe = Callable[[PeerHttp, FetchRequest], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class Sighting:
    first_seen: float  # wall clock when a poll first saw this version
    resolution_s: float  # how long before first_seen it may have been uploaded (inf: unbounded)


class Sightings:
    """First sightings per (hotkey, etag) and the last answered poll per hotkey; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: dict[tuple[str, str], Sighting] = {}
        self._answered: dict[str, float] = {}  # when the last answered poll of each peer was sent

    def record(self, hotkey: str, etag: str | None, sent: float, answered: float) -> None:
        """One answered poll: sent at `sent`, it saw `etag` (None: no object) by `answered`.

        An object without an ETag ("") is no version: an answered poll, but no first sighting (one
        would stand for whatever bytes the store served later)."""
        with self._lock:
            before = self._answered.get(hotkey, -math.inf)  # no earlier poll: the upload is unbounded
            if etag and (hotkey, etag) not in self._first:
                self._first[(hotkey, etag)] = Sighting(answered, answered - before)
            self._answered[hotkey] = max(before, sent)

    def snapshot(self) -> tuple[dict[tuple[str, str], Sighting], dict[str, float]]:
        """Copies of the first sightings and the last answered polls (for saving them)."""
        with self._lock:
            return dict(self._first), dict(self._answered)

    @classmethod
    def restore(cls, first: dict[tuple[str, str], Sighting], answered: dict[str, float]) -> Sightings:
        """Sightings as saved by `snapshot`: polls recorded afterwards continue from them."""
        out = cls()
        out._first, out._answered = dict(first), dict(answered)
        return out

    def lookup(self, hotkey: str, etag: str | None) -> Sighting | None:
        with self._lock:
            return None if etag is None else self._first.get((hotkey, etag))

    def answered_until(self, hotkey: str) -> float | None:
        """When the last poll that this peer's store answered was sent."""
        with self._lock:
            return self._answered.get(hotkey)


@dataclass(frozen=True, slots=True)
class PollSchedule:
    """When a poller runs (`start_at` to `stop_at`, wall clock), how often it HEADs each peer (and
    saves what it saw), how long one HEAD may take, and how many HEADs a second one host may take
    (`host_rate`, 0: no cap; validator/stores/poll_throttle.py)."""

    start_at: float
    stop_at: float
    interval_s: float
    head_timeout_s: float
    host_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ValueError("interval_s must be > 0")


@dataclass(frozen=True, slots=True)
class Kept:
    """A poller's sightings beyond its own life: what earlier polls of its window saw (maybe another
    process's: sightings_file.py), and where it saves them every poll interval (and on stop), so
    that a restart loses at most one interval's polls."""

    earlier: Sightings | None
    save: Callable[[Sightings], None] | None = None


class Poller:
    """HEADs every request over its schedule on a daemon thread of its own.

    Each peer is polled by a loop of its own: a store that answers slowly stretches only its own
    sightings' resolution, never another peer's."""

    def __init__(
        self,
        probe: HeadProbe,
        requests: Sequence[FetchRequest],
        limits: HttpLimits,
        schedule: PollSchedule,
        *,
        clock: Callable[[], float] = time.time,
        kept: Kept | None = None,
    ) -> None:
        earlier = None if kept is None else kept.earlier
        self.sightings = earlier if earlier is not None else Sightings()
        self._save = None if kept is None else kept.save
        self._probe, self._requests, self._limits = probe, list(requests), limits
        self._schedule, self._clock = schedule, clock
        self._throttle = HostThrottle(schedule.host_rate) if schedule.host_rate > 0 else None
        # a slow answer stretches its peer's cycle (and so resolution) instead of being thrown away
        self._timeout = schedule.head_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gauntlet-poller", daemon=True)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self) -> Sightings:
        """Stop polling (the poll in flight is abandoned) and return what was seen."""
        self._stop.set()
        self._thread.join(timeout=self._timeout + 5.0)
        self._persist()  # the answers of the polls cut short
        return self.sightings

    def _run(self) -> None:
        try:
            asyncio.run(self._poll())
        except Exception:  # the poller is evidence, not the round: a failure leaves no sightings
            log.exception("poller_failed")

    async def _poll(self) -> None:
        async with PeerHttp(self._limits, connections=len(self._requests)) as http:  # all at once
            peers = [asyncio.create_task(self._watch(http, r)) for r in self._requests]
            try:
                next_at = self._schedule.start_at + self._schedule.interval_s  # saves, after the polls
                while await self._sleep_until(next_at) and not all(p.done() for p in peers):
                    next_at = self._clock() + self._schedule.interval_s
                    await asyncio.to_thread(self._persist)  # a slow disk must not delay the polls
            finally:
                for p in peers:
                    p.cancel()  # stopped: the polls in flight are abandoned
                await asyncio.gather(*peers, return_exceptions=True)
        self._persist()  # the polls since the last save (stop saves again, after the thread)

    async def _watch(self, http: PeerHttp, request: FetchRequest) -> None:
        """Poll one peer every `interval_s` (or as soon as its store has answered the last poll)."""
        next_at, warned = self._schedule.start_at, False
        while await self._sleep_until(next_at) and self._clock() < self._schedule.stop_at:
            next_at = self._clock() + self._schedule.interval_s
            if self._throttle is not None:  # its turn among the polls of the same host
                await self._throttle.wait(request.location.host)
                if self._stop.is_set() or self._clock() >= self._schedule.stop_at:
                    return
            try:
                await self._one(http, request)
            except Exception as error:  # unforeseen: this poll says nothing, the polling goes on
                if not warned:
                    log.warning("poll_failed", hotkey=request.hotkey, error=repr(error)[:200])
                warned = True

    def _persist(self) -> None:
        if self._save is None:
            return
        try:
            self._save(self.sightings)
        except OSError as e:  # a full disk costs the saved copy, not the polling
            log.warning("sightings_not_saved", error=repr(e)[:200])

    async def _sleep_until(self, at: float) -> bool:
        """False once stopped; sleeps in short slices so that `stop` is prompt."""
        while not self._stop.is_set():
            left = at - self._clock()
            if left <= 0:
                return True
            await asyncio.sleep(min(left, 0.05))
        return False

    async def _one(self, http: PeerHttp, request: FetchRequest) -> None:
        sent = self._clock()
        try:
            async with asyncio.timeout(self._timeout):
                etag = await self._probe(http, request)
        except (StoreError, HostRefused, TimeoutError, OSError):
            return  # an unanswered poll says nothing about the object
        if not self._stop.is_set():
            self.sightings.record(request.hotkey, etag, sent, self._clock())
