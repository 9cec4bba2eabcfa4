"""Budget keys per client (api/clients.py): an IPv6 client holds a /64, so its addresses are one."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import Request

from api.clients import client_key
from api.deps import client_address
from api.ratelimit import RateLimiter
from api.redis_gate import RedisGate


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2::5", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("2001:db8:1:3::5", "2001:db8:1:3::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("fe80::1%eth0", "fe80::/64"),
        ("unknown", "unknown"),
    ],
)
def test_client_key(host: str, key: str) -> None:
    assert client_key(host) == key


def test_one_ipv6_client_cannot_rotate_addresses_past_the_rate_limit() -> None:
    """Each of a /64's 2^64 addresses had a budget of its own: with 2 a minute, six addresses of
    one /64 were all let through."""
    limiter = RateLimiter(RedisGate(None, timeout_s=0.25, retry_s=5), prefix="t:", per_minute=2)

    def request(host: str) -> Request:
        return Request({"type": "http", "client": (host, 40000), "headers": []})

    async def checks() -> list[int | None]:
        return [await limiter.check(client_address(request(f"2001:db8:1:2::{i:x}"))) for i in range(6)]

    waits = asyncio.run(checks())
    assert waits[:2] == [None, None] and all(w is not None for w in waits[2:])
