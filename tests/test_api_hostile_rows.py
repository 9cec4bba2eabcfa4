"""Rows a peer can shape must not take the API down: a store's Last-Modified of year 9999 stored
before it was bounded, read on a PostgreSQL whose time zone is east of UTC (rendered as year 10000,
which psycopg cannot read: every read of the window answered 503), and any error no handler takes
(a plain-text 500 without the security headers, never counted)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import TimeoutError as PoolTimeout

import api.routes_trends
from api.app import create_app
from api.settings import ApiConfig
from storage.db import make_engine, session_scope
from storage.migrate import upgrade
from storage.writer import commit_window
from tests.api_fixtures import seeded_database, window_record
from tests.storage_fixtures import PG_ADMIN, PG_URL, create_pg_database, drop_pg_database
from validator.round.recording import _time

YEAR_9999 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


@pytest.fixture(name="tokyo_db")
def _tokyo_db() -> Iterator[str]:
    """A PostgreSQL database holding window 1, one submission stamped 9999-12-31 23:59:59 UTC, whose
    sessions default to Asia/Tokyo (a server installed on a host east of UTC)."""
    name = create_pg_database()
    url = PG_URL.format(name=name)
    try:
        upgrade(url)
        engine = make_engine(url)
        record = window_record(1)
        subs = list(record.submissions)
        subs[1] = dataclasses.replace(subs[1], storage_time=YEAR_9999)
        with session_scope(engine) as session:
            commit_window(session=session, record=dataclasses.replace(record, submissions=subs))
        engine.dispose()
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE \"{name}\" SET TimeZone = 'Asia/Tokyo'")
        yield url
    finally:
        drop_pg_database(name)


def test_a_far_future_storage_time_does_not_break_the_windows_reads(tokyo_db: str) -> None:
    app = create_app(ApiConfig(database_url=tokyo_db, rate_limit_per_minute=0))
    with TestClient(app) as client:
        for path in ("/v1/windows/1", "/v1/windows/1/selection", "/v1/peers", "/v1/peers/0", "/v1/workers"):
            response = client.get(path)
            assert response.status_code == 200, (path, response.text)
        stamps = {s["storage_time"] for s in client.get("/v1/windows/1").json()["submissions"]}
        assert any(s is not None and s.startswith("9999-12-31T23:59:59") for s in stamps), stamps


@pytest.mark.parametrize(
    "header",
    ["Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0100 00:00:00 GMT", "Thu, 01 Jan 1970 00:00:00 GMT"],
)
def test_a_last_modified_no_real_clock_reads_is_stored_as_unknown(header: str) -> None:
    assert _time(parsedate_to_datetime(header).timestamp()) is None


def test_real_times_are_stored() -> None:
    now = datetime(2026, 12, 5, 7, 0, tzinfo=UTC)
    assert _time(now.timestamp()) == now
    assert _time(float("nan")) is None


@contextmanager
def _trends_raising(error: Exception, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The API over a seeded SQLite database, its trends query raising `error`."""
    db = seeded_database(f"sqlite:///{folder}/api.db")

    def raising(**_: object) -> None:
        raise error

    monkeypatch.setattr(api.routes_trends, "window_trends", raising)
    app = create_app(ApiConfig(database_url=db.url, rate_limit_per_minute=0))
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            yield client
    finally:
        db.engine.dispose()


def test_an_unhandled_error_is_a_json_500_with_headers_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _trends_raising(RuntimeError("a fault of the API's own"), tmp_path, monkeypatch) as client:
        response = client.get("/v1/trends")
        assert response.status_code == 500
        assert response.json() == {
            "error": {"code": "internal_error", "message": "the request could not be answered"}
        }
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        counted = [
            line
            for line in client.get("/metrics").text.splitlines()
            if line.startswith("gauntlet_api_requests_total") and 'status="500"' in line
        ]
        assert counted and counted[0].endswith(" 1.0"), counted


def test_a_pool_with_every_connection_busy_is_unavailable_not_a_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = PoolTimeout("QueuePool limit of size 5 overflow 5 reached")
    with _trends_raising(busy, tmp_path, monkeypatch) as client:
        response = client.get("/v1/trends")
        assert response.status_code == 503 and response.json()["error"]["code"] == "database_unavailable"
