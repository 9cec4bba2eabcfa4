"""Per-client rate limit: a fixed one-minute window counted in Redis, or in this process without it."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from redis.asyncio import Redis

from api.redis_gate import RedisGate

SLOT_S = 60


class RateLimiter:
    """`check(client)` returns None when allowed, else the seconds to wait (for Retry-After).

    Counting in Redis shares the budget across API processes; the in-process fallback (Redis off or
    down) limits each process on its own, which is looser but never blocks serving.
    """

    def __init__(
        self,
        gate: RedisGate,
        *,
        prefix: str,
        per_minute: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._gate = gate
        self._prefix = prefix
        self._limit = per_minute
        self._clock = clock
        self._local: dict[str, int] = {}
        self._local_slot = -1

    @property
    def enabled(self) -> bool:
        return self._limit > 0

    async def check(self, client: str) -> int | None:
        if not self.enabled:
            return None
        now = self._clock()
        slot = int(now // SLOT_S)
        key = f"{self._prefix}rl:{client}:{slot}"

        async def count_in_redis(r: Redis) -> int:
            async with r.pipeline(transaction=False) as pipe:
                pipe.incr(key)
                pipe.expire(key, SLOT_S + 1)
                count, _ = await pipe.execute()
            return int(count)

        count = await self._gate.call(count_in_redis)
        if count is None:
            count = self._count_locally(client, slot)
        if count <= self._limit:
            return None
        return max(1, math.ceil((slot + 1) * SLOT_S - now))

    def _count_locally(self, client: str, slot: int) -> int:
        if slot != self._local_slot:
            self._local.clear()
            self._local_slot = slot
        self._local[client] = self._local.get(client, 0) + 1
        return self._local[client]
