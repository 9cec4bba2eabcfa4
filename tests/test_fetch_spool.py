"""Spooled fetches (issue 14): a body goes to a file piece by piece, bounded by HEAD's size, and a
body that fails leaves nothing behind."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from scoring.ranking import Status
from scoring.types import Reason
from storage.archive import LocalBlobStore, ObjectBlobStore, SubmissionArchive
from tests.fake_s3 import FakeObject, FakeS3, serving
from validator.round.fetching import PutWindow, fetch_window
from validator.round.outcomes import PeerTarget
from validator.stores import peer_http
from validator.stores.commitments import LocationPolicy, StorageLocation, parse_location
from validator.stores.objstore import FetchConfig, Fetcher, FetchRequest, object_key, publish
from validator.stores.peer_fetch import clear_spool, read_stream, spool_path

T0 = time.time() - 10
WINDOW = 4
CONFIG = FetchConfig(retries=1, retry_backoff_s=0.0, allow_private_hosts=True, rate_grace_s=0.5)


class _Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def _iterate(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk

    def stream(self, min_chunk_size: int) -> AsyncIterator[bytes]:
        return self._iterate()


def test_a_spooled_body_is_a_file_of_exactly_its_bytes(tmp_path: Path) -> None:
    target = tmp_path / "one.safetensors"
    assert asyncio.run(read_stream(_Response([b"abc", b"de"]), 5, spool=target)) == target
    assert target.read_bytes() == b"abcde"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.safetensors"]


class _ThreadNoting:
    """A spool file that notes which thread wrote each piece."""

    def __init__(self, file: BinaryIO, threads: list[int]) -> None:
        self.file, self.threads = file, threads

    def write(self, data: bytes | memoryview) -> int:
        self.threads.append(threading.get_ident())
        return self.file.write(data)

    def close(self) -> None:
        self.file.close()


def test_spool_writes_leave_the_event_loop_free(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write stalled by disk writeback must not stall the loop, where every peer's rate timeout runs."""
    threads: list[int] = []

    def noting(path: Path, mode: str) -> _ThreadNoting:
        assert mode == "wb"
        return _ThreadNoting(path.open("wb"), threads)  # Body closes it, as its own file

    monkeypatch.setattr(peer_http, "open", noting, raising=False)  # Body's open, not the builtin
    target = tmp_path / "one.safetensors"
    assert asyncio.run(read_stream(_Response([b"abc", b"de"]), 5, spool=target)) == target
    assert target.read_bytes() == b"abcde"
    assert len(threads) == 2 and threading.get_ident() not in threads  # the loop runs on this thread


@pytest.mark.parametrize("chunks", [[b"abc", b"def"], [b"ab"]])
def test_a_body_of_the_wrong_size_leaves_no_file(tmp_path: Path, chunks: list[bytes]) -> None:
    with pytest.raises(Exception, match=r"HEAD reported|body ended"):
        asyncio.run(read_stream(_Response(chunks), 5, spool=tmp_path / "x.safetensors"))
    assert list(tmp_path.iterdir()) == []


def _spooling(tmp_path: Path) -> FetchConfig:
    return dataclasses.replace(CONFIG, spool_dir=tmp_path / "spool")  # made by the first body


def test_a_local_fetch_spools_to_disk(tmp_path: Path) -> None:
    location = parse_location(f"file://{tmp_path}/peer", LocationPolicy.local())
    payload = bytes(range(256)) * 1000
    asyncio.run(publish(location, object_key(WINDOW, "hk1"), payload, mtime=T0 + 1))
    config = _spooling(tmp_path)
    request = FetchRequest("hk1", location, object_key(WINDOW, "hk1"), T0)
    result = asyncio.run(Fetcher(config).fetch(request))
    assert (result.status, result.data, result.size) == (Status.OK, None, len(payload))
    assert result.path is not None and result.path.parent == config.spool_dir
    assert result.path.read_bytes() == payload


@pytest.fixture
def store() -> Iterator[FakeS3]:
    with serving(FakeS3()) as s:
        yield s


def test_an_s3_fetch_spools_and_a_failed_one_leaves_nothing(store: FakeS3, tmp_path: Path) -> None:
    location = StorageLocation(scheme="http", host="127.0.0.1", port=store.port, bucket="bucket")
    good, slow = bytes(range(256)) * 64, b"s" * 50_000
    store.put(f"/bucket/{object_key(WINDOW, 'good')}", FakeObject(good, T0 + 1))
    store.put(f"/bucket/{object_key(WINDOW, 'slow')}", FakeObject(slow, T0 + 1, trickle_bytes_per_s=500.0))
    config = _spooling(tmp_path)
    requests = [FetchRequest(h, location, object_key(WINDOW, h), T0) for h in ("good", "slow")]
    results = asyncio.run(Fetcher(config).fetch_all(requests, deadline_s=10.0))
    assert results[0].status == Status.OK and results[0].data is None
    assert results[0].path is not None and results[0].path.read_bytes() == good
    assert (results[1].status, results[1].reason, results[1].path) == (
        Status.MISSING,
        Reason.FETCH_FAILED,
        None,
    )
    assert config.spool_dir is not None
    assert sorted(p.name for p in config.spool_dir.iterdir()) == [results[0].path.name]


@pytest.mark.parametrize("kind", ["local", "object"])
def test_a_spooled_file_is_archived_as_its_bytes(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "archive"
    blobs = LocalBlobStore(root) if kind == "local" else ObjectBlobStore.local(root)
    archive = SubmissionArchive(blobs)
    spooled = tmp_path / "body.safetensors"
    payload = bytes(range(256)) * 40_000  # 10 MB: more than one copy piece and one obstore part
    spooled.write_bytes(payload)
    digest = archive.put(spooled)
    assert digest == archive.put(payload)  # the same key whichever way the bytes arrive
    assert archive.get(digest) == payload


def test_clearing_the_spool_keeps_only_the_window_being_fetched(tmp_path: Path) -> None:
    for window in (3, 4, 40):
        spool_path(tmp_path, object_key(window, "hk1")).write_bytes(b"x")
    spool_path(tmp_path, object_key(4, "hk2")).with_suffix(".safetensors.part").write_bytes(b"x")
    assert clear_spool(tmp_path, 4) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [spool_path(tmp_path, object_key(4, "hk1")).name]
    assert clear_spool(tmp_path / "absent", 4) == 0


def test_a_window_fetch_clears_the_windows_before(tmp_path: Path) -> None:
    config = _spooling(tmp_path)
    assert config.spool_dir is not None
    config.spool_dir.mkdir()
    old = spool_path(config.spool_dir, object_key(WINDOW - 1, "hk1"))
    old.write_bytes(b"x")
    location = parse_location(f"file://{tmp_path}/peer", LocationPolicy.local())
    asyncio.run(publish(location, object_key(WINDOW, "hk1"), b"payload", mtime=T0 + 1))
    peers = fetch_window(Fetcher(config), [PeerTarget(1, "hk1", location)], PutWindow(WINDOW, T0), 10.0)
    assert peers[0].fetch is not None and peers[0].fetch.path is not None
    assert not old.exists() and peers[0].fetch.path.read_bytes() == b"payload"
