"""Polls to one host are capped when peers run their own stores (validator/stores/poll_throttle.py).

With `allow_any_storage_host` a crowd of identities naming one host (a victim's, not a store) made
every validator HEAD it once per identity every poll interval."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.fake_s3 import FakeObject, FakeS3, serving
from validator.round.fetching import fetch_requests
from validator.round.outcomes import PeerTarget
from validator.settings import Settings
from validator.stores.commitments import LocationPolicy, StorageLocation
from validator.stores.objstore import FetchConfig, Fetcher, object_key
from validator.stores.poll_throttle import HostThrottle
from validator.wiring import fetch_config

WINDOW = 5


@pytest.fixture
def store() -> Iterator[FakeS3]:
    with serving(FakeS3()) as s:
        yield s


def _polls(store: FakeS3, *, trusted: bool, rate: float) -> int:
    """HEADs a crowd of 30 identities on one host draws over about one second of polls."""
    location = StorageLocation(scheme="http", host="127.0.0.1", port=store.port, bucket="bucket")
    targets = [PeerTarget(i, f"crowd{i:02d}", location) for i in range(30)]
    for t in targets:
        store.put(f"/bucket/{object_key(WINDOW, t.hotkey)}", FakeObject(b"x", time.time()))
    config = FetchConfig(
        put_window_s=0.5, grace_s=0.0, poll_interval_s=0.1, poll_lead_s=0.25, window_s=30.0,
        allow_private_hosts=True, stores_trusted=trusted, poll_host_rate=rate,
    )  # fmt: skip
    put_start = time.time() + 0.25  # polls from now until about one second from now
    store.log.clear()
    fetcher = Fetcher(config)
    fetcher.watch(WINDOW, fetch_requests(targets, WINDOW, put_start), put_start)
    time.sleep(1.2)
    fetcher.observed(WINDOW)
    return len(store.requests("HEAD"))


def test_a_crowd_on_one_host_draws_at_most_the_hosts_rate(store: FakeS3) -> None:
    capped = _polls(store, trusted=False, rate=10.0)
    assert 3 <= capped <= 12  # one second at 10 a second, spaced whatever the machine's speed
    uncapped = _polls(store, trusted=True, rate=10.0)  # stores a provider the operator trusts runs
    assert uncapped >= 3 * capped, (uncapped, capped)


def test_the_throttle_spaces_one_hosts_turns_and_leaves_others_alone() -> None:
    now, slept = [0.0], []

    async def sleep(seconds: float) -> None:  # its own: a global patch saw other tests' pollers
        slept.append(seconds)

    throttle = HostThrottle(4.0, clock=lambda: now[0], sleep=sleep)

    async def run() -> None:
        for host in ("a", "a", "b", "a"):
            await throttle.wait(host)
        now[0] = 10.0  # a quiet host has no backlog
        await throttle.wait("a")

    asyncio.run(run())
    assert slept == [0.25, 0.5]  # a's second and third turns; b's and the late one's at once
    with pytest.raises(ValueError):
        HostThrottle(0)


def test_the_rate_follows_the_setting() -> None:
    settings = Settings(poll_host_rate=5.0)
    assert fetch_config(settings, 1 << 20, LocationPolicy()).poll_host_rate == 5.0
