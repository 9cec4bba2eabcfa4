"""Fixtures for storage tests: a throwaway Postgres database per test and a SQLite file, both migrated."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from sqlalchemy import Engine

from storage.db import make_engine
from storage.migrate import upgrade
from storage.records import (
    CopyPairRecord,
    EvaluationRecord,
    PenaltyRecord,
    RatingRecord,
    SelectionRecord,
    SubmissionRecord,
    WindowRecord,
)

PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
# The machine's Debian cluster, as `.ci/run` finds it: `ls /etc/postgresql`.
PG_VERSION = sorted(os.listdir("/etc/postgresql"))[-1] if os.path.isdir("/etc/postgresql") else ""


def pg_cluster(action: str) -> int:
    """`pg_ctlcluster VERSION main ACTION` (start/stop/restart); returns its exit code."""
    done = subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", PG_VERSION, "main", action],
        check=False,
        capture_output=True,
        timeout=60,
    )
    return done.returncode


def wait_for_postgres(deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while True:
        try:
            with psycopg.connect(PG_ADMIN, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def create_pg_database() -> str:
    name = f"gauntlet_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_pg_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(name="pg_url")
def pg_url_fixture() -> Iterator[str]:
    name = create_pg_database()
    try:
        yield PG_URL.format(name=name)
    finally:
        drop_pg_database(name)


@pytest.fixture(name="sqlite_url")
def sqlite_url_fixture(tmp_path: object) -> str:
    return f"sqlite:///{tmp_path}/gauntlet.db"


@pytest.fixture(name="db_url", params=["postgresql", "sqlite"])
def db_url_fixture(request: pytest.FixtureRequest) -> str:
    name = "pg_url" if request.param == "postgresql" else "sqlite_url"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture(name="engine")
def engine_fixture(db_url: str) -> Iterator[Engine]:
    upgrade(db_url)
    eng = make_engine(db_url)
    try:
        yield eng
    finally:
        eng.dispose()


def hotkey(i: int) -> str:
    return f"5Hotkey{i:041d}"


def make_window(window: int, n_peers: int = 8, n_eval: int = 4, n_gather: int = 3) -> WindowRecord:
    """A realistic window: every peer submits (one invalid), some evaluated, all rated."""
    t0 = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
    subs = [
        SubmissionRecord(
            hotkey=hotkey(i),
            uid=i,
            status="invalid" if i == n_peers - 1 else "ok",
            reason="bad_signature" if i == n_peers - 1 else None,
            detail="signature does not verify" if i == n_peers - 1 else "",
            object_key=f"gauntlet/1/{window}/{hotkey(i)}.safetensors",
            etag=f'"etag-{window}-{i}"',
            version_id=None,
            size=1000 + i,
            payload_digest=f"{window:08x}{i:056x}",
            content_digest=f"{i:064x}",
            storage_time=t0,
            fetched_time=t0,
        )
        for i in range(n_peers)
    ]
    evals = [
        EvaluationRecord(
            hotkey=hotkey(i),
            loss_own_before=5.5 + i / 3,
            loss_own_after=5.4 + i / 7,
            loss_rand_before=5.51,
            loss_rand_after=5.5 - 0.1 / (i + 3),
            score=0.1 / 3 + i * 1e-17,
            own_gain=0.1 / 7,
            indicator=1 if i % 2 == 0 else -1,
            timings={"eval_s": 0.048 + i / 1000},
        )
        for i in range(n_eval)
    ]
    ratings = [
        RatingRecord(
            hotkey=hotkey(i),
            uid=i,
            mu=25.0 + i / 3 + window / 1000,
            sigma=25 / 3 - window / 1000,
            bma=0.05 * i,
            final_score=float(i) / 7 + window,
            penalty={"consecutive_missing": 0},
            last_evaluated_window=window if i < n_eval else None,
            state={"mu": 25.0 + i / 3, "sigma": 25 / 3, "history": [0.1, 1e-300, -2.5e17]},
        )
        for i in range(n_peers)
    ]
    return WindowRecord(
        window=window,
        base_fingerprint=f"{window:064x}",
        heldout_seed=f"seed{window}",
        config_digest="c" * 64,
        code_version="0.1.0+test",
        start_block=1000 + window * 115,
        timings={"fetch_s": 1.25, "eval_s": 0.3},
        aggregate_digests=[s.payload_digest or "" for s in subs[:n_gather]],
        submissions=subs,
        evaluations=evals,
        ratings=ratings,
        penalties=[PenaltyRecord(hotkey(n_peers - 1), "invalid", 0.0, "bad_signature")],
        copy_pairs=[
            CopyPairRecord(hotkey(0), hotkey(1), 0.45, 0.9, hotkey(1), authorship_a=2.5, authorship_b=0.1)
        ],
        selections=[SelectionRecord(hotkey(i), i, "gather", i) for i in range(n_gather)]
        + [SelectionRecord(hotkey(n_gather), n_gather, "reserve", 0)],
    )
