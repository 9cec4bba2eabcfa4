"""The validator's small parts against the real things: Redis lock and events, the signed
selection, plugins, settings files, and weights that fail."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from scoring.earnings import ranked_by_uid
from scoring.ranking import PeerRating, RatingState, Status
from scoring.signing import dev_keypair
from scoring.weights import RankWeights
from storage.records import WeightSetRecord
from validator.chain.protocol import Neuron, WeightLimits, WeightOutcome
from validator.demo.sim.behaviours import BUILTIN
from validator.demo.sim.plugins import load_plugin, parse_peers
from validator.round.publishing import SelectionPublisher, selection_key, verify_selection
from validator.round.weighing import Weigher, WeightSchedule, registered
from validator.settings import Settings, to_toml
from validator.stores.commitments import StorageLocation
from validator.telemetry.events import EVENTS_CHANNEL, LeaderLock, RedisEvents, connect
from validator.telemetry.metrics import Metrics

REDIS = "redis://127.0.0.1:6379/0"
DEAD_REDIS = "redis://127.0.0.1:1/0"


def test_leader_lock_admits_one_holder_and_fails_closed_without_redis() -> None:
    hotkey = f"test-{uuid.uuid4().hex}"
    a, b = LeaderLock(connect(REDIS), hotkey, ttl_s=30), LeaderLock(connect(REDIS), hotkey, ttl_s=30)
    try:
        assert a.acquire() and a.acquire()  # re-entrant for its holder (extends the TTL)
        assert not b.acquire()
        a.release()
        assert b.acquire()
    finally:
        a.release()
        b.release()
    assert not LeaderLock(connect(DEAD_REDIS), hotkey).acquire()
    assert LeaderLock(None, hotkey).acquire()  # no Redis configured: one process by declaration


def test_events_reach_subscribers_and_a_dead_redis_is_harmless() -> None:
    client = connect(REDIS)
    assert client is not None
    sub = client.pubsub()
    sub.subscribe(EVENTS_CHANNEL)
    try:
        assert sub.get_message(timeout=2.0) is not None  # the subscribe confirmation
        RedisEvents(client).publish("window_committed", 42, selected=["a"])
        message = None
        deadline = time.monotonic() + 5
        while message is None and time.monotonic() < deadline:
            message = sub.get_message(timeout=1.0)
        assert message is not None
        body = json.loads(message["data"])
        assert body["type"] == "window_committed" and body["window"] == 42 and body["selected"] == ["a"]
    finally:
        sub.close()
    dead = connect(DEAD_REDIS)
    assert dead is not None
    RedisEvents(dead).publish("window_opened", 1)  # logged and dropped, never raised
    with pytest.raises(redis.RedisError):
        dead.ping()


def test_selection_is_published_signed_and_verifiable(tmp_path: Path) -> None:
    location = StorageLocation(scheme="file", path=str(tmp_path))
    key = dev_keypair("//validator-under-test")
    doc = {
        "format": "gauntlet/selection/1",
        "window": 9,
        "base": "ab",
        "next_base": "cd",
        "gather": [],
        "reserve": [],
    }
    assert SelectionPublisher(location, key).publish(doc)
    payload = (tmp_path / selection_key(9)).read_bytes()
    assert verify_selection(payload, key.ss58_address)
    assert not verify_selection(payload, dev_keypair("//someone-else").ss58_address)
    forged = json.loads(payload)
    forged["selection"]["window"] = 10
    assert not verify_selection(json.dumps(forged).encode(), key.ss58_address)
    assert not verify_selection(b"not json", key.ss58_address)
    assert not SelectionPublisher().publish(doc)  # nowhere configured: nothing published


def test_plugins_define_new_behaviours(tmp_path: Path) -> None:
    plugin = tmp_path / "sleepy.py"
    plugin.write_text(
        "class Sleepy:\n    name = 'sleepy'\n    order = 0\n\n"
        "    def submit(self, ctx):\n        return None\n\n"
        "BEHAVIOURS = [Sleepy()]\n"
    )
    known = dict(BUILTIN) | load_plugin(plugin)
    peers = parse_peers("honest:2,sleepy:1", known)
    assert [p.name for p in peers] == ["honest", "honest", "sleepy"]
    with pytest.raises(ValueError, match="unknown behaviour"):
        parse_peers("honest:1,teleporter:1", known)
    empty = tmp_path / "empty.py"
    empty.write_text("BEHAVIOURS = []\n")
    with pytest.raises(ValueError, match="BEHAVIOURS"):
        load_plugin(empty)


def test_settings_round_trip_through_toml_and_secret_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(k)
    original = Settings(netuid=7, blocks_per_window=10, cors_origins=["http://a.example"])
    path = tmp_path / "g.toml"
    path.write_text(to_toml(original))
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t-value\n")
    monkeypatch.setenv("GAUNTLET_CONFIG", str(path))
    monkeypatch.setenv("GAUNTLET_VALIDATOR_SECRET_FILE", str(secret))
    monkeypatch.setenv("GAUNTLET_BLOCKS_PER_WINDOW", "12")  # the environment wins over the file
    loaded = Settings()
    assert (
        loaded.netuid == 7 and loaded.cors_origins == ["http://a.example"] and loaded.blocks_per_window == 12
    )
    assert loaded.validator_secret.get_secret_value() == "s3cr3t-value"
    assert "s3cr3t" not in json.dumps(loaded.masked())


class _Chain:
    hotkey = "v"  # the validator's own

    def __init__(self, fail: int, holders: dict[int, str] | None = None, minimum: int = 0) -> None:
        self.fail, self.calls, self.minimum = fail, 0, minimum
        self.holders = {4: "h"} if holders is None else holders
        self.set: list[dict[int, float]] = []

    def weight_limits(self) -> WeightLimits:
        return WeightLimits(self.minimum)

    def neurons(self) -> list[Neuron]:
        if not self.holders:
            raise ConnectionError("metagraph unreachable")
        return [Neuron(uid, hotkey, 0.0, False) for uid, hotkey in sorted(self.holders.items())]

    def set_weights(self, weights: dict[int, float]) -> WeightOutcome:
        self.calls += 1
        if self.calls <= self.fail:
            raise ConnectionError("chain unreachable")
        self.set.append(weights)
        return WeightOutcome(True, "included", 100 + self.calls)


def test_weights_go_only_to_uids_still_held_by_the_rated_hotkey() -> None:
    """Between the window's metagraph read and the set, uid 4 was freed and taken (by a newcomer,
    or by the validator itself): its old holder's pay went to the new one (an audit found it)."""
    paid = {"a": PeerRating("a", 4, 30.0, 1.0, final=2.0, last_aggregated=3)}
    state = RatingState({**paid, "b": PeerRating("b", 5, 30.0, 1.0, final=1.0, last_aggregated=3)}, 3)
    for newcomer in ("newcomer", "the-validator"):
        chain = _Chain(fail=0, holders={4: newcomer, 5: "b"})
        weigher = Weigher(
            chain, RankWeights(), LeaderLock(None, "v"), [].append, WeightSchedule(3), Metrics()
        )  # type: ignore[arg-type]
        done = weigher.maybe_set(3, state)
        assert done is not None and done.outcome == "ok" and chain.set == [{5: 1.0}]
    unread = _Chain(fail=0, holders={})  # the metagraph cannot be read: nothing is paid blind
    schedule = WeightSchedule(3)
    weigher = Weigher(unread, RankWeights(), LeaderLock(None, "v"), [].append, schedule, Metrics())  # type: ignore[arg-type]
    failed = weigher.maybe_set(3, state)
    assert failed is not None and failed.outcome == "failed" and unread.calls == 0 and schedule.retry_pending


