"""Upload times come from the validator's own observations, not from a clock the peer controls."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from scoring.ranking import Status
from tests.fake_s3 import FakeObject, FakeS3, serving
from validator.round.fetching import PutWindow, fetch_requests, fetch_window
from validator.round.outcomes import PeerTarget
from validator.settings import Settings
from validator.stores import sightings_file
from validator.stores.commitments import LocationPolicy, StorageLocation
from validator.stores.objstore import FetchConfig, Fetcher, classify, object_key
from validator.stores.sightings import Sighting, Sightings
from validator.stores.sightings_file import SightingsFolder
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


def test_polls_decide_timing_whatever_last_modified_says(store: FakeS3, tmp_path: Path) -> None:
    """Every store below claims the same Last-Modified, inside the put window. The polls saw the
    victim before the thief that copied it, and saw two uploads only after the window closed. A
    process restarted before the fetch judges by the same sightings, read back from disk."""
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
        allow_private_hosts=True, sightings_dir=tmp_path / "sightings",
    )  # fmt: skip
    fetcher = Fetcher(config)
    fetcher.watch(window, fetch_requests(targets, window, base), base)
    time.sleep(max(0.0, base + 0.5 - time.time()))
    fetcher.watch(window, fetch_requests(targets, window, base), base)  # watched again: polls continue
    time.sleep(max(0.0, base + 3.2 - time.time()))  # polls end at base + 2.7, before the forger
    (tmp_path / "sightings" / f"{window - 1}.json").write_text("{}")  # an older window's: pruned
    restarted = fetch_window(Fetcher(config), targets, PutWindow(window, base), deadline_s=5.0)
    assert not (tmp_path / "sightings" / f"{window - 1}.json").exists()
    got = {p.hotkey: p for p in fetch_window(fetcher, targets, PutWindow(window, base), deadline_s=5.0)}
    assert [(p.status, p.fetch and p.fetch.first_seen) for p in restarted] == [
        (p.status, p.fetch and p.fetch.first_seen) for p in got.values()
    ]
    resumed = Fetcher(config)  # restarted within the put window, it would poll on from the file
    resumed.watch(window, fetch_requests(targets, window, base), base)
    victim_fetch = got["victim"].fetch
    assert victim_fetch is not None
    victim_seen = (resumed.observed(window) or Sightings()).lookup("victim", victim_fetch.etag)
    assert victim_seen is not None and victim_seen.first_seen == victim_fetch.first_seen
    # without the saved sightings a restarted process has only the peers' Last-Modified to go by
    blind = fetch_window(Fetcher(replace(config, sightings_dir=None)), targets, PutWindow(window, base), 5.0)
    assert {p.hotkey: p.status for p in blind}["latecomer"] == "ok"
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
    # the second watch resumed the first one's polls (a fresh poller's first sighting of the victim,
    # already there, would be unbounded)
    assert victim.seen_resolution_s is not None and victim.seen_resolution_s < 1.0


def test_saved_sightings_come_back_as_they_were_and_polls_continue_from_them(tmp_path: Path) -> None:
    seen = Sightings()
    seen.record("p", "e1", sent=100.0, answered=100.5)  # unbounded: no poll before it
    seen.record("q", None, sent=100.0, answered=100.2)
    seen.record("q", "e1", sent=102.0, answered=102.3)
    folder = SightingsFolder(tmp_path)
    folder.save(7, seen)
    back = folder.load(7)
    assert back is not None and back.snapshot() == seen.snapshot()
    assert back.lookup("p", "e1") == Sighting(100.5, math.inf)
    # a restarted process polls on: a version seen before keeps its first sighting, a new one is
    # bounded by the last answered poll before the restart
    back.record("q", "e1", sent=300.0, answered=300.1)
    back.record("p", "e2", sent=300.0, answered=300.2)
    assert back.lookup("q", "e1") == Sighting(102.3, 102.3 - 100.0)
    assert back.lookup("p", "e2") == Sighting(300.2, 300.2 - 100.0)
    assert folder.load(8) is None  # never polled


@pytest.mark.parametrize(
    "body",
    [
        "",
        '{"format": "gauntlet-sightings/1", "window": 7, "first": [["p", "e1", 100.0',  # torn by a crash
        '{"format": "gauntlet-sightings/1", "window": 6, "first": [], "answered": {}}',  # another window's
        '{"format": "other", "window": 7, "first": [], "answered": {}}',
        '{"format": "gauntlet-sightings/1", "window": 7, "first": [["p", "e1", NaN, 1.0]], "answered": {}}',
        '{"format": "gauntlet-sightings/1", "window": 7, "first": [["p", "e1", true, 1.0]], "answered": {}}',
        '{"format": "gauntlet-sightings/1", "window": 7, "first": [["p", 5, 100.0, 1.0]], "answered": {}}',
        '{"format": "gauntlet-sightings/1", "window": 7, "first": [["p"]], "answered": {}}',
        '{"format": "gauntlet-sightings/1", "window": 7, "first": [], "answered": []}',
        '{"format": "gauntlet-sightings/1", "window": 7, "first": {}, "answered": {"p": 1e999}}',
        '{"format": "gauntlet-sightings/1", "window": 7, "first": {"abcd": 1}, "answered": {}}',
        '{"format": "gauntlet-sightings/1", "window": 7, "first": [["p", "e", 1.0, 1.0, 5]], "answered": {}}',
        "[1, 2, 3]",
        "\udcff",
    ],
)
def test_an_unusable_sightings_file_counts_as_no_polls(tmp_path: Path, body: str) -> None:
    (tmp_path / "7.json").write_text(body, errors="surrogateescape")
    assert SightingsFolder(tmp_path).load(7) is None


def test_a_sightings_file_too_large_is_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sightings_file, "MAX_BYTES", 100)
    folder = SightingsFolder(tmp_path)
    seen = Sightings()
    for i in range(10):
        seen.record(f"peer{i}", "etag", sent=100.0, answered=100.5)
    folder.save(7, seen)
    assert folder.load(7) is None


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
