"""One Redis client behind a breaker: the API keeps serving from Postgres while Redis is down."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)
T = TypeVar("T")


class RedisGate:
    """Runs Redis calls with a short timeout; after a failure, skips Redis for `retry_s` seconds.

    Without the pause every request would wait out the timeout while Redis is unreachable.
    A gate built with no URL is permanently closed: every call returns None.
    """

    def __init__(self, url: str | None, *, timeout_s: float, retry_s: float) -> None:
        self._url = url
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._client: Redis | None = None
        self._down_until = 0.0

    @property
    def configured(self) -> bool:
        return self._url is not None

    @property
    def up(self) -> bool:
        return self._url is not None and time.monotonic() >= self._down_until

    def client(self) -> Redis | None:
        """The shared client, created on first use inside the running event loop."""
        if self._url is None:
            return None
        if self._client is None:
            self._client = Redis.from_url(
                self._url,
                socket_timeout=self._timeout_s,
                socket_connect_timeout=self._timeout_s,
                retry_on_timeout=False,
            )
        return self._client

    async def call(self, work: Callable[[Redis], Awaitable[T]]) -> T | None:
        """`work(client)`, or None when Redis is off, paused or failing (the failure pauses it)."""
        client = self.client()
        if client is None or not self.up:
            return None
        try:
            return await work(client)
        except (RedisError, OSError, TimeoutError) as exc:
            if self._down_until <= time.monotonic():
                log.warning("redis unavailable, serving without it for %.0f s: %s", self._retry_s, exc)
            self._down_until = time.monotonic() + self._retry_s
            return None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
