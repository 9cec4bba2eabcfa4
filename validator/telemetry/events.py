"""Live events (Redis pub/sub) and the leader lock; both degrade to no-ops when Redis is down.

The validator keeps scoring without Redis: a failed publish is logged and dropped, and a lock that
cannot be checked is not held (so weights are not set twice by accident).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Protocol

import redis
import structlog

EVENTS_CHANNEL = "gauntlet:events"  # the API relays this channel as server-sent events
log = structlog.get_logger(__name__)


class Events(Protocol):
    def publish(self, kind: str, window: int, **fields: Any) -> None: ...


class NullEvents:
    def publish(self, kind: str, window: int, **fields: Any) -> None:
        return None


class RedisEvents:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def publish(self, kind: str, window: int, **fields: Any) -> None:
        message = json.dumps({"type": kind, "window": window, "ts": time.time(), **fields})
        try:
            self.client.publish(EVENTS_CHANNEL, message)
        except redis.RedisError as e:
            log.warning("event_dropped", kind=kind, window=window, error=str(e))


_EXTEND_IF_MINE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end
return 0
"""
_DELETE_IF_MINE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class Lock(Protocol):
    """Who sets weights: this Redis lock, or the database's lease without Redis
    (validator/state/leader_lease.py)."""

    def acquire(self) -> bool: ...
    def release(self) -> None: ...


class LeaderLock:
    """A Redis lock per hotkey with a TTL: only the holder sets weights."""

    def __init__(
        self, client: redis.Redis | None, hotkey: str, ttl_s: int = 600, token: str | None = None
    ) -> None:
        """`token` names the holder. A stable one (host and workdir) lets a restarted process take
        its own lock back at once instead of waiting out the TTL after a crash."""
        self.client, self.key, self.ttl_s = client, f"gauntlet:leader:{hotkey}", ttl_s
        self.token = token or uuid.uuid4().hex
        # Lua scripts run atomically in Redis (registered once, then called by their SHA)
        self._extend = client.register_script(_EXTEND_IF_MINE) if client is not None else None
        self._delete = client.register_script(_DELETE_IF_MINE) if client is not None else None

    def acquire(self) -> bool:
        """Take or extend the lock; False when another process holds it or Redis is unreachable."""
        if self.client is None:
            return True  # no Redis: a single process by declaration (the service uses the lease then)
        try:
            if self.client.set(self.key, self.token, nx=True, ex=self.ttl_s):
                return True
            # extend only if still ours, atomically (a get-then-expire could extend a new holder's lock)
            assert self._extend is not None
            return bool(self._extend(keys=[self.key], args=[self.token, self.ttl_s]))
        except redis.RedisError as e:
            log.warning("leader_lock_unavailable", error=str(e))
            return False

    def release(self) -> None:
        if self.client is None:
            return
        try:
            if self._delete is not None:
                self._delete(keys=[self.key], args=[self.token])
        except redis.RedisError as e:
            log.warning("leader_lock_release_failed", error=str(e))


def connect(url: str | None) -> redis.Redis | None:
    """A client with short timeouts (None without a URL); it connects lazily, so Redis may be down."""
    if not url:
        return None
    return redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=1.0)
