"""GET /v1/events relays Redis pub/sub as server-sent events; commits invalidate the hot-read cache."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import redis

from api.events import EventBroker, format_sse, parse_event
from storage.db import session_scope
from storage.writer import commit_window
from tests.api_fixtures import (
    REDIS_URL,
    SeededDb,
    config_for,
    redis_namespace,
    run_server,
    window_record,
)


def test_parse_event_keeps_only_well_formed_events() -> None:
    assert parse_event(b'{"type": "peer_scored", "window": 7, "uid": 3}') == {
        "type": "peer_scored",
        "window": 7,
        "uid": 3,
    }
    for raw in (
        b"not json",
        b"[1]",
        b'{"type": "reboot", "window": 1}',
        b'{"type": "weights_set"}',
        b'{"type": "weights_set", "window": -1}',
        b'{"type": "weights_set", "window": true}',
        b"\xff",
    ):
        assert parse_event(raw) is None, raw
    assert format_sse({"type": "weights_set", "window": 2}) == (
        b'event: weights_set\ndata: {"type":"weights_set","window":2}\n\n'
    )


def test_a_slow_client_loses_events_instead_of_stalling_others() -> None:
    seen: list[dict[str, object]] = []
    broker = EventBroker(seen.append)
    queue = broker.subscribe()
    for i in range(300):
        broker.publish({"type": "peer_scored", "window": i})
    assert queue.qsize() == 256 and broker.dropped == 44 and len(seen) == 300
    broker.unsubscribe(queue)
    assert broker.n_clients == 0


def _wait_for_subscriber(client: redis.Redis, channel: str) -> None:
    deadline = time.monotonic() + 5
    while dict(client.pubsub_numsub(channel)).get(channel.encode(), 0) < 1:
        assert time.monotonic() < deadline, "the API never subscribed"
        time.sleep(0.02)


def _sse_lines(response: httpx.Response) -> Iterator[str]:
    yield from (line for line in response.iter_lines() if line)


def test_events_are_relayed_from_redis(pg_db: SeededDb) -> None:
    with redis_namespace() as prefix, run_server(config_for(pg_db.url, prefix)) as server:
        channel = server.config.events_channel
        publisher = redis.Redis.from_url(REDIS_URL)
        with httpx.stream("GET", f"{server.base_url}/v1/events", timeout=5) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = _sse_lines(response)
            assert next(lines) == "retry: 5000" and next(lines) == ": connected"
            _wait_for_subscriber(publisher, channel)
            publisher.publish(channel, b"garbage")
            publisher.publish(channel, json.dumps({"type": "peer_scored", "window": 9, "uid": 2}))
            assert next(lines) == "event: peer_scored"
            assert json.loads(next(lines).removeprefix("data: ")) == {
                "type": "peer_scored",
                "window": 9,
                "uid": 2,
            }
        publisher.close()


def test_without_redis_the_stream_sends_keepalives(pg_db: SeededDb) -> None:
    with (
        run_server(config_for(pg_db.url, keepalive_s=0.1)) as server,
        httpx.stream("GET", f"{server.base_url}/v1/events", timeout=5) as response,
    ):
        lines = _sse_lines(response)
        assert [next(lines) for _ in range(3)] == ["retry: 5000", ": connected", ": keep-alive"]


def _latest_window(base_url: str) -> int:
    window: int = httpx.get(f"{base_url}/v1/peers").json()["window"]
    return window


def test_a_commit_event_invalidates_cached_reads(pg_db: SeededDb) -> None:
    # A long refresh interval: only the event can make the API notice the new commit quickly.
    with (
        redis_namespace() as prefix,
        run_server(config_for(pg_db.url, prefix, commit_refresh_s=600)) as server,
    ):
        assert _latest_window(server.base_url) == 5
        with session_scope(pg_db.engine) as session:
            commit_window(session=session, record=window_record(6))
        assert _latest_window(server.base_url) == 5  # still the cached view
        publisher = redis.Redis.from_url(REDIS_URL)
        _wait_for_subscriber(publisher, server.config.events_channel)
        publisher.publish(server.config.events_channel, json.dumps({"type": "window_committed", "window": 6}))
        publisher.close()
        deadline = time.monotonic() + 5
        while _latest_window(server.base_url) != 6:
            assert time.monotonic() < deadline, "the commit never reached the cache"
            time.sleep(0.02)
        top = httpx.get(f"{server.base_url}/v1/peers", params={"limit": 1}).json()["peers"][0]
        assert top["final_score"] == 6.06 and top["updated_window"] == 6
