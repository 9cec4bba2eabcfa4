"""The API's one configuration: built by the process settings (`gauntlet api`, `gauntlet demo`)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import make_url

from api.events import EVENTS_CHANNEL


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """How the read-only API connects, caches, limits and streams.

    `redis_url` None runs without Redis: no shared cache, an in-process rate limit, and an event
    stream that only sends keep-alives. `rate_limit_per_minute` 0 turns rate limiting off.
    `max_commit_age_s` makes /readyz fail when the newest committed window is older (None: never).

    Abuse limits: at most `max_streams` open /v1/events streams, `max_streams_per_client` per client
    address, each closed after `stream_max_s` (browsers reconnect by themselves); the server accepts
    `max_connections` concurrent connections (503 beyond), at most `max_connections_per_client` from
    one client (closed beyond; trusted proxies exempt), and closes one whose request (headers and
    body) is not complete after `header_timeout_s`. `trusted_proxies` are the addresses whose
    X-Forwarded-For / X-Forwarded-Proto are believed (empty: none; the socket peer is the client).
    """

    database_url: str
    redis_url: str | None = None
    cors_origins: tuple[str, ...] = ()
    # the process settings state the same default (tests/test_api_defaults.py): validator/ and api/
    # may not import each other, so the value is written in both and checked equal
    rate_limit_per_minute: int = 600
    ops_rate_limit_per_minute: int = 120  # /metrics, on a budget of its own (a scraper needs ~4)
    cache_ttl_s: float = 30.0
    redis_prefix: str = "gauntlet:api:"
    events_channel: str = EVENTS_CHANNEL
    keepalive_s: float = 15.0
    redis_timeout_s: float = 0.25
    redis_retry_s: float = 5.0
    commit_refresh_s: float = 2.0
    window_memo_size: int = 64
    max_commit_age_s: float | None = None
    statement_timeout_ms: int = 5_000
    pool_size: int = 8
    max_streams: int = 200
    max_streams_per_client: int = 8
    stream_max_s: float = 3600.0
    max_connections: int = 512
    max_connections_per_client: int = 64
    header_timeout_s: float = 10.0
    trusted_proxies: tuple[str, ...] = ()
    readiness_ttl_s: float = 1.0
    peer_labels: tuple[tuple[str, str], ...] = ()  # (hotkey, behaviour) pairs the demo knows

    def __post_init__(self) -> None:
        make_url(self.database_url)  # raises on a malformed URL before anything connects
        if self.redis_url is not None and not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"redis_url must be a redis:// URL, got {self.redis_url!r}")
        object.__setattr__(self, "cors_origins", tuple(self.cors_origins))
        object.__setattr__(self, "trusted_proxies", tuple(self.trusted_proxies))
        object.__setattr__(self, "peer_labels", tuple((str(h), str(b)) for h, b in self.peer_labels))
        if self.rate_limit_per_minute < 0 or self.ops_rate_limit_per_minute < 0:
            raise ValueError("rate limits must be >= 0 (0 disables one)")
        positive = {
            "cache_ttl_s": self.cache_ttl_s,
            "keepalive_s": self.keepalive_s,
            "redis_timeout_s": self.redis_timeout_s,
            "redis_retry_s": self.redis_retry_s,
            "commit_refresh_s": self.commit_refresh_s,
            "window_memo_size": self.window_memo_size,
            "statement_timeout_ms": self.statement_timeout_ms,
            "pool_size": self.pool_size,
            "max_streams": self.max_streams,
            "max_streams_per_client": self.max_streams_per_client,
            "stream_max_s": self.stream_max_s,
            "max_connections": self.max_connections,
            "max_connections_per_client": self.max_connections_per_client,
            "header_timeout_s": self.header_timeout_s,
            "readiness_ttl_s": self.readiness_ttl_s,
        }
        bad = [name for name, value in positive.items() if value <= 0]
        if bad:
            raise ValueError(f"must be positive: {', '.join(bad)}")
        if self.max_commit_age_s is not None and self.max_commit_age_s <= 0:
            raise ValueError("max_commit_age_s must be positive or None")
        if not self.redis_prefix or not self.events_channel:
            raise ValueError("redis_prefix and events_channel must not be empty")
