"""The leader lease in the database (validator/state/leader_lease.py): without Redis, two
validators on one database both set weights for the same hotkey."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from types import SimpleNamespace

from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from storage.db import DatabaseConfig, make_engine
from storage.models import LeaderLease
from tests.storage_fixtures import PG_URL, create_pg_database, drop_pg_database
from validator.round.lock_keeper import LockKeeper
from validator.settings import Settings
from validator.state.leader_lease import LeaseLock
from validator.telemetry.events import LeaderLock, connect
from validator.telemetry.holder import HOLDER_FILE, Holder, holder_id
from validator.wiring import leader_lock, open_ledger

REDIS = "redis://127.0.0.1:6379/0"


def test_one_holder_at_a_time_until_its_lease_expires(engine: Engine) -> None:
    now = [1000.0]
    a, b = (
        LeaseLock(engine, "hk", ttl_s=60, holder=Holder(t), clock=lambda: now[0])
        for t in ("host-a", "host-b")
    )
    assert a.acquire() and a.acquire()  # renewed by its holder
    assert not b.acquire()
    now[0] += 59
    assert a.acquire()  # renewed at 1059: held to 1119
    now[0] += 59
    assert not b.acquire()
    now[0] += 2  # a stopped renewing (a crashed host): b takes over once it has expired
    assert b.acquire() and not a.acquire()
    b.release()
    assert a.acquire()
    assert LeaseLock(
        engine, "other hotkey", ttl_s=60, holder=Holder("host-b"), clock=lambda: now[0]
    ).acquire()


def test_a_restarted_holder_takes_its_own_lease_over_once_it_goes_unrenewed(engine: Engine) -> None:
    """A process restarted after a crash takes over its own lease once it has gone unrenewed for
    half the TTL (a live holder renews every third), not the whole TTL; a holder from before
    incarnations (its bare id) counts as its own too."""
    now = [1000.0]
    first = LeaseLock(engine, "hk", ttl_s=600, holder=Holder("host-a", "p1"), clock=lambda: now[0])
    assert first.acquire()
    rebuilt = LeaseLock(engine, "hk", ttl_s=600, holder=Holder("host-a", "p1"), clock=lambda: now[0])
    assert rebuilt.acquire()  # a round rebuilt in the same process renews its own lock at once
    restarted = LeaseLock(engine, "hk", ttl_s=600, holder=Holder("host-a", "p2"), clock=lambda: now[0])
    assert restarted.token != first.token
    now[0] += 299
    assert not restarted.acquire()  # renewed 299 s ago: its holder may be alive
    assert not LeaseLock(engine, "hk", ttl_s=600, holder=Holder("host-b"), clock=lambda: now[0]).acquire()
    now[0] += 2
    assert restarted.acquire() and not first.acquire()
    with Session(engine) as s, s.begin():
        s.execute(update(LeaderLease).values(holder="host-b", expires_at=now[0] + 200))
    assert not restarted.acquire()  # another id, unexpired
    with Session(engine) as s, s.begin():
        s.execute(update(LeaderLease).values(holder="host-a", expires_at=now[0] + 200))
    assert restarted.acquire()  # its bare id, written before incarnations: its own, gone stale


def test_a_copy_of_the_work_folder_never_leads_beside_its_original(engine: Engine) -> None:
    """A host started from a copy of another's work folder (a cloned disk) held the same leader id
    and led beside it, each renewing the lease as its holder. A live original keeps it, window
    after window; the copy takes over within half the TTL once the original stops."""
    now, window = [1000.0], 100.0
    original, copy = (
        LeaseLock(engine, "hk", ttl_s=3 * window, holder=Holder("id", p), clock=lambda: now[0]) for p in "ab"
    )
    leaders = []
    for step in range(30):
        now[0] += window / 4  # the two call at different moments of the window
        if step < 20 and step % 4 == 0:
            assert original.acquire()
        if step % 4 == 2:
            leaders.append(copy.acquire())
    assert leaders[:5] == [False] * 5 and leaders[-1]  # the original stopped at step 16


def test_ids_are_matched_literally(engine: Engine) -> None:
    """A holder id is compared as text, not as a pattern: `%` and `_` are no wildcards."""
    now = [1000.0]
    held = LeaseLock(engine, "hk", ttl_s=600, holder=Holder("ab.c"), clock=lambda: now[0])
    assert held.acquire()
    now[0] += 400
    for other in ("a_", "a%", "a"):
        assert not LeaseLock(engine, "hk", ttl_s=600, holder=Holder(other), clock=lambda: now[0]).acquire()


def test_the_redis_lock_tells_incarnations_apart_the_same_way() -> None:
    client = connect(REDIS)
    assert client is not None
    hotkey = f"hk-{uuid.uuid4().hex}"
    try:
        first, restarted = (LeaderLock(client, hotkey, ttl_s=60, holder=Holder("host-a", p)) for p in "ab")
        assert first.acquire() and first.acquire()
        assert LeaderLock(client, hotkey, ttl_s=60, holder=Holder("host-a", "a")).acquire()  # rebuilt
        assert not restarted.acquire()  # renewed just now
        assert not LeaderLock(client, hotkey, ttl_s=60, holder=Holder("host-a_")).acquire()
        client.expire(f"gauntlet:leader:{hotkey}", 29)  # unrenewed for 31 s of 60
        assert not LeaderLock(client, hotkey, ttl_s=60, holder=Holder("host-b")).acquire()
        assert restarted.acquire() and not first.acquire()
        restarted.release()
        assert LeaderLock(client, hotkey, ttl_s=60, holder=Holder("host-b")).acquire()
    finally:
        client.delete(f"gauntlet:leader:{hotkey}")


def test_a_database_it_cannot_reach_makes_a_follower() -> None:
    dead = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    try:
        lock = LeaseLock(
            dead, "hk", ttl_s=60, holder=Holder("a"), db=DatabaseConfig()
        )  # 6 attempts for commits
        started = time.monotonic()
        assert not lock.acquire()
        lock.release()  # logged, not raised
        # one attempt each: retried, a refused connection held each window and the release at
        # shutdown for about 8 s
        assert time.monotonic() - started < 4.0
    finally:
        dead.dispose()


def test_two_validators_on_one_database_without_redis_have_one_leader(tmp_path: Path) -> None:
    """Two hosts' work folders on one Postgres: the work folder's lock cannot see the other, and
    before the lease both led."""
    name = create_pg_database()
    url = PG_URL.format(name=name)
    one, two = (Settings(database_url=url, workdir=tmp_path / d, redis_url=None) for d in ("a", "b"))
    ledgers = [open_ledger(s) for s in (one, two, one)]
    try:
        first, second, again = (
            leader_lock(s, lg, None, "5Validator") for s, lg in zip((one, two, one), ledgers, strict=True)
        )
        assert isinstance(first, LeaseLock) and first.acquire()
        assert not second.acquire()
        # a round rebuilt after a failure builds its lock again, in the same process: it leads on
        # (with an incarnation per lock object it waited on itself for 1.5 windows; found in review)
        assert leader_lock(one, ledgers[0], None, "5Validator").acquire()
        client = connect(REDIS)
        hotkey = f"hk-{uuid.uuid4().hex}"
        assert leader_lock(one, ledgers[0], client, hotkey).acquire()
        assert leader_lock(one, ledgers[0], client, hotkey).acquire()
        assert not leader_lock(two, ledgers[1], client, hotkey).acquire()
        assert client is not None and client.delete(f"gauntlet:leader:{hotkey}")
        first.release()
        assert second.acquire()
        assert not again.acquire()  # the first, restarted: the second holds the lease now
        assert isinstance(leader_lock(one, ledgers[0], connect(REDIS), "5Validator"), LeaderLock)
    finally:
        for ledger in ledgers:
            ledger.engine.dispose()
        drop_pg_database(name)


def test_the_holder_is_the_work_folders_own_random_id(tmp_path: Path) -> None:
    """Hashed from the host name and the folder's path, two hosts named alike (a cloud image's
    default) with the documented folder held one id, and both led."""
    one, two = holder_id(tmp_path / "a"), holder_id(tmp_path / "b")
    assert one != two and len(one) == 32
    assert holder_id(tmp_path / "a") == one  # a restart takes its own lease back
    (tmp_path / "b" / HOLDER_FILE).write_text("not an id")
    assert holder_id(tmp_path / "b") not in (two, "not an id")  # a damaged file: a new id


def test_a_long_window_keeps_the_lead_from_a_copy_of_the_work_folder(engine: Engine) -> None:
    """The round renews its lock at the weight step, once a window: a window running past half the
    TTL let a live copy of the work folder take the lead from a process that was only busy. The
    service's LockKeeper renews it in between, for `keep_s` after the round's own renewal; a
    round that hangs past that yields the lead. `kept` beside `bare`, which has no keeper."""
    ttl = 2.0
    kept, bare = (
        {p: LeaseLock(engine, name, ttl_s=ttl, holder=Holder("id", p)) for p in "ab"} for name in "kb"
    )
    weigher = SimpleNamespace(lock=kept["a"], led_at=None)
    keeper = LockKeeper(weigher, every_s=0.1, keep_s=1.5).start()  # type: ignore[arg-type]
    try:
        assert kept["a"].acquire() and bare["a"].acquire()
        weigher.led_at = time.monotonic()  # the round's renewal at its weight step
        time.sleep(1.3)  # the window runs on, past half the TTL
        assert bare["b"].acquire()  # the copy took the lead from the busy original
        assert not kept["b"].acquire()  # renewed by the keeper 0.1 s ago
        time.sleep(1.5)  # the keeper stopped at 1.5 s, unrenewed since for over half the TTL
        assert kept["b"].acquire()
    finally:
        keeper.stop()


def test_the_keeper_stops_on_a_refused_renewal_and_on_stop() -> None:
    calls = []

    class Refused:
        def acquire(self) -> bool:
            calls.append(time.monotonic())
            return False

    weigher = SimpleNamespace(lock=Refused(), led_at=time.monotonic())
    keeper = LockKeeper(weigher, every_s=0.05, keep_s=60.0).start()  # type: ignore[arg-type]
    time.sleep(0.4)
    assert len(calls) == 1  # another holder took it: nothing until the round renews again
    weigher.led_at = time.monotonic()
    time.sleep(0.4)
    keeper.stop()
    assert len(calls) == 2 and not keeper._thread.is_alive()
