"""Health, readiness, metrics, rate limiting, CORS, read-only access, SQLite, and life without Redis."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from api.app import create_app
from api.deps import AppState
from api.ratelimit import RateLimiter
from api.redis_gate import RedisGate
from storage.migrate import upgrade
from tests.api_fixtures import (
    SeededDb,
    clear_of_a_minute_edge,
    config_for,
    redis_namespace,
    run_server,
    seeded_database,
)

DEAD_REDIS = "redis://127.0.0.1:1/0"
DEAD_DB = "postgresql+psycopg://postgres@127.0.0.1:1/nothing"


def test_health_and_readiness(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    body = ready.json()
    assert ready.status_code == 200
    assert (body["status"], body["database"], body["redis"], body["latest_committed_window"]) == (
        "ready",
        True,
        "up",
        5,
    )
    assert 0 <= body["last_commit_age_s"] < 600


def test_readiness_fails_on_an_old_commit_or_no_database(pg_db: SeededDb) -> None:
    with run_server(config_for(pg_db.url, max_commit_age_s=0.001)) as server:
        stale = httpx.get(f"{server.base_url}/readyz")
    assert stale.status_code == 503 and stale.json()["status"] == "stale"
    with run_server(config_for(DEAD_DB)) as server:
        down = httpx.get(f"{server.base_url}/readyz")
        peers = httpx.get(f"{server.base_url}/v1/peers")
    assert down.status_code == 503
    assert (down.json()["status"], down.json()["database"], down.json()["redis"]) == (
        "unavailable",
        False,
        "disabled",
    )
    assert peers.status_code == 503 and peers.json()["error"]["code"] == "database_unavailable"


def test_metrics_count_requests_by_route_template(client: httpx.Client) -> None:
    client.get("/v1/windows/3")
    client.get("/v1/windows/3")
    text_body = client.get("/metrics").text
    assert 'gauntlet_api_requests_total{method="GET",route="/v1/windows/{window}",status="200"}' in text_body
    assert 'gauntlet_api_cache_total{result="hit"}' in text_body
    assert "gauntlet_api_latest_committed_window 5.0" in text_body


def test_rate_limit_refuses_with_retry_after(pg_db: SeededDb) -> None:
    with (
        redis_namespace() as prefix,
        run_server(config_for(pg_db.url, prefix, rate_limit_per_minute=3)) as server,
    ):
        clear_of_a_minute_edge()
        statuses = [httpx.get(f"{server.base_url}/v1/windows?limit=1") for _ in range(10)]
        health = httpx.get(f"{server.base_url}/healthz")
    refused = [r for r in statuses if r.status_code == 429]
    assert refused, [r.status_code for r in statuses]
    assert int(refused[0].headers["retry-after"]) in range(1, 61)
    assert refused[0].json()["error"]["code"] == "rate_limited"
    assert health.status_code == 200  # operations endpoints are not limited


def test_rate_limit_counts_in_process_without_redis() -> None:
    limiter = RateLimiter(
        RedisGate(None, timeout_s=0.1, retry_s=1), prefix="t:", per_minute=2, clock=lambda: 120.0 + 15.5
    )

    async def three_calls() -> list[int | None]:
        return [await limiter.check("1.2.3.4") for _ in range(3)] + [await limiter.check("5.6.7.8")]

    assert asyncio.run(three_calls()) == [None, None, 45, None]


def test_api_serves_from_postgres_while_redis_is_down(pg_db: SeededDb) -> None:
    config = config_for(pg_db.url, redis_url=DEAD_REDIS, rate_limit_per_minute=2)
    with run_server(config) as server:
        clear_of_a_minute_edge()
        first = httpx.get(f"{server.base_url}/v1/windows/5")
        second = httpx.get(f"{server.base_url}/v1/windows/5")
        third = httpx.get(f"{server.base_url}/v1/peers")  # the in-process limit still applies
        ready = httpx.get(f"{server.base_url}/readyz")
        metrics = httpx.get(f"{server.base_url}/metrics").text
    assert first.status_code == 200 and first.json()["summary"]["window"] == 5
    assert second.json() == first.json() and third.status_code == 429
    assert ready.status_code == 200 and ready.json()["redis"] == "down"
    # The second read of window 5 came from the in-process cache that stands in for Redis.
    assert 'gauntlet_api_cache_total{result="local_hit"} 1.0' in metrics
    assert "gauntlet_api_redis_up 0.0" in metrics


def test_cors_origins_are_configurable(pg_db: SeededDb) -> None:
    config = config_for(pg_db.url, cors_origins=("https://dash.example",))
    with run_server(config) as server:
        allowed = httpx.get(f"{server.base_url}/v1/windows", headers={"Origin": "https://dash.example"})
        other = httpx.get(f"{server.base_url}/v1/windows", headers={"Origin": "https://evil.example"})
    assert allowed.headers["access-control-allow-origin"] == "https://dash.example"
    assert "access-control-allow-origin" not in other.headers


def test_the_api_cannot_write_postgres(pg_db: SeededDb) -> None:
    state: AppState = create_app(config_for(pg_db.url)).state.gauntlet
    with pytest.raises(DBAPIError, match="read-only transaction"):
        state.read_sync(lambda s: s.execute(text("DELETE FROM weight_sets")))
    state.engine.dispose()


def test_the_api_serves_sqlite(tmp_path: Path) -> None:
    db = seeded_database(f"sqlite:///{tmp_path}/gauntlet.db")
    with run_server(config_for(db.url)) as server:
        peers = httpx.get(f"{server.base_url}/v1/peers").json()
        detail = httpx.get(f"{server.base_url}/v1/peers/2", params={"windows": 1}).json()
        selection = httpx.get(f"{server.base_url}/v1/windows/5/selection")
    db.engine.dispose()
    assert peers["window"] == 5 and [p["uid"] for p in peers["peers"]] == [0, 1, 2, 3, 4, 5]
    assert detail["windows"][0]["selection"]["role"] == "reserve"
    assert selection.headers["cache-control"].endswith("immutable")


def test_readiness_needs_a_migrated_database_and_a_committed_window(tmp_path: Path) -> None:
    never_migrated = f"sqlite:///{tmp_path}/bare.db"
    empty = f"sqlite:///{tmp_path}/empty.db"
    upgrade(empty)
    with run_server(config_for(never_migrated)) as server:
        bare = httpx.get(f"{server.base_url}/readyz")
    with run_server(config_for(empty)) as server:
        no_windows = httpx.get(f"{server.base_url}/readyz")
    assert bare.status_code == 503 and bare.json()["status"] == "not_migrated"
    assert "revision None" in bare.json()["reason"]
    assert no_windows.status_code == 503
    assert (no_windows.json()["status"], no_windows.json()["reason"]) == (
        "no_windows",
        "no window committed yet",
    )
    assert no_windows.json()["database"] is True and no_windows.json()["latest_committed_window"] is None
