"""The API's memo of committed windows is bounded by the rows it holds, not only by their count."""

from __future__ import annotations

import dataclasses

import pytest

from api.cache import WindowMemo
from storage.records import WindowSummary
from tests.storage_fixtures import make_window


def _stored(window: int, links_per_peer: int = 0):  # type: ignore[no-untyped-def]
    record = make_window(window, n_peers=8)
    links = {f"5Other{i}": 0.1 for i in range(links_per_peer)}
    ratings = [dataclasses.replace(r, state={**r.state, "links": links}) for r in record.ratings]
    header = WindowSummary(window, "committed", record.base_fingerprint, None, None, 8, 4)
    return header, dataclasses.replace(record, ratings=ratings)


def test_windows_heavy_with_links_are_evicted_by_rows() -> None:
    """By count alone, 64 windows of a sybil crowd (30,000 rating links each) held 1.5 GB."""
    memo = WindowMemo(64, max_rows=5_000)
    for w in range(1, 6):
        memo.put(_stored(w, links_per_peer=250))  # 2,000 links and ~30 rows a window
    assert [w for w in range(1, 6) if memo.get(w) is not None] == [4, 5]
    memo.put(_stored(9, links_per_peer=1_000))  # larger than the whole budget: not kept
    assert memo.get(9) is None and memo.get(5) is not None


def test_light_windows_are_bounded_by_count() -> None:
    memo = WindowMemo(3)
    for w in range(1, 6):
        memo.put(_stored(w))
    memo.put(_stored(4))  # again: no double count
    assert [w for w in range(1, 6) if memo.get(w) is not None] == [3, 4, 5]


def test_the_local_response_cache_is_bounded_by_bytes() -> None:
    """With Redis off, 512 whole bodies were kept: a sybil crowd's window body is megabytes."""
    import asyncio

    from api.cache import ResponseCache
    from api.metrics import ApiMetrics
    from api.redis_gate import RedisGate

    cache = ResponseCache(
        RedisGate(None, timeout_s=0.1, retry_s=1), prefix="t:", ttl_s=60, metrics=ApiMetrics()
    )
    body = b"x" * (ResponseCache.LOCAL_BYTES // 10)

    async def fill() -> None:
        for i in range(40):
            await cache.fetch(f"k{i}", lambda: body)

    asyncio.run(fill())
    held = [i for i in range(40) if cache._get_local(f"k{i}") is not None]
    assert held == list(range(30, 40))  # the newest ten, a tenth of the budget each
    huge = b"y" * (ResponseCache.LOCAL_BYTES // 4)
    asyncio.run(cache.fetch("huge", lambda: huge))
    assert cache._get_local("huge") is None and cache._get_local("k39") is not None


def test_what_the_api_writes_to_redis_is_bounded_per_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each distinct query is a key: a client walking `limit` from 10000 down filled Redis (which also
    holds the leader lock and the events) with a megabyte body per request, 300 MB per TTL."""
    import asyncio

    import redis as sync_redis

    from api.cache import ResponseCache
    from api.metrics import ApiMetrics
    from api.redis_gate import RedisGate
    from tests.api_fixtures import REDIS_URL, redis_namespace

    monkeypatch.setattr(ResponseCache, "SHARED_BYTES_PER_TTL", 1_000_000)
    body = b"z" * 300_000
    with redis_namespace() as prefix:
        gate = RedisGate(REDIS_URL, timeout_s=1.0, retry_s=1)
        cache = ResponseCache(gate, prefix=prefix, ttl_s=60, metrics=ApiMetrics())

        async def fill() -> list[bytes]:
            served = [await cache.fetch(f"{prefix}k{i}", lambda: body) for i in range(10)]
            await gate.close()
            return served

        assert asyncio.run(fill()) == [body] * 10  # every request is still answered
        client = sync_redis.Redis.from_url(REDIS_URL)
        stored = sum(len(client.get(k) or b"") for k in client.scan_iter(match=f"{prefix}*"))
        client.close()
    assert stored == 900_000  # three bodies fit the budget; the rest are served unstored