def test_a_uid_listed_twice_is_its_first_holders_as_the_fetch_scored_it() -> None:
    """An audit: the fetch kept a duplicated uid's first hotkey and scored it, the weigher kept the
    last one, so the peer scored was never paid (and a second hotkey could have been)."""
    neurons = [Neuron(5, "first", 1.0, False), Neuron(5, "second", 1.0, False), Neuron(6, "c", 1.0, False)]
    state = RatingState(
        {h: PeerRating(h, u, 30.0, 1.0) for h, u in (("first", 5), ("second", 5), ("c", 6))}, 3
    )
    assert set(registered(state, neurons).peers) == {"first", "c"}


def test_failed_weights_are_recorded_and_retried_next_window() -> None:
    chain, records = _Chain(fail=1), []
    lock, every_3 = LeaderLock(None, "v"), WeightSchedule(3)
    weigher = Weigher(chain, RankWeights(), lock, records.append, every_3, Metrics())  # type: ignore[arg-type]
    state = RatingState({"h": PeerRating("h", 4, 30.0, 1.0, bma=0.5, final=2.0, last_aggregated=3)}, 3)
    assert weigher.maybe_set(1, state) is None  # not due
    first = weigher.maybe_set(3, state)
    assert first is not None and first.outcome == "failed" and "unreachable" in (first.error or "")
    second = weigher.maybe_set(4, state)  # retried although window 4 is not a weight window
    assert second is not None and second.outcome == "ok" and list(second.uids) == [4]
    assert weigher.maybe_set(5, state) is None
    assert [r.outcome for r in records] == ["failed", "ok"] and all(
        isinstance(r, WeightSetRecord) for r in records
    )
    # window 6's set pays what windows 5-6 aggregated (the last successful set was at 4): nothing of it
    assert every_3.paid_since == 4 and every_3.paid_windows(6) == 2
    idle = weigher.maybe_set(6, state)
    assert idle is not None and idle.outcome == "skipped" and not idle.uids


