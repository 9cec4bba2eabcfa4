"""The API under abuse (issue 11): event-stream caps and lifetimes, connection and header limits,
forwarded addresses only from trusted proxies, cheap readiness, limited metrics, hostile route
parameters and the security headers."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, event

from api.server import UVICORN_LOG_THROTTLE, LogThrottle
from tests.api_fixtures import (
    LiveServer,
    SeededDb,
    clear_of_a_minute_edge,
    config_for,
    run_server,
)


def _open_stream(stack: ExitStack, client: httpx.Client, forwarded_for: str | None = None) -> httpx.Response:
    headers = {} if forwarded_for is None else {"X-Forwarded-For": forwarded_for}
    return stack.enter_context(client.stream("GET", "/v1/events", headers=headers))


def _eventually_opens(client: httpx.Client, forwarded_for: str) -> None:
    """A closed stream gives its slot back soon after the client goes (the server notices the EOF)."""
    deadline = time.monotonic() + 5
    while True:
        with ExitStack() as stack:
            if _open_stream(stack, client, forwarded_for).status_code == 200:
                return
        assert time.monotonic() < deadline, "the slot was never released"
        time.sleep(0.05)


def test_event_streams_are_capped_per_client_and_in_all(pg_db: SeededDb) -> None:
    # Behind a trusted proxy each forwarded address is a client of its own.
    config = config_for(pg_db.url, trusted_proxies=("127.0.0.1",), max_streams=3, max_streams_per_client=2)
    with run_server(config) as server, httpx.Client(base_url=server.base_url, timeout=5) as client:
        with ExitStack() as stack:
            assert [_open_stream(stack, client, "10.0.0.1").status_code for _ in range(2)] == [200, 200]
            third = _open_stream(stack, client, "10.0.0.1")
            assert third.status_code == 503 and int(third.headers["retry-after"]) > 0
            assert third.read() and third.json()["error"]["code"] == "too_many_streams"
            assert _open_stream(stack, client, "10.0.0.2").status_code == 200
            assert _open_stream(stack, client, "10.0.0.3").status_code == 503  # 3 open in all
            metrics = client.get("/metrics").text
            assert "gauntlet_api_streams_refused_total 2.0" in metrics
            assert "gauntlet_api_sse_clients 3.0" in metrics
        _eventually_opens(client, "10.0.0.1")
        with ExitStack() as stack:  # every slot came back
            assert [_open_stream(stack, client, f"10.0.1.{i}").status_code for i in range(3)] == [200] * 3


def test_an_event_stream_ends_after_its_lifetime(pg_db: SeededDb) -> None:
    config = config_for(pg_db.url, keepalive_s=0.1, stream_max_s=0.5)
    with (
        run_server(config) as server,
        httpx.stream("GET", f"{server.base_url}/v1/events", timeout=5) as response,
    ):
        started = time.monotonic()
        lines = [line for line in response.iter_lines() if line]
        assert time.monotonic() - started < 3
    assert lines[:2] == ["retry: 5000", ": connected"] and set(lines[2:]) <= {": keep-alive"}


@contextmanager
def _raw_sockets(server: LiveServer, n: int) -> Iterator[list[socket.socket]]:
    port = int(server.base_url.rsplit(":", 1)[1])
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def test_a_request_whose_headers_never_finish_is_cut_off(pg_db: SeededDb) -> None:
    with (
        run_server(config_for(pg_db.url, header_timeout_s=0.3)) as server,
        _raw_sockets(server, 1) as (sock,),
    ):
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # no blank line: headers never end
        started = time.monotonic()
        assert sock.recv(1024) == b""  # closed by the server, not by our 5 s socket timeout
        assert time.monotonic() - started < 3
        # A complete request on a fresh connection is still served.
        assert httpx.get(f"{server.base_url}/healthz").status_code == 200


def test_a_request_whose_body_trickles_in_is_cut_off(pg_db: SeededDb) -> None:
    """Headers announcing a body sent a byte at a time: every byte restarted uvicorn's keep-alive
    timer and nothing bounded the body, so a handful of such sockets held connection slots for good
    (the handler answers a GET without reading its body, so the request was never complete)."""
    with (
        run_server(config_for(pg_db.url, header_timeout_s=0.5)) as server,
        _raw_sockets(server, 1) as (sock,),
    ):
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
        sock.settimeout(0.1)
        started, received = time.monotonic(), b""
        while time.monotonic() - started < 5:
            try:
                sock.sendall(b"y")
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:  # reset by the server: closed
                break
            if not chunk:
                break
            received += chunk
        assert time.monotonic() - started < 3, "the trickled request was never cut off"
        assert received.startswith(b"HTTP/1.1 200")  # answered, then closed for the unfinished body


def test_one_client_cannot_take_every_connection(pg_db: SeededDb) -> None:
    with (
        run_server(config_for(pg_db.url, max_connections_per_client=2)) as server,
        _raw_sockets(server, 3) as socks,
    ):
        assert socks[2].recv(1024) == b""  # the third from this address is closed at once
        assert socks[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") is None
        assert socks[0].recv(1024).startswith(b"HTTP/1.1 200")
    # a trusted proxy carries many clients' connections: it is not capped
    config = config_for(pg_db.url, max_connections_per_client=2, trusted_proxies=("127.0.0.1",))
    with run_server(config) as server, _raw_sockets(server, 3) as socks:
        socks[2].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert socks[2].recv(1024).startswith(b"HTTP/1.1 200")


def test_connections_beyond_the_limit_are_refused(pg_db: SeededDb) -> None:
    with run_server(config_for(pg_db.url, max_connections=4)) as server:
        with _raw_sockets(server, 4):
            time.sleep(0.2)  # let the server accept them
            assert httpx.get(f"{server.base_url}/healthz").status_code == 503
        deadline = time.monotonic() + 5
        while httpx.get(f"{server.base_url}/healthz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def _statuses(server: LiveServer, path: str, n: int, forwarded: bool) -> list[int]:
    return [
        httpx.get(
            f"{server.base_url}{path}", headers={"X-Forwarded-For": f"10.9.0.{i}"} if forwarded else {}
        ).status_code
        for i in range(n)
    ]


def test_forwarded_for_is_believed_only_from_trusted_proxies(pg_db: SeededDb) -> None:
    # Rotating X-Forwarded-For from an untrusted (even loopback) peer does not escape the limit...
    with run_server(config_for(pg_db.url, rate_limit_per_minute=3)) as server:
        assert 429 in _statuses(server, "/v1/windows?limit=1", 8, forwarded=True)
    # ...while behind a configured proxy each forwarded address has its own budget.
    config = config_for(pg_db.url, rate_limit_per_minute=3, trusted_proxies=("127.0.0.1",))
    with run_server(config) as server:
        assert _statuses(server, "/v1/windows?limit=1", 8, forwarded=True) == [200] * 8


def test_metrics_are_rate_limited(pg_db: SeededDb) -> None:
    with run_server(config_for(pg_db.url, ops_rate_limit_per_minute=3)) as server:
        clear_of_a_minute_edge()
        statuses = _statuses(server, "/metrics", 6, forwarded=False)
        api = httpx.get(f"{server.base_url}/v1/windows?limit=1")
    assert statuses[:3] == [200] * 3 and 429 in statuses
    assert api.status_code == 200  # the API's own budget is untouched


def test_readiness_reads_the_database_once_per_ttl(pg_db: SeededDb) -> None:
    reads: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "windows" in statement:
            reads.append(statement)

    async def probe(base_url: str) -> list[int]:
        async with httpx.AsyncClient(base_url=base_url) as client:
            burst = await asyncio.gather(*(client.get("/readyz") for _ in range(20)))
            more = [await client.get("/readyz") for _ in range(10)]
        return [r.status_code for r in [*burst, *more]]

    event.listen(Engine, "before_cursor_execute", count)
    try:
        with run_server(config_for(pg_db.url, readiness_ttl_s=60)) as server:
            assert asyncio.run(probe(server.base_url)) == [200] * 30
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    assert len(reads) == 2, reads  # one readiness check: the newest commit and its header


HOSTILE = ["²", "٣", "１", "𝟙", "1e3", "0x10", "+1", "-0", "nan", "%ff", "%c0%af", "%00", "9" * 40, "\u200b"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_route_parameters_are_never_a_server_error(client: httpx.Client, value: str) -> None:
    paths = [f"/v1/peers/{value}", f"/v1/peers/{value}/history", f"/v1/windows/{value}"]
    paths += [f"/v1/windows/{value}/selection", f"/v1/peers?limit={value}", f"/v1/peers?sort={value}"]
    paths += [f"/v1/peers/0?windows={value}", f"/v1/peers/0/history?to_window={value}"]
    paths += [f"/v1/windows?before={value}", f"/v1/windows?limit={value}"]
    for path in paths:
        response = client.get(path)
        assert response.status_code in (200, 404, 422), (path, response.status_code)
        if response.status_code != 200:
            assert response.json()["error"]["code"] in ("not_found", "invalid_parameter"), path


def test_superscript_digits_name_no_peer(client: httpx.Client) -> None:
    assert client.get("/v1/peers/²").json()["error"]["code"] == "not_found"
    assert client.get("/v1/peers/²/history").status_code == 404


def test_every_response_carries_the_security_headers(client: httpx.Client) -> None:
    for path in ("/", "/v1/peers", "/healthz", "/readyz", "/static/app.js", "/v1/nothing", "/v1/peers/²"):
        response = client.get(path)
        assert response.headers["x-content-type-options"] == "nosniff", path
        assert response.headers["referrer-policy"] == "no-referrer", path
    csp = client.get("/").headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp


def test_a_flood_of_refused_requests_logs_one_line_per_period(pg_db: SeededDb) -> None:
    before = UVICORN_LOG_THROTTLE.suppressed
    with run_server(config_for(pg_db.url, max_connections=2)) as server, _raw_sockets(server, 2):
        time.sleep(0.2)
        statuses = [httpx.get(f"{server.base_url}/healthz").status_code for _ in range(20)]
    assert statuses == [503] * 20
    # uvicorn warned "Exceeded concurrency limit." for each; at most one per period got through.
    assert UVICORN_LOG_THROTTLE.suppressed - before >= 19
    assert UVICORN_LOG_THROTTLE in logging.getLogger("uvicorn.error").filters


def test_log_throttle_passes_each_message_once_per_period() -> None:
    throttle = LogThrottle(period_s=60)

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.error", logging.WARNING, __file__, 1, msg, None, None)

    passed = [throttle.filter(record(m)) for m in ["flood", "flood", "other", "flood"]]
    assert passed == [True, False, True, False] and throttle.suppressed == 2


def test_made_up_request_methods_add_no_metric_series(pg_db: SeededDb) -> None:
    """The method is the client's choice: each made-up one would be a series kept forever."""
    with (
        run_server(config_for(pg_db.url)) as server,
        httpx.Client(base_url=server.base_url, timeout=5) as client,
    ):
        for i in range(20):
            assert client.request(f"M{i:05d}XYZ", "/nope").status_code in (404, 405)
        metrics = client.get("/metrics").text
    assert "M00000XYZ" not in metrics and 'method="other"' in metrics
