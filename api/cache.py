"""Hot-read cache: response bodies in Redis, keyed by the data version (the newest committed window
and the newest weight-setting attempt), so a commit or a weight-setting attempt, which is recorded
after its window's commit, invalidates every hot read at once (old keys stop being asked for and
expire).

Also two in-process helpers: the data version (re-read from the database at most every `refresh_s`,
and soon after a `window_committed` or `weights_set` event) and a memo of committed windows, which
never change once committed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from starlette.concurrency import run_in_threadpool

from api.metrics import ApiMetrics
from api.redis_gate import RedisGate
from storage.records import WindowRecord, WindowSummary

StoredWindow = tuple[WindowSummary, WindowRecord]
T = TypeVar("T")


class TimedMemo(Generic[T]):
    """The last result of an async computation, reused for `ttl_s`; concurrent callers wait for one
    run instead of each starting their own (so a flood of probes costs one database read a second)."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._value: T | None = None
        self._until = float("-inf")
        self._lock = asyncio.Lock()

    async def get(self, compute: Callable[[], Awaitable[T]]) -> T:
        async with self._lock:
            if self._value is None or time.monotonic() >= self._until:
                self._value = await compute()
                self._until = time.monotonic() + self._ttl_s
            return self._value


@dataclass(frozen=True, slots=True)
class DataVersion:
    """What the hot reads depend on: the newest committed window and the id of the newest
    weight-setting attempt (recorded after its window's commit, so the window alone misses it)."""

    window: int | None
    weight_set: int | None

    def key(self) -> str:
        return f"{self.window}.{self.weight_set}"


# (the weights_set event carries no attempt id: only a database read can tell the new version)
REREAD_EVENTS = frozenset({"window_committed", "weights_set"})


class CommitTracker:
    """The data version as this process last saw it."""

    def __init__(self, read_version: Callable[[], DataVersion], refresh_s: float) -> None:
        self._read_version = read_version
        self._refresh_s = refresh_s
        self._version = DataVersion(None, None)
        self._checked_at = float("-inf")
        self._lock = asyncio.Lock()  # one read at a time: a database that never answers holds one
        self.up: bool | None = None  # whether the last read succeeded (None: none finished yet)

    def note_event(self, event: dict[str, Any]) -> None:
        """Called for every relayed event: a commit moves the version on without a database read;
        a commit or a weight-setting attempt makes the next read re-read the version."""
        if event["type"] == "window_committed":
            window = int(event["window"])
            if self._version.window is None or window > self._version.window:
                self._version = DataVersion(window, self._version.weight_set)
        if event["type"] in REREAD_EVENTS:
            self._checked_at = float("-inf")  # re-read soon: the event may have outrun our snapshot

    async def version(self) -> DataVersion:
        """The version, re-read when `refresh_s` old. A failed read raises to its caller and is not
        retried before `refresh_s` either (the version as last seen stands): unremembered, every
        request waited out the database's connect timeout (10 s) for a host that never answers."""
        if self._stale():
            async with self._lock:
                if self._stale():  # not re-read by whoever held the lock before
                    try:
                        self._version = await run_in_threadpool(self._read_version)
                        self.up = True
                    except Exception:
                        self.up = False
                        raise
                    finally:
                        self._checked_at = time.monotonic()
        return self._version

    def _stale(self) -> bool:
        return time.monotonic() - self._checked_at >= self._refresh_s

    async def latest(self) -> int | None:
        """The newest committed window."""
        return (await self.version()).window


