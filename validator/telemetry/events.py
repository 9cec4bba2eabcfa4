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

from validator.telemetry.holder import SHARED, Holder

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


# take the lock if free, extend it if ours; take it from another incarnation of our id (ARGV[3],
# validator/telemetry/holder.py) only once it has gone unrenewed for half the TTL, else answer -1
_TAKE = """
local v = redis.call('get', KEYS[1])
if v == false or v == ARGV[1] then redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2]) return 1 end
if ARGV[3] ~= '' and (v == ARGV[3] or string.sub(v, 1, #ARGV[3] + 1) == ARGV[3] .. '.') then
  if 2 * redis.call('ttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2]) return 1
  end
  return -1
end
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
        self,
        client: redis.Redis | None,
        hotkey: str,
        ttl_s: int = 600,
        holder: Holder | None = None,
    ) -> None:
        """`holder` is the work folder's id and this process's incarnation: a restarted process
        takes over its own lock once it has gone unrenewed for half the TTL instead of waiting all
        of it out after a crash, while a live copy of the work folder keeps it
        (validator/telemetry/holder.py)."""
        self.client, self.key, self.ttl_s = client, f"gauntlet:leader:{hotkey}", ttl_s
        self.holder = None if holder is None else holder.id
        self.token = uuid.uuid4().hex if holder is None else holder.token
        # Lua scripts run atomically in Redis (registered once, then called by their SHA): a
        # get-then-set could take or extend a new holder's lock
        self._take = client.register_script(_TAKE) if client is not None else None
        self._delete = client.register_script(_DELETE_IF_MINE) if client is not None else None

    def acquire(self) -> bool:
        """Take or extend the lock; False when another process holds it or Redis is unreachable."""
        if self.client is None or self._take is None:
            return True  # no Redis: a single process by declaration (the service uses the lease then)
        try:
            taken = int(self._take(keys=[self.key], args=[self.token, self.ttl_s, self.holder or ""]))
        except redis.RedisError as e:
            log.warning("leader_lock_unavailable", error=str(e))
            return False
        if taken < 0:
            log.warning("leader_id_shared", holder=self.holder, detail=SHARED)
        return taken == 1

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