def test_a_failed_or_missed_weight_set_leaves_no_aggregated_window_unpaid() -> None:
    schedule = WeightSchedule(3)
    assert schedule.paid_windows(3) == 4  # no set yet: every window so far (0-3)
    schedule.paid_since = 3
    assert schedule.paid_windows(6) == 3  # windows 4-6
    assert schedule.paid_windows(9) == 6  # the set at 6 never happened (a crash): windows 4-9
    state = RatingState({"h": PeerRating("h", 4, 30.0, 1.0, final=2.0, last_aggregated=4)}, 9)
    assert ranked_by_uid(state, 9, schedule.paid_windows(9)) == [(4, 2.0)]


def test_files_are_decoded_while_other_downloads_are_in_flight(tmp_path: Path) -> None:
    """`on_result` hands each finished download to the decoder thread before the last one ends."""
    import asyncio
    import threading

    from tests.codec_fixtures import SPEC, make_file
    from validator.round.check_config import CheckConfig
    from validator.round.checking import EagerDecoder, file_judge
    from validator.round.outcomes import PeerTarget, PeerWindow
    from validator.stores.objstore import FetchConfig, Fetcher, FetchRequest, object_key, publish

    location = StorageLocation(scheme="file", path=str(tmp_path / "store"))
    hotkeys = [f"peer{i}" for i in range(4)]
    for i, h in enumerate(hotkeys):
        asyncio.run(
            publish(location, object_key(7, h), make_file(i), mtime=1_700_001_000.0)
        )  # a time a clock reads
    threads: set[str] = set()
    inner = file_judge(window=7, base="ab" * 32, spec=SPEC, cfg=CheckConfig(), archive=lambda data: "d")

    def judge(hotkey: str, uid: int, data: bytes):  # type: ignore[no-untyped-def]
        threads.add(threading.current_thread().name)
        return inner(hotkey, uid, data)

    requests = [FetchRequest(h, location, object_key(7, h), put_start=1_700_000_999.0) for h in hotkeys]
    with EagerDecoder(judge, {h: 3 for h in hotkeys}) as eager:
        fetched = asyncio.run(Fetcher(FetchConfig()).fetch_all(requests, 10.0, on_result=eager))
        assert [r.status for r in fetched] == ["ok"] * 4
        assert len(eager.futures) == 4  # every file was handed over as its download completed
        peers = eager.outcomes(
            [PeerWindow(PeerTarget(3, r.hotkey, None), Status.OK, fetch=r) for r in fetched]
        )
    assert threads and all(t.startswith("gauntlet-decode") for t in threads)
    # the signature names another hotkey, so the decoder's verdict is a rejection with its reason
    assert {(p.status, p.reason) for p in peers} == {(Status.INVALID, "wrong_hotkey")}
    assert all(p.fetch is not None and p.fetch.data is None for p in peers)  # bytes dropped once judged