class ResponseCache:
    """Serialized JSON bodies in Redis, shared by API processes. Without Redis (off or down) a small
    in-process LRU with the same keys and TTL takes over, so hot reads stay cheap either way."""

    LOCAL_ENTRIES = 512
    LOCAL_BYTES = 64 << 20  # a sybil crowd's window body is megabytes: 512 of them would be gigabytes
    MAX_BODY = LOCAL_BYTES // 8  # one body never takes the cache for itself
    # What this process writes to Redis per TTL at most (keys expire after one, so Redis holds about
    # twice this per API process): each distinct query is a key, and one client filled Redis, which
    # also holds the leader lock and the events, with megabyte bodies (300 MB per address per TTL)
    SHARED_BYTES_PER_TTL = 128 << 20

    def __init__(self, gate: RedisGate, *, prefix: str, ttl_s: float, metrics: ApiMetrics) -> None:
        self._gate = gate
        self._prefix = prefix
        self._ttl_s = ttl_s
        self._metrics = metrics
        self._local: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._local_bytes = 0
        self._slot, self._written = -1, 0  # bytes written to Redis in the current TTL slot

    def key(self, version: DataVersion, name: str) -> str:
        return f"{self._prefix}c:{version.key()}:{name}"

    async def fetch(self, key: str, build: Callable[[], bytes]) -> bytes:
        """The cached body for `key`, else `build()` run in the threadpool and stored."""
        shared = self._gate.up
        cached = await self._gate.call(lambda r: r.get(key)) if shared else self._get_local(key)
        if isinstance(cached, bytes):
            self._metrics.cache.labels("hit" if shared else "local_hit").inc()
            return cached
        self._metrics.cache.labels("miss").inc()
        body = await run_in_threadpool(build)
        if len(body) > self.MAX_BODY:
            return body
        if not self._gate.up:
            self._put_local(key, body)
        elif self._shared_budget(len(body)):
            await self._gate.call(lambda r: r.set(key, body, px=max(1, int(self._ttl_s * 1000))))
        return body

    def _shared_budget(self, size: int) -> bool:
        """Whether `size` more bytes fit this TTL's budget of writes to Redis (counted if so)."""
        slot = int(time.monotonic() // self._ttl_s)
        if slot != self._slot:
            self._slot, self._written = slot, 0
        if self._written + size > self.SHARED_BYTES_PER_TTL:
            self._metrics.cache.labels("not_stored").inc()
            return False
        self._written += size
        return True

    def _get_local(self, key: str) -> bytes | None:
        entry = self._local.get(key)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def _put_local(self, key: str, body: bytes) -> None:
        # Runs on the event loop only, so no lock is needed.
        old = self._local.pop(key, None)
        self._local_bytes += len(body) - (0 if old is None else len(old[1]))
        self._local[key] = (time.monotonic() + self._ttl_s, body)
        while len(self._local) > self.LOCAL_ENTRIES or self._local_bytes > self.LOCAL_BYTES:
            self._local_bytes -= len(self._local.popitem(last=False)[1][1])


MEMO_ROWS = 250_000  # rows (and rating links) the memo holds at most, about 200 MB of records


def _rows(stored: StoredWindow) -> int:
    """A window's size in rows: with a crowd of sybils one window's rating links alone came to 30,000
    (31 MB of records), and 64 such windows held 1.5 GB for anyone who asked for each once."""
    r = stored[1]
    links = sum(len(x.state.get("links") or ()) for x in r.ratings)
    return (
        1
        + len(r.submissions)
        + len(r.evaluations)
        + len(r.ratings)
        + len(r.penalties)
        + len(r.copy_pairs)
        + links
    )


class WindowMemo:
    """A bounded LRU of committed windows, by count and by rows; thread-safe, since reads run in
    the threadpool. A window larger than the whole budget is not kept."""

    def __init__(self, size: int, max_rows: int = MEMO_ROWS) -> None:
        self._size, self._max_rows = size, max_rows
        self._items: OrderedDict[int, tuple[StoredWindow, int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(self, window: int) -> StoredWindow | None:
        with self._lock:
            held = self._items.get(window)
            if held is None:
                return None
            self._items.move_to_end(window)
            return held[0]

    def put(self, stored: StoredWindow) -> None:
        window, rows = stored[0].window, _rows(stored)
        if rows > self._max_rows:
            return
        with self._lock:
            old = self._items.pop(window, None)
            self._held += rows - (0 if old is None else old[1])
            self._items[window] = (stored, rows)
            while len(self._items) > self._size or self._held > self._max_rows:
                self._held -= self._items.popitem(last=False)[1][1]
