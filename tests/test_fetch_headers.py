"""A peer's store answers HEAD with headers of its choosing: every unusable one ends the fetch as
`fetch_failed`, never as an exception that escapes the fetch (and so never as an internal error,
nor as a value that would fail the window's commit: an ETag is recorded in a String(256) column and
sent back as If-Match, which must be ASCII)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest

from scoring.ranking import Status
from scoring.types import Reason
from tests.fake_s3 import FakeObject, FakeS3, serving
from validator.stores import peer_fetch
from validator.stores.commitments import StorageLocation
from validator.stores.objstore import FetchConfig, Fetcher, FetchRequest, object_key
from validator.stores.peer_http import ObjectHead, PeerHttp, StoreError, _parse_head

T0 = time.time() - 10
LOOPBACK_OK = FetchConfig(allow_private_hosts=True, retries=0, head_timeout_s=2.0)


def fetched(obj: FakeObject) -> tuple[str, str | None, str | None]:
    with serving(FakeS3()) as store:
        store.put(f"/bucket/{object_key(5, 'peer')}", obj)
        location = StorageLocation(scheme="http", host="127.0.0.1", port=store.port, bucket="bucket")
        result = asyncio.run(
            Fetcher(LOOPBACK_OK).fetch(FetchRequest("peer", location, object_key(5, "peer"), T0))
        )
    return result.status, result.reason, result.etag if result.status == Status.OK else None


def test_ordinary_headers_fetch_the_object() -> None:
    assert fetched(FakeObject(b"bytes", T0 + 1, etag='"abc-1"')) == (Status.OK, None, '"abc-1"')


@pytest.mark.parametrize(
    "etag",
    [
        '"' + "e" * 300 + '"',  # longer than the column that records it
        '"\u00c3\u00a9"',  # UTF-8 bytes of é on the wire: not ASCII, so no If-Match could carry it
        '"a\x7fb"',  # a control character
    ],
    ids=["long", "non-ascii", "control"],
)
def test_an_unusable_etag_is_fetch_failed(etag: str) -> None:
    assert fetched(FakeObject(b"bytes", T0 + 1, etag=etag))[:2] == (Status.MISSING, Reason.FETCH_FAILED)


@pytest.mark.parametrize(
    "stamp",
    ["Mon, 01 Jan 99999999999999999999 00:00:00 GMT", "Mon, 41 Foo 2026 99:99:99 GMT", "yesterday"],
    ids=["year-overflow", "nonsense-fields", "words"],
)
def test_an_unusable_last_modified_is_fetch_failed(stamp: str) -> None:
    obj = FakeObject(b"bytes", T0 + 1, last_modified_header=stamp)
    assert fetched(obj)[:2] == (Status.MISSING, Reason.FETCH_FAILED)


@pytest.mark.parametrize(
    "length", [str(1 << 63), "9" * 40, "-1", "12 bytes"], ids=["2^63", "huge", "negative", "words"]
)
def test_an_unusable_content_length_is_fetch_failed(length: str) -> None:
    """Not `too_large` with the size as sent: the record keeps the size in a BigInteger, which a
    size of 2^63 or more would overflow, failing the window's commit."""
    obj = FakeObject(b"bytes", T0 + 1, content_length_header=length)
    assert fetched(obj)[:2] == (Status.MISSING, Reason.FETCH_FAILED)


def test_a_large_but_storable_content_length_is_too_large() -> None:
    obj = FakeObject(b"bytes", T0 + 1, content_length_header=str((1 << 63) - 1))
    assert fetched(obj)[:2] == (Status.INVALID, Reason.TOO_LARGE)


# h11 itself refuses some of the headers above before they reach the validator's own parsing: the
# same checks on the parsed response directly
@pytest.mark.parametrize(
    "headers",
    [
        {"content-length": str(1 << 63)},
        {"content-length": "-5"},
        {"content-length": "5", "last-modified": "Mon, 01 Jan 99999999999999999999 00:00:00 GMT"},
        {"content-length": "5", "etag": "e" * 257},
        {"content-length": "5", "etag": "caf\u00e9".encode()},
        {"content-length": "5", "etag": "a\tb"},
        {},
    ],
    ids=["2^63", "negative", "year-overflow", "long-etag", "non-ascii-etag", "tab-etag", "no-length"],
)
def test_parse_head_refuses_unusable_headers(headers: dict[str, str | bytes]) -> None:
    with pytest.raises(StoreError) as info:
        _parse_head(httpx.Response(200, headers=headers))
    assert info.value.reason == Reason.FETCH_FAILED


def test_an_unusable_version_id_is_dropped_not_held_against_the_peer() -> None:
    """It is only informative (never sent back, never recorded): an AWS version id may be 1024 bytes."""
    head = _parse_head(
        httpx.Response(200, headers={"content-length": "5", "etag": '"e"', "x-amz-version-id": "v" * 1024})
    )
    assert (head.size, head.etag, head.version) == (5, '"e"', None)
    head = _parse_head(
        httpx.Response(200, headers={"content-length": "5", "x-amz-version-id": "3HL4kqtJlcpXroDTDmJ"})
    )
    assert head.version == "3HL4kqtJlcpXroDTDmJ"


def test_an_empty_etag_is_no_etag_not_a_failure() -> None:
    head = _parse_head(httpx.Response(200, headers={"content-length": "5", "etag": ""}))
    assert (head.size, head.etag) == (5, "")  # get() sends no If-Match for it


def _head_of(location: StorageLocation) -> ObjectHead:
    """The HEAD every fetch and poll goes through, for either kind of store."""
    fetcher = Fetcher(LOOPBACK_OK)

    async def head() -> ObjectHead:
        async with PeerHttp(fetcher.limits()) as http:
            request = FetchRequest("peer", location, object_key(5, "peer"), T0)
            return await peer_fetch._head(http, fetcher._store(location), request)

    return asyncio.run(head())


@pytest.mark.parametrize(
    "stamp",
    ["Fri, 31 Dec 9999 23:59:59 GMT", "Thu, 01 Jan 1970 00:00:00 GMT", "Mon, 01 Jan 0100 00:00:00 GMT"],
)
def test_a_last_modified_no_clock_reads_is_no_date(stamp: str) -> None:
    """Unknown from the HEAD on, as it is stored: the live round and replay order unsighted copies
    by it, and a value the record could not keep would have made replay differ."""
    with serving(FakeS3()) as store:
        location = StorageLocation(scheme="http", host="127.0.0.1", port=store.port, bucket="bucket")
        store.put(
            f"/bucket/{object_key(5, 'peer')}", FakeObject(b"bytes", T0 + 1, last_modified_header=stamp)
        )
        head = _head_of(location)
        assert head.last_modified is None
        real_stamp = "Sat, 05 Dec 2026 07:00:00 GMT"
        store.put(
            f"/bucket/{object_key(5, 'peer')}", FakeObject(b"bytes", T0 + 1, last_modified_header=real_stamp)
        )
        real = _head_of(location)
    assert real.last_modified == 1796454000.0


def test_a_folder_stores_mtime_no_clock_reads_is_no_date(tmp_path: Path) -> None:
    """A peer of a local subnet writes its own folder, and may set its file's mtime to year 9999."""
    key = tmp_path / object_key(5, "peer")
    key.parent.mkdir(parents=True)
    key.write_bytes(b"bytes")
    os.utime(key, (253402300799, 253402300799))  # 9999-12-31T23:59:59Z
    head = _head_of(StorageLocation(scheme="file", path=str(tmp_path)))
    assert head.size == 5 and head.last_modified is None
