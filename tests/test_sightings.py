"""Upload times come from the validator's own observations, not from a clock the peer controls."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator

import pytest
from pydantic import SecretStr, ValidationError

from scoring.ranking import Status
from tests.fake_s3 import FakeObject, FakeS3, serving
from validator.round.fetching import PutWindow, fetch_requests, fetch_window
from validator.round.outcomes import PeerTarget
from validator.settings import Settings
from validator.stores.commitments import LocationPolicy, StorageLocation
from validator.stores.objstore import FetchConfig, Fetcher, classify, object_key
from validator.stores.sightings import Sighting, Sightings
from validator.wiring import fetch_config

CONFIG = FetchConfig(put_window_s=70.0, grace_s=5.0)
T0 = 1_700_000_000.0


def test_a_sighting_is_bounded_by_the_previous_answered_poll() -> None:
    seen = Sightings()
    seen.record("p", "e1", sent=100.0, answered=100.5)  # the first poll: no earlier bound
    seen.record("q", None, sent=100.0, answered=100.2)  # q: nothing there yet
    seen.record("q", "e1", sent=102.0, answered=102.3)
    seen.record("q", "e1", sent=104.0, answered=104.1)  # seen again: the first sighting stands
    seen.record("q", "e2", sent=106.0, answered=106.4)  # replaced: a new version, a new sighting
    assert seen.lookup("p", "e1") == Sighting(100.5, math.inf)
    assert seen.lookup("q", "e1") == Sighting(102.3, 102.3 - 100.0)  # put in (100.0, 102.3]
    assert seen.lookup("q", "e2") == Sighting(106.4, 106.4 - 104.0)
    assert (seen.lookup("q", "e3"), seen.lookup("r", "e1"), seen.answered_until("q")) == (None, None, 106.0)


def test_classify_allows_for_the_resolution_of_a_sighting() -> None:
    assert classify(T0 - 0.1, T0, CONFIG, resolution_s=5.0) == Status.EARLY  # seen before T0
    assert classify(T0 + 78.0, T0, CONFIG, resolution_s=4.0) == Status.OK  # maybe put at T0+74
    assert classify(T0 + 78.0, T0, CONFIG, resolution_s=2.0) == Status.LATE  # surely after T0+75
    assert classify(T0 + 900.0, T0, CONFIG, resolution_s=math.inf) == Status.OK  # unbounded


@pytest.fixture
def store() -> Iterator[FakeS3]:
    with serving(FakeS3()) as s:
        yield s


def test_polls_decide_timing_whatever_last_modified_says(store: FakeS3) -> None:
    """Every store below claims the same Last-Modified, inside the put window. The polls saw the
    victim before the thief that copied it, and saw two uploads only after the window closed."""
    base = math.ceil(time.time()) + 1.0  # whole seconds: Last-Modified has a one-second resolution
    window, peers = 40, {"victim": 0.2, "thief": 0.9, "latecomer": 1.8, "forger": 3.0}
    for hotkey, appears in peers.items():
        obj = FakeObject(
            hotkey.encode() * 10, visible_at=base + appears, last_modified=base, etag=f'"{hotkey}"'
        )
        store.put(f"/bucket/{object_key(window, hotkey)}", obj)
    location = StorageLocation(scheme="http", host="127.0.0.1", port=store.port, bucket="bucket")
    targets = [PeerTarget(i, h, location) for i, h in enumerate(peers)]
    config = FetchConfig(
        put_window_s=1.0, grace_s=0.2, poll_interval_s=0.1, poll_lead_s=1.5, window_s=30.0,
        allow_private_hosts=True,
    )  # fmt: skip
    fetcher = Fetcher(config)
    fetcher.watch(window, fetch_requests(targets, window, base), base)
    time.sleep(max(0.0, base + 3.2 - time.time()))  # polls end at base + 2.7, before the forger
    got = {p.hotkey: p for p in fetch_window(fetcher, targets, PutWindow(window, base), deadline_s=5.0)}
    # the round failed after its fetch and fetches again: the same sightings decide, not Last-Modified
    again = fetch_window(fetcher, targets, PutWindow(window, base), deadline_s=5.0)
    assert {p.hotkey: p.status for p in again} == {h: p.status for h, p in got.items()}
    assert fetcher.observed(window + 1) is not None  # this fetch started watching the next window
    assert {h: p.status for h, p in got.items()} == {
        "victim": "ok", "thief": "ok", "latecomer": "late", "forger": "late",
    }  # fmt: skip
    victim, thief = got["victim"].fetch, got["thief"].fetch
    assert victim is not None and thief is not None
    assert victim.last_modified == thief.last_modified == base  # the stores' clocks cannot tell them apart
    assert victim.first_seen is not None and thief.first_seen is not None
    assert thief.seen_resolution_s is not None and thief.seen_resolution_s < 0.6
    assert base + 0.2 <= victim.first_seen < thief.first_seen - thief.seen_resolution_s  # a clear order


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)
    return monkeypatch


def test_a_real_subnet_refuses_to_trust_any_storage_host(clean_env: pytest.MonkeyPatch) -> None:
    real = {"chain": "subtensor", "validator_secret": SecretStr("s" * 40)}
    with pytest.raises(ValidationError, match="storage_host_suffixes"):
        Settings(**real)  # type: ignore[arg-type]
    assert Settings(**real, allow_any_storage_host=True).allow_any_storage_host  # type: ignore[arg-type]
    assert Settings(**real, storage_host_suffixes=[".r2.cloudflarestorage.com"])  # type: ignore[arg-type]
    assert Settings(chain="local").storage_host_suffixes == []  # the demo and local subnets


def test_polls_run_only_beside_a_real_chain(clean_env: pytest.MonkeyPatch) -> None:
    local = fetch_config(Settings(chain="local"), 1000, LocationPolicy.local())
    assert (local.poll_interval_s, local.allow_private_hosts) == (0.0, True)
    real = Settings(chain="subtensor", validator_secret=SecretStr("s" * 40), allow_any_storage_host=True)
    remote = fetch_config(real, 1000, LocationPolicy())
    assert (remote.poll_interval_s, remote.allow_private_hosts, remote.window_s) == (2.0, False, 115 * 12.0)
    assert remote.peer_budget_s == 30.0 and local.peer_budget_s < Settings(chain="local").fetch_deadline_s