def test_a_plugin_may_use_dataclasses_with_postponed_annotations(tmp_path: Path) -> None:
    """dataclasses resolves string annotations through sys.modules: the plugin must be registered."""
    plugin = tmp_path / "frozen.py"
    plugin.write_text(
        "from __future__ import annotations\n\nfrom dataclasses import dataclass\n\n\n"
        "@dataclass(frozen=True)\nclass Frozen:\n    name: str = 'frozen'\n    order: int = 0\n\n"
        "    def submit(self, ctx: object) -> None:\n        return None\n\n\n"
        "BEHAVIOURS = [Frozen()]\n"
    )
    assert [p.name for p in parse_peers("frozen:2", load_plugin(plugin))] == ["frozen", "frozen"]
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('plugin failed')\n")
    with pytest.raises(RuntimeError, match="plugin failed"):
        load_plugin(broken)
    assert "gauntlet_plugin_broken" not in sys.modules  # a failed plugin leaves nothing behind


def test_bucket_credentials_come_from_the_environment_or_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from validator.wiring import bucket

    for k in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(k)
    secret = tmp_path / "archive-secret"
    secret.write_text("w-secret-123\n")
    monkeypatch.setenv("GAUNTLET_ARCHIVE_ACCESS_KEY_ID", "AKID1")
    monkeypatch.setenv("GAUNTLET_ARCHIVE_SECRET_ACCESS_KEY_FILE", str(secret))
    s = Settings(archive_url="https://r2.example.com/archive", redis_url=None)
    assert s.archive_url is not None
    loc = bucket(s.archive_url, s.archive_access_key_id, s.archive_secret_access_key)
    assert (loc.access_key_id, loc.secret_access_key) == ("AKID1", "w-secret-123")
    assert "w-secret" not in repr(s) + json.dumps(s.masked()) + to_toml(s) + repr(loc)
    with pytest.raises(ValueError, match="go together"):
        Settings(selection_access_key_id="AKID2", redis_url=None)


class _Lead:
    """A leader lock whose answers are scripted: who holds the lead at each window."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers

    def acquire(self) -> bool:
        return self.answers.pop(0)


def test_a_new_leader_pays_from_what_the_last_leader_set(tmp_path: Path) -> None:
    """A follower read `paid_since` at its start; when it took the lead it paid again everything
    aggregated since then. It reads it again from storage when the lead changes (an audit found it);
    a follower's `skipped` row written after the leader's failed one no longer hides the retry."""
    from storage.archive import LocalBlobStore, SubmissionArchive
    from storage.db import make_engine
    from storage.migrate import upgrade
    from validator.state.ledger import Ledger

    url = f"sqlite:///{tmp_path / 'g.db'}"
    upgrade(url)
    blobs = LocalBlobStore(tmp_path / "blobs")
    ledger = Ledger(make_engine(url), blobs, SubmissionArchive(blobs), checkpoint_every=3)
    ledger.record_weights(WeightSetRecord(3, 100, [1], [1.0], "ok", None))  # by the other leader
    state = RatingState(
        {
            "p": PeerRating("p", 1, 30.0, 1.0, final=2.0, last_aggregated=2),  # paid at window 3 already
            "q": PeerRating("q", 2, 30.0, 1.0, final=1.0, last_aggregated=11),
        },
        12,
    )
    stored = lambda: (ledger.last_weights_set(), ledger.last_weights_failed())  # noqa: E731
    schedule = WeightSchedule(3, paid_since=None, stored=stored)  # as read at this process's start
    chain = _Chain(fail=0, holders={1: "p", 2: "q"})
    weigher = Weigher(chain, RankWeights(), _Lead([False, True]), [].append, schedule, Metrics())  # type: ignore[arg-type]
    assert weigher.maybe_set(9, state) is not None  # a follower: skipped
    done = weigher.maybe_set(12, state)
    assert done is not None and done.outcome == "ok" and chain.set == [{2: 1.0}]  # not p again
    ledger.record_weights(WeightSetRecord(15, None, [2], [1.0], "failed", "refused"))
    ledger.record_weights(WeightSetRecord(15, None, [2], [1.0], "skipped", "not the leader"))
    assert ledger.last_weights_failed()
