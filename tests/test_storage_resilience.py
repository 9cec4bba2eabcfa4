"""Races, crashes and a Postgres restart: a window is committed exactly once, all or nothing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from storage import models as m
from storage.db import DatabaseConfig, make_engine, run_in_transaction, session_scope
from storage.migrate import upgrade
from storage.queries import latest_committed_window, window_detail
from storage.writer import CommitOutcome, commit_window
from tests.storage_fixtures import (
    make_window,
    pg_cluster,
    wait_for_postgres,
)

REPO = Path(__file__).resolve().parents[1]

# The child starts a commit and parks inside the transaction once the rating history is written.
CHILD = """
import sys, time
from sqlalchemy import event
from storage.db import make_engine, session_scope
from storage.writer import commit_window
from tests.storage_fixtures import make_window

engine = make_engine(sys.argv[1])

@event.listens_for(engine, "after_cursor_execute")
def park(conn, cursor, statement, params, context, executemany):
    if statement.lstrip().startswith("INSERT INTO rating_history"):
        print("inside", flush=True)
        time.sleep(120)

with session_scope(engine) as session:
    commit_window(session=session, record=make_window(5, n_peers=32))
"""


def _counts(engine: Engine) -> dict[str, int]:
    models = (m.Window, m.Submission, m.Evaluation, m.RatingHistory, m.Rating, m.Selection, m.Peer)
    with session_scope(engine) as s:
        return {t.__tablename__: int(s.scalar(select(func.count()).select_from(t)) or 0) for t in models}


def test_two_racing_committers_one_wins(engine: Engine) -> None:
    record = make_window(9, n_peers=64)
    barrier = threading.Barrier(2)
    outcomes: list[CommitOutcome] = []
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            barrier.wait()
            outcomes.append(run_in_transaction(engine, lambda s: commit_window(session=s, record=record)))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=commit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert sorted(o.value for o in outcomes) == ["already_committed", "committed"]
    counts = _counts(engine)
    assert counts["windows"] == 1 and counts["submissions"] == 64 and counts["rating_history"] == 64
    with session_scope(engine) as s:
        assert window_detail(session=s, window=9) == record


def test_killed_mid_commit_leaves_nothing(db_url: str) -> None:
    upgrade(db_url)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, db_url], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "inside"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
    engine = make_engine(db_url)
    try:
        assert set(_counts(engine).values()) == {0}
        # Postgres notices the dead client and rolls back; wait for the window's lock to go away.
        outcome = run_in_transaction(engine, lambda s: commit_window(session=s, record=make_window(5)))
        assert outcome is CommitOutcome.COMMITTED
        counts = _counts(engine)
        assert counts["submissions"] == 8 and counts["peers"] == 8 and counts["rating_history"] == 8
    finally:
        engine.dispose()


@pytest.mark.skipif(shutil.which("pg_ctlcluster") is None, reason="needs a local Debian Postgres cluster")
def test_operation_recovers_after_postgres_restart(pg_url: str) -> None:
    upgrade(pg_url)
    config = DatabaseConfig(url=pg_url, retry_attempts=10, retry_backoff_s=0.2, retry_max_backoff_s=2.0)
    engine = make_engine(config)
    try:
        run_in_transaction(engine, lambda s: commit_window(session=s, record=make_window(1)), config=config)
        assert pg_cluster("stop") == 0, "could not stop the local Postgres cluster"
        # The server comes back a second later; the next operation retries until it answers.
        restarter = threading.Timer(1.0, pg_cluster, args=("start",))
        restarter.start()
        outcome = run_in_transaction(
            engine, lambda s: commit_window(session=s, record=make_window(2)), config=config
        )
        restarter.join()
        assert outcome is CommitOutcome.COMMITTED
        latest = run_in_transaction(engine, lambda s: latest_committed_window(session=s), config=config)
        assert latest == 2
    finally:
        pg_cluster("start")
        wait_for_postgres()
        engine.dispose()


def test_retries_are_bounded() -> None:
    config = DatabaseConfig(
        url="postgresql+psycopg://postgres@127.0.0.1:1/none",
        connect_timeout_s=1,
        retry_attempts=2,
        retry_backoff_s=0.01,
    )
    engine = make_engine(config)
    calls: list[int] = []

    def work(session: Session) -> None:
        calls.append(1)
        session.execute(select(1))

    with pytest.raises(OperationalError, match="connection"):
        run_in_transaction(engine, work, config=config)
    assert calls == [1, 1]
    engine.dispose()


def test_postgres_statement_timeout_applies_and_is_not_retried(pg_url: str) -> None:
    config = DatabaseConfig(url=pg_url, statement_timeout_ms=150, retry_backoff_s=0.01)
    engine = make_engine(config)
    calls: list[int] = []

    def sleep(session: Session) -> None:
        calls.append(1)
        session.execute(text("SELECT pg_sleep(2)"))

    try:
        with session_scope(engine) as s:
            assert s.scalar(text("SHOW statement_timeout")) == "150ms"
        with pytest.raises(OperationalError, match="statement timeout"):
            run_in_transaction(engine, sleep, config=config)
        assert calls == [1]
    finally:
        engine.dispose()
