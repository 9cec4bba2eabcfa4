"""The leader lease in the database (validator/state/leader_lease.py): without Redis, two
validators on one database both set weights for the same hotkey."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import Engine

from storage.db import DatabaseConfig, make_engine
from tests.storage_fixtures import PG_URL, create_pg_database, drop_pg_database
from validator.settings import Settings
from validator.state.leader_lease import HOLDER_FILE, LeaseLock, holder_id
from validator.telemetry.events import LeaderLock, connect
from validator.wiring import leader_lock, open_ledger

REDIS = "redis://127.0.0.1:6379/0"


def test_one_holder_at_a_time_until_its_lease_expires(engine: Engine) -> None:
    now = [1000.0]
    a, b = (LeaseLock(engine, "hk", ttl_s=60, token=t, clock=lambda: now[0]) for t in ("host-a", "host-b"))
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
    assert LeaseLock(engine, "other hotkey", ttl_s=60, token="host-b", clock=lambda: now[0]).acquire()


def test_a_restarted_holder_takes_its_own_lease_back(engine: Engine) -> None:
    first = LeaseLock(engine, "hk", ttl_s=600, token="host-a:/work")
    assert first.acquire()
    assert LeaseLock(engine, "hk", ttl_s=600, token="host-a:/work").acquire()  # the same host and folder
    assert not LeaseLock(engine, "hk", ttl_s=600, token="host-b:/work").acquire()


def test_a_database_it_cannot_reach_makes_a_follower() -> None:
    dead = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    try:
        lock = LeaseLock(dead, "hk", ttl_s=60, token="a", db=DatabaseConfig())  # 6 attempts for commits
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
