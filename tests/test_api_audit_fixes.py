"""Fixes from the API audit: a weight-setting attempt invalidates the hot reads it shows in, /metrics
answers while the database is down, a uid has one spelling, and static pages carry their CSP."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import httpx
import redis

from api.cache import WindowMemo
from api.peer_views import PeerQuery, peer_list
from api.routes_ops import DASHBOARD_CSP, DOCS_CSP
from storage.db import session_scope
from storage.records import WeightSetRecord
from storage.writer import commit_window, record_weight_set
from tests.api_fixtures import (
    REDIS_URL,
    SeededDb,
    config_for,
    redis_namespace,
    run_server,
    seeded_database,
    window_record,
)
from tests.fault_fixtures import silent_server

DEAD_DB = "postgresql+psycopg://postgres@127.0.0.1:1/nothing"


def _weight_reads(base_url: str) -> tuple[int, list[str], int]:
    """How many attempts /v1/weights, /v1/trends (window 5) and /v1/windows/5 show."""
    weights = httpx.get(f"{base_url}/v1/weights").json()["weight_sets"]
    outcomes = httpx.get(f"{base_url}/v1/trends").json()["windows"][-1]["weight_outcomes"]
    detail = httpx.get(f"{base_url}/v1/windows/5").json()["weight_sets"]
    return len(weights), outcomes, len(detail)


def _record_failed_attempt(db: SeededDb) -> None:
    with session_scope(db.engine) as session:
        record_weight_set(
            session=session, record=WeightSetRecord(5, 9100, [0], [1.0], "failed", "rpc timeout")
        )


def _eventually(base_url: str, expected: tuple[int, list[str], int]) -> None:
    deadline = time.monotonic() + 5
    while (seen := _weight_reads(base_url)) != expected:
        assert time.monotonic() < deadline, f"still {seen}: the attempt never reached the cache"
        time.sleep(0.05)


def test_a_weight_setting_attempt_invalidates_cached_reads(tmp_path: Path) -> None:
    # Recorded after its window's commit: the newest committed window does not move. Without Redis
    # (in-process cache, 30 s TTL) only the periodic re-read of the version can notice it.
    db = seeded_database(f"sqlite:///{tmp_path}/weights.db")
    with run_server(config_for(db.url, commit_refresh_s=0.05, rate_limit_per_minute=0)) as server:
        assert _weight_reads(server.base_url) == (1, ["ok"], 1)
        _record_failed_attempt(db)
        _eventually(server.base_url, (2, ["ok", "failed"], 2))
    db.engine.dispose()


def test_a_weights_set_event_invalidates_cached_reads(tmp_path: Path) -> None:
    # A long refresh interval: only the event can make the API notice the attempt quickly.
    db = seeded_database(f"sqlite:///{tmp_path}/weights.db")
    with (
        redis_namespace() as prefix,
        run_server(config_for(db.url, prefix, commit_refresh_s=600, rate_limit_per_minute=0)) as server,
    ):
        assert _weight_reads(server.base_url) == (1, ["ok"], 1)
        _record_failed_attempt(db)
        assert _weight_reads(server.base_url) == (1, ["ok"], 1)  # still the cached view
        publisher = redis.Redis.from_url(REDIS_URL)
        channel = server.config.events_channel
        deadline = time.monotonic() + 5
        while dict(publisher.pubsub_numsub(channel)).get(channel.encode(), 0) < 1:
            assert time.monotonic() < deadline, "the API never subscribed"
            time.sleep(0.02)
        publisher.publish(channel, json.dumps({"type": "weights_set", "window": 5, "uids": [0]}))
        publisher.close()
        _eventually(server.base_url, (2, ["ok", "failed"], 2))
    db.engine.dispose()


def test_metrics_are_served_while_the_database_is_down(tmp_path: Path) -> None:
    with run_server(config_for(DEAD_DB, rate_limit_per_minute=0)) as server:
        assert httpx.get(f"{server.base_url}/v1/windows").status_code == 503
        down = httpx.get(f"{server.base_url}/metrics")
    assert down.status_code == 200, down.text
    assert "gauntlet_api_database_up 0.0" in down.text
    assert "gauntlet_api_redis_up 0.0" in down.text
    assert 'gauntlet_api_requests_total{method="GET",route="/v1/windows",status="503"} 1.0' in down.text
    db = seeded_database(f"sqlite:///{tmp_path}/up.db")
    with run_server(config_for(db.url)) as server:
        up = httpx.get(f"{server.base_url}/metrics").text
    db.engine.dispose()
    assert "gauntlet_api_database_up 1.0" in up and "gauntlet_api_latest_committed_window 5.0" in up


def test_metrics_do_not_wait_on_a_database_that_never_answers() -> None:
    """A database host that takes connections and never answers (hung, or a partition) held every
    scrape for psycopg's connect timeout, 10 s: a scraper's own timeout."""
    with silent_server() as location:
        port = int(location.rsplit(":", 1)[1].split("/", 1)[0])
        url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/nothing"
        with run_server(config_for(url, rate_limit_per_minute=0, commit_refresh_s=0.1)) as server:
            for _ in range(3):
                started = time.monotonic()
                scraped = httpx.get(f"{server.base_url}/metrics", timeout=30)
                assert time.monotonic() - started < 3, "the scrape waited on the database"
                assert scraped.status_code == 200 and "gauntlet_api_database_up 0.0" in scraped.text


def test_a_uid_with_leading_zeros_names_no_peer(tmp_path: Path) -> None:
    db = seeded_database(f"sqlite:///{tmp_path}/peers.db")
    with run_server(config_for(db.url, rate_limit_per_minute=0)) as server:
        base = server.base_url
        assert httpx.get(f"{base}/v1/peers/0").status_code == 200
        assert httpx.get(f"{base}/v1/peers/2/history").status_code == 200
        for path in ("/v1/peers/00", "/v1/peers/000", "/v1/peers/02", "/v1/peers/007/history"):
            refused = httpx.get(f"{base}{path}")
            assert refused.status_code == 404, path
            assert refused.json()["error"]["code"] == "not_found"
    db.engine.dispose()
    # refused before any cache or database read: a dead database answers 404, not 503
    with run_server(config_for(DEAD_DB, rate_limit_per_minute=0)) as server:
        assert httpx.get(f"{server.base_url}/v1/peers/00").status_code == 404
        assert httpx.get(f"{server.base_url}/v1/peers/0").status_code == 503


def test_static_pages_carry_the_content_security_policy(tmp_path: Path) -> None:
    db = seeded_database(f"sqlite:///{tmp_path}/static.db")
    with run_server(config_for(db.url)) as server, httpx.Client(base_url=server.base_url) as client:
        policy = {
            path: client.get(path).headers.get("content-security-policy")
            for path in ("/", "/docs", "/static/index.html", "/static/docs.html", "/static/app.js")
        }
    db.engine.dispose()
    assert policy["/"] == policy["/static/index.html"] == policy["/static/app.js"] == DASHBOARD_CSP
    assert policy["/docs"] == policy["/static/docs.html"] == DOCS_CSP


def test_head_slashes_and_script_caching(tmp_path: Path) -> None:
    """A second audit: HEAD was refused (405) on every route, a trailing slash redirected to the
    host the client named, and the dashboard's scripts carried no Cache-Control."""
    db = seeded_database(f"sqlite:///{tmp_path}/head.db")
    with run_server(config_for(db.url)) as server, httpx.Client(base_url=server.base_url) as client:
        for path in ("/healthz", "/readyz", "/", "/v1/peers", "/v1/windows/5", "/static/app.js"):
            got, head = client.get(path), client.head(path)
            assert head.status_code == got.status_code == 200, (path, head.status_code)
            assert head.content == b"" and head.headers["content-type"] == got.headers["content-type"]
            if "content-length" in got.headers:
                assert head.headers["content-length"] == got.headers["content-length"]
        slash = client.get("/v1/peers/", headers={"host": "evil.example"})
        assert slash.status_code == 404 and "location" not in slash.headers
        for script in ("/static/app.js", "/static/charts.js", "/static/app.css"):
            assert client.get(script).headers["cache-control"] == "no-cache"
    db.engine.dispose()


def test_the_peer_list_is_labelled_with_the_window_its_ratings_were_read_at(tmp_path: Path) -> None:
    """The API's view of the newest commit lags a commit by up to `commit_refresh_s`: the list
    said window 5, with window 5's statuses, over window 6's ratings (a second audit)."""
    db = seeded_database(f"sqlite:///{tmp_path}/lag.db")
    with session_scope(db.engine) as session:
        newer = window_record(6)
        first = newer.submissions[0]
        changed = [dataclasses.replace(first, status="missing", reason="missing"), *newer.submissions[1:]]
        commit_window(session=session, record=dataclasses.replace(newer, submissions=changed))
    with session_scope(db.engine) as session:
        body = peer_list(session, WindowMemo(8), PeerQuery(), latest=5)  # the lagging view
    db.engine.dispose()
    assert body.window == 6 and {p.updated_window for p in body.peers} == {6}
    assert next(p for p in body.peers if p.hotkey == first.hotkey).last_status == "missing"
