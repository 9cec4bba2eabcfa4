"""Audit findings on fetching peers' submissions: per-peer polling, errors while a body is read, and
stores for peers' locations that take nothing from the validator's AWS_* environment."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from email.utils import formatdate
from urllib.parse import parse_qs, urlsplit

import obstore
import pytest
from obstore.store import S3Store

from scoring.ranking import Status
from scoring.types import Reason
from validator.stores.commitments import StorageLocation
from validator.stores.objstore import FetchConfig, Fetcher, FetchRequest, object_key, open_store
from validator.stores.peer_fetch import GENERIC
from validator.stores.peer_http import HttpLimits, ObjectHead, PeerHttp, StoreError
from validator.stores.sightings import Kept, Poller, PollSchedule, Sightings

LOCAL = HttpLimits(allow_private_hosts=True)


def location(port: int = 9, **creds: str) -> StorageLocation:
    return StorageLocation(scheme="http", host="127.0.0.1", port=port, bucket="bucket", **creds)


# --- polling: each peer on its own ---


Probe = Callable[[], Awaitable[str | None]]


def poll(probes: dict[str, Probe], seconds: float, **kw: float) -> tuple[Sightings, list[float]]:
    """Poll one fake store per hotkey for `seconds`; returns the sightings and when they were saved."""
    saves: list[float] = []

    async def probe(_: PeerHttp, request: FetchRequest) -> str | None:
        return await probes[request.hotkey]()

    now = time.time()
    schedule = PollSchedule(now, now + 60, kw.get("interval_s", 0.05), kw.get("head_timeout_s", 2.0))
    requests = [FetchRequest(h, location(), object_key(1, h), now) for h in probes]
    poller = Poller(probe, requests, LOCAL, schedule, kept=Kept(None, lambda _: saves.append(time.time())))
    poller.start()
    time.sleep(seconds)
    stopping = time.monotonic()
    seen = poller.stop()
    assert time.monotonic() - stopping < 1.0  # prompt, a poll in flight or not
    return seen, saves


def test_a_slow_store_widens_only_its_own_sightings() -> None:
    appears = time.time() + 0.5

    async def honest() -> str | None:
        return '"h"' if time.time() >= appears else None

    async def slow() -> None:
        await asyncio.sleep(0.6)  # answered just inside head_timeout_s: never thrown away

    async def broken() -> None:
        raise RuntimeError("a probe failing as nobody foresaw")

    started = time.time()
    seen, saves = poll({"honest": honest, "slow": slow, "broken": broken}, 1.2, head_timeout_s=1.0)
    sighting = seen.lookup("honest", '"h"')
    assert sighting is not None and sighting.resolution_s < 0.3  # a round of every peer took 0.6 s
    assert seen.answered_until("slow") is not None
    # saved every interval while the slow store's polls were in flight, and once more on stop
    assert len([t for t in saves if t < started + 0.6]) >= 3
    assert saves[-1] > started + 1.2


def test_an_object_without_an_etag_is_an_answered_poll_but_no_sighting() -> None:
    async def tagless() -> str:
        return ""

    async def held() -> None:
        await asyncio.sleep(10)  # in flight when the poller stops

    seen, _ = poll({"tagless": tagless, "held": held}, 0.3, head_timeout_s=20.0)
    assert seen.lookup("tagless", "") is None and seen.answered_until("tagless") is not None
    assert seen.snapshot()[0] == {}
    direct = Sightings()
    direct.record("p", "", sent=100.0, answered=100.5)
    assert (direct.lookup("p", ""), direct.answered_until("p")) == (None, 100.0)


# --- errors while a GET body is read ---

Serve = Callable[[str, socket.socket], None]


@contextmanager
def raw_server(serve: Serve) -> Iterator[tuple[int, list[tuple[str, dict[str, str]]]]]:
    """A store on 127.0.0.1 that writes raw bytes: `serve(method, connection)` answers a request and
    the connection is closed. Yields the port and a log of (method, headers)."""
    listener = socket.create_server(("127.0.0.1", 0))
    log: list[tuple[str, dict[str, str]]] = []

    def one(conn: socket.socket) -> None:
        with conn, suppress(OSError):
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            lines = data.split(b"\r\n\r\n")[0].decode().split("\r\n")
            headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
            log.append((lines[0].split(" ")[0], headers))
            serve(lines[0].split(" ")[0], conn)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield int(listener.getsockname()[1]), log
    finally:
        listener.close()


def head(size: int, **extra: str) -> bytes:
    fields = {"Content-Length": str(size), "ETag": '"e1"', "Last-Modified": formatdate(usegmt=True), **extra}
    return ("HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n").encode()


def short_body(method: str, conn: socket.socket) -> None:
    conn.sendall(head(1000) + (b"x" * 500 if method == "GET" else b""))  # then closes


def bad_chunks(method: str, conn: socket.socket) -> None:
    if method == "HEAD":
        conn.sendall(head(1000))
    else:
        conn.sendall(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: "e1"\r\n\r\nzz\r\nxx\r\n')


def burst_then_stall(method: str, conn: socket.socket) -> None:
    conn.sendall(head(4 << 20) + (b"z" * (2 << 20) if method == "GET" else b""))
    time.sleep(3.0 if method == "GET" else 0.0)  # the floor rate allows 2 s, httpx's read timeout 0.3


@pytest.mark.parametrize(
    ("serve", "size", "transient"),
    [(short_body, 1000, True), (bad_chunks, 1000, True), (burst_then_stall, 4 << 20, False)],
)
def test_a_broken_body_is_a_store_error(serve: Serve, size: int, transient: bool) -> None:
    limits = HttpLimits(rate_grace_s=0.3, allow_private_hosts=True)
    with raw_server(serve) as (port, _):
        loc = location(port)

        async def get() -> object:
            async with PeerHttp(limits) as http:
                return await http.get(loc, open_store(loc), "k", ObjectHead(size, '"e1"', None, None))

        with pytest.raises(StoreError) as raised:
            asyncio.run(get())
    assert (raised.value.reason, raised.value.transient) == (Reason.FETCH_FAILED, transient)


@pytest.mark.parametrize(("serve", "gets"), [(short_body, 2), (bad_chunks, 2), (burst_then_stall, 1)])
def test_a_broken_body_is_retried_or_failed_by_the_fetch(serve: Serve, gets: int) -> None:
    config = FetchConfig(
        head_timeout_s=2.0, peer_budget_s=6.0, rate_grace_s=0.3, allow_private_hosts=True, retries=1,
        retry_backoff_s=0.05,
    )  # fmt: skip
    with raw_server(serve) as (port, log):
        request = FetchRequest("peer", location(port), object_key(7, "peer"), time.time() - 30)
        [result] = asyncio.run(Fetcher(config).fetch_all([request], deadline_s=8.0))
    # a fetch task that died would end with "the window's fetch deadline passed"
    assert (result.status, result.reason, result.detail) == (
        Status.MISSING, Reason.FETCH_FAILED, GENERIC[Reason.FETCH_FAILED],
    )  # fmt: skip
    assert [m for m, _ in log].count("GET") == gets  # a read timeout is not retried


# --- peers' stores take nothing from the environment ---

HOSTILE_ENV = {
    "AWS_SESSION_TOKEN": "VALIDATOR-SESSION-TOKEN",
    "AWS_TOKEN": "VALIDATOR-TOKEN",
    "AWS_ACCESS_KEY_ID": "VALIDATORKEY",
    "AWS_SECRET_ACCESS_KEY": "validatorsecret",
    "AWS_ENDPOINT_URL_S3": "https://validator-endpoint.example.net",
    "AWS_ENDPOINT": "https://validator-endpoint.example.net",
    "AWS_REGION": "validator-region-1",
    "AWS_BUCKET": "validator-bucket",
    "AWS_REQUEST_PAYER": "true",
    "AWS_SKIP_SIGNATURE": "true",
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true",
    "AWS_UNSIGNED_PAYLOAD": "true",
    "AWS_PROXY_URL": "http://127.0.0.1:9",
}


def presigned(store: object) -> tuple[str, dict[str, list[str]]]:
    assert isinstance(store, S3Store)

    async def sign() -> str:
        return await obstore.sign_async(store, "GET", "k/o.safetensors", timedelta(minutes=10))

    url = urlsplit(asyncio.run(sign()))
    query = parse_qs(url.query, keep_blank_values=True)  # an empty token is a token too
    for varying in ("X-Amz-Date", "X-Amz-Signature"):
        query.pop(varying)
    return f"{url.netloc}{url.path}", query


def test_a_peers_store_takes_nothing_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    peer = location(9, access_key_id="peerkey", secret_access_key="peersecret")
    for name in HOSTILE_ENV:
        monkeypatch.delenv(name, raising=False)
    clean = presigned(open_store(peer))
    for name, value in HOSTILE_ENV.items():
        monkeypatch.setenv(name, value)
    target, query = presigned(open_store(peer))
    assert "X-Amz-Security-Token" not in query
    assert (target, query) == clean and query["X-Amz-Credential"][0].startswith("peerkey/")
    # what obstore itself sends (the validator's own archive and selection stores)
    with raw_server(lambda _, conn: conn.sendall(head(3))) as (port, log):
        for store in (open_store(location(port)), open_store(location(port), credentials=("own", "s3cr3t"))):
            assert obstore.head(store, "k")["size"] == 3  # not through the proxy of AWS_PROXY_URL
    (_, anonymous), (_, signed) = log
    assert "authorization" not in anonymous
    assert signed["authorization"].startswith("AWS4-HMAC-SHA256 Credential=own/")
    assert not any(h.startswith("x-amz-security-token") or "payer" in h for _, hs in log for h in hs)
