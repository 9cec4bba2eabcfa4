"""A store a peer runs itself sets its own ETag and Last-Modified: the validator's sightings count
for the bytes it reads only when those bytes are the version sighted (validator/stores/peer_fetch.py
`bound_timing`), and the store's clock never decides on its own."""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Iterator

import pytest

from tests.fake_s3 import FakeObject, FakeS3, serving
from validator.round.fetching import PutWindow, fetch_requests, fetch_window
from validator.round.outcomes import PeerTarget, PeerWindow
from validator.stores.commitments import StorageLocation
from validator.stores.objstore import FetchConfig, Fetcher, object_key

WINDOW = 12
VICTIM = b"the victim's honest update " * 40


def md5_etag(data: bytes) -> str:
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


@pytest.fixture
def store() -> Iterator[FakeS3]:
    with serving(FakeS3()) as s:
        yield s


def _fetch(store: FakeS3, trusted: bool, swap_etag: str) -> dict[str, PeerWindow]:
    """The victim uploads at T0 + 0.4 (an S3 ETag: its MD5). Each copier shows a placeholder at
    T0 + 0.1, then, once the victim's bytes exist, serves them under the placeholder's ETag (this
    store ignores If-Match, as a peer's own server may)."""
    base = math.ceil(time.time()) + 1.0

    def key(hotkey: str) -> str:
        return f"/bucket/{object_key(WINDOW, hotkey)}"

    store.put(key("victim"), FakeObject(VICTIM, visible_at=base + 0.4, etag=md5_etag(VICTIM)))
    store.put(key("copier"), FakeObject(b"placeholder", visible_at=base + 0.1, etag=swap_etag))

    def swap() -> None:
        store.put(key("copier"), FakeObject(VICTIM, visible_at=0.0, last_modified=base, etag=swap_etag))

    timer = threading.Timer(max(0.0, base + 0.7 - time.time()), swap)
    timer.start()
    location = StorageLocation(scheme="http", host="127.0.0.1", port=store.port, bucket="bucket")
    targets = [PeerTarget(i, h, location) for i, h in enumerate(("victim", "copier"))]
    config = FetchConfig(
        put_window_s=1.0, grace_s=0.2, poll_interval_s=0.1, poll_lead_s=1.5, window_s=30.0,
        allow_private_hosts=True, stores_trusted=trusted,
    )  # fmt: skip
    fetcher = Fetcher(config)
    fetcher.watch(WINDOW, fetch_requests(targets, WINDOW, base), base)
    time.sleep(max(0.0, base + 1.4 - time.time()))
    try:
        return {p.hotkey: p for p in fetch_window(fetcher, targets, PutWindow(WINDOW, base), deadline_s=5.0)}
    finally:
        timer.cancel()


@pytest.mark.parametrize("etag", ['"c1"', ""], ids=["same-etag", "no-etag"])
def test_a_placeholder_sighted_early_does_not_date_bytes_served_later(store: FakeS3, etag: str) -> None:
    got = _fetch(store, trusted=False, swap_etag=etag)
    victim, copier = got["victim"], got["copier"]
    assert victim.status == "ok" and victim.fetch is not None and victim.fetch.first_seen is not None
    assert copier.status != "ok" and copier.fetch is not None and copier.fetch.first_seen is None
    assert copier.reason in ("fetch_failed", "late"), copier.reason


def test_a_trusted_providers_etag_binds_its_sightings(store: FakeS3) -> None:
    """A provider the operator trusts computes its ETags (and honours If-Match): the sighting stands,
    so both peers are judged on the polls' evidence, the victim first."""
    got = _fetch(store, trusted=True, swap_etag=md5_etag(VICTIM))
    victim, copier = got["victim"].fetch, got["copier"].fetch
    assert victim is not None and copier is not None and victim.first_seen is not None
    assert got["victim"].status == "ok"


def test_a_peers_own_clock_alone_is_no_upload_time(store: FakeS3) -> None:
    """No polls ran (a restart lost them, or the store refused them): a trusted provider's
    Last-Modified dates the upload, a store the peer may run itself does not."""
    base = math.floor(time.time()) - 2.0  # whole seconds: Last-Modified has a one-second resolution
    store.put(f"/bucket/{object_key(WINDOW, 'p')}", FakeObject(VICTIM, last_modified=base + 1.0))
    location = StorageLocation(scheme="http", host="127.0.0.1", port=store.port, bucket="bucket")
    targets = [PeerTarget(0, "p", location)]
    for trusted, status, reason in ((True, "ok", None), (False, "missing", "fetch_failed")):
        config = FetchConfig(put_window_s=60.0, allow_private_hosts=True, stores_trusted=trusted)
        (peer,) = fetch_window(Fetcher(config), targets, PutWindow(WINDOW, base), deadline_s=5.0)
        assert (peer.status, peer.reason) == (status, reason), trusted
