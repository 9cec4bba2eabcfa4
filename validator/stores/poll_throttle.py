"""A cap on the HEAD polls one host receives from this validator.

With `allow_any_storage_host` a peer names any public host and port as its store, and the polls
HEAD every peer's key every `upload_poll_s` (2 s): a crowd of identities naming one victim's host
made every validator a source of traffic against it (200 identities: 100 requests and TLS
handshakes a second from each validator). Polls to one host are spaced at least 1 / `rate` s apart,
whoever asked for them: the crowd's polls stretch, and only their own sightings' resolution.

The key is the host's name, not its address: one provider's anycast addresses serve every
account's name, and keyed by address honest peers sharing them would be slowed together. So a
crowd given one name each under a wildcard DNS record is not capped (README, threat table).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class HostThrottle:
    """Spaces the calls for one key (a host) `1 / rate` seconds apart; used from one event loop."""

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self._gap, self._clock, self._sleep = 1.0 / rate, clock, sleep
        self._next: dict[str, float] = {}

    async def wait(self, host: str) -> None:
        """Return at this call's turn for `host`: the turns are taken in the order of the calls."""
        now = self._clock()
        turn = max(now, self._next.get(host, now))
        self._next[host] = turn + self._gap
        if turn > now:
            await self._sleep(turn - now)
