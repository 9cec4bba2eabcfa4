"""Fixtures for API tests: a migrated database seeded through the validator's own writer, Redis
under a unique key prefix, and a live uvicorn server in a thread for tests that need real sockets."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import Engine

from api.app import build_server
from api.deps import AppState
from api.ratelimit import SLOT_S
from api.settings import ApiConfig
from storage.db import make_engine, session_scope
from storage.migrate import upgrade
from storage.records import (
    CopyPairRecord,
    EvaluationRecord,
    PenaltyRecord,
    RatingRecord,
    SelectionRecord,
    SubmissionRecord,
    WeightSetRecord,
    WindowRecord,
)
from storage.writer import commit_window, open_window, record_weight_set
from tests.storage_fixtures import PG_URL, create_pg_database, drop_pg_database

REDIS_URL = "redis://127.0.0.1:6379/0"
N_PEERS = 6
N_WINDOWS = 5  # windows 1..5 committed, window 6 left open


def hotkey(i: int) -> str:
    return f"5Peer{i:043d}"


def window_record(window: int, n_peers: int = N_PEERS) -> WindowRecord:
    """Peer 0 ranks first; the last peer is invalid, the one before it missing."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    invalid, missing = n_peers - 1, n_peers - 2
    subs = [
        SubmissionRecord(
            hotkey=hotkey(i),
            uid=i,
            status="invalid" if i == invalid else "missing" if i == missing else "ok",
            reason="bad_signature" if i == invalid else "missing" if i == missing else None,
            object_key=f"gauntlet/1/{window}/{hotkey(i)}.safetensors",
            etag=f'"e{window}-{i}"',
            payload_digest=f"{window:032x}{i:032x}",
            storage_time=t0,
            fetched_time=t0,
            # the last valid peer's update sits far above the honest band: evaluated, not aggregated
            norm=None if i >= missing else 2.0 + i,
            inflation=None if i >= missing else 1.6 if i == missing - 1 else 0.9,
        )
        for i in range(n_peers)
    ]
    heldout = 5.5 - window / 10  # the model improves window by window
    evals = [
        EvaluationRecord(
            hotkey(i),
            5.0,
            4.9,
            heldout,
            heldout - 0.1 - i / 100,
            0.02 - i / 1000,
            0.02,
            1 if i % 2 == 0 else -1,
            # the losses per page (scoring/page_test.py): the first peer's only
            pages={"own_before": [5.0, 5.0], "own_after": [4.8, 5.0], "heldout_before": [heldout] * 2}
            if i == 0
            else None,
        )
        for i in range(3)
    ]
    ratings = [
        RatingRecord(
            hotkey=hotkey(i),
            uid=i,
            mu=25.0 + (n_peers - i) + window / 10,
            sigma=8.0 - window / 10,
            bma=0.5,
            final_score=(n_peers - i) + window / 100,
            last_evaluated_window=window if i < 3 else None,
            # the decision inputs the API reads from the stored state (scoring/ranking.py PeerRating)
            state={
                "evaluations": 4,
                "positives": 3,
                "margin_sum": 0.4,
                "links": {hotkey(1): 0.12},
                "claims": {hotkey(1): -1.5},
                "claim_windows": {hotkey(1): 3},
                "retention": 0.97,
                "drift": 0.006,
                "drift_similarity": 0.004,
                "proof_sum": 3.0,
                "proof_weight": 2.25,
                "last_aggregated": window,
                "last_matched": window - 1,
            }
            if i == 0
            else {},
        )
        for i in range(n_peers)
    ]
    return WindowRecord(
        window=window,
        base_fingerprint=f"{window:064x}",
        heldout_seed=f"seed{window}",
        config_digest="c" * 64,
        code_version="test",
        start_block=1000 + 115 * window,
        timings={"fetch": 1.0 + window / 10, "check": 0.5, "evaluate": 2.0 + window / 5, "commit": 0.25},
        aggregate_digests=[s.payload_digest or "" for s in subs[:2]],
        aggregate_weights=[0.6, 0.4],
        clip_reference={"w": 1.5, "b": 0.25},
        submissions=subs,
        evaluations=evals,
        ratings=ratings,
        penalties=[PenaltyRecord(hotkey(invalid), "invalid", 0.0, "bad_signature")],
        copy_pairs=[
            CopyPairRecord(hotkey(0), hotkey(1), 0.45, 0.9, hotkey(1), authorship_a=2.5, authorship_b=0.1)
        ],
        selections=[
            SelectionRecord(hotkey(0), 0, "gather", 0),
            SelectionRecord(hotkey(1), 1, "gather", 1),
            SelectionRecord(hotkey(2), 2, "reserve", 0),
        ],
    )


def seed(engine: Engine, windows: range = range(1, N_WINDOWS + 1), open_next: bool = True) -> None:
    for w in windows:
        with session_scope(engine) as session:
            commit_window(session=session, record=window_record(w))
    with session_scope(engine) as session:
        record_weight_set(
            session=session,
            record=WeightSetRecord(windows[-1], 9000, [0, 1], [0.75, 0.25], "ok"),
        )
        if open_next:
            open_window(session=session, record=window_record(windows[-1] + 1))


@dataclass(frozen=True)
class SeededDb:
    url: str
    engine: Engine  # a writer engine, for tests that commit more windows


def seeded_database(url: str) -> SeededDb:
    upgrade(url)
    engine = make_engine(url)
    seed(engine)
    return SeededDb(url, engine)


@pytest.fixture(name="pg_db", scope="module")
def pg_db_fixture() -> Iterator[SeededDb]:
    name = create_pg_database()
    db = seeded_database(PG_URL.format(name=name))
    try:
        yield db
    finally:
        db.engine.dispose()
        drop_pg_database(name)


@contextmanager
def redis_namespace() -> Iterator[str]:
    """A unique key prefix; every key under it is deleted afterwards (never FLUSHALL: Redis is shared)."""
    prefix = f"gauntlet:test:{uuid.uuid4().hex[:10]}:"
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


def config_for(url: str, prefix: str | None = None, **overrides: object) -> ApiConfig:
    """A config over `url`; with a prefix, Redis is on (cache keys and the channel under the prefix)."""
    redis_opts: dict[str, object] = {}
    if prefix is not None:
        redis_opts = {"redis_url": REDIS_URL, "redis_prefix": prefix, "events_channel": f"{prefix}events"}
    return ApiConfig(database_url=url, **{**redis_opts, **overrides})  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class LiveServer:
    base_url: str
    config: ApiConfig
    state: AppState  # the running app's state (engine, limits), for tests that look inside


def clear_of_a_minute_edge(margin_s: float = 10.0) -> None:
    """Wait out the end of the wall-clock minute. The rate limit counts per fixed minute
    (api/ratelimit.py `SLOT_S`), so calls a test expects counted together were split across two
    minutes when they straddled one: the third call of a budget of two was served (a CI run)."""
    left = SLOT_S - time.time() % SLOT_S
    if left < margin_s:
        time.sleep(left + 0.05)


@contextmanager
def run_server(config: ApiConfig) -> Iterator[LiveServer]:
    """Serve `config` on a free port in a thread until the generator is closed."""
    port = free_port()
    server = build_server(config, "127.0.0.1", port)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the API server did not start")
        time.sleep(0.02)
    try:
        app: Any = server.config.app
        yield LiveServer(f"http://127.0.0.1:{port}", config, app.state.gauntlet)
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(name="pg_server", scope="module")
def pg_server_fixture(pg_db: SeededDb) -> Iterator[LiveServer]:
    """The API over the seeded Postgres database with Redis on (cache, rate limit, events)."""
    with redis_namespace() as prefix, run_server(config_for(pg_db.url, prefix)) as server:
        yield server


@pytest.fixture(name="client", scope="module")
def client_fixture(pg_server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=pg_server.base_url, timeout=10) as client:
        yield client


# Peers tied at final score 0: the ranking must order them by ordinal, then uid, and never by hotkey.
# (uid, hotkey, final, mu, sigma): the invalid peer's hotkey sorts first, its ordinal is the worst.
TIED: tuple[tuple[int, str, float, float, float], ...] = (
    (0, "5AAAinvalid", 0.0, 14.0, 25 / 3),  # ordinal -11
    (1, "5ZZZbest", 2.0, 31.0, 8.0),  # the only positive final score
    (2, "5MMMok", 0.0, 30.0, 8.0),  # ordinal 6
    (3, "5BBBok", 0.0, 30.0, 8.0),  # ordinal 6 as well: the lower uid first
    (4, "5CCCnew", 0.0, 25.0, 25 / 3),  # ordinal 0
    (5, "5DDDpaid", 0.0, 20.0, 8.0),  # ordinal -4, but aggregated in window 1: before the others at 0
)
AGGREGATED = {5: 1}  # uid: the last window that aggregated it
TIED_ORDER = [1, 5, 2, 3, 4, 0]  # uids, best first


def tied_record(window: int = 1) -> WindowRecord:
    return WindowRecord(
        window=window,
        base_fingerprint=f"{window:064x}",
        heldout_seed=f"seed{window}",
        config_digest="c" * 64,
        code_version="test",
        submissions=[
            SubmissionRecord(
                hotkey=hk,
                uid=uid,
                status="invalid" if uid == 0 else "ok",
                reason="bad_signature" if uid == 0 else None,
            )
            for uid, hk, *_ in TIED
        ],
        ratings=[
            RatingRecord(
                hotkey=hk,
                uid=uid,
                mu=mu,
                sigma=sigma,
                bma=0.1,
                final_score=final,
                state={"last_aggregated": AGGREGATED[uid]} if uid in AGGREGATED else {},
            )
            for uid, hk, final, mu, sigma in TIED
        ],
    )


def tied_database(url: str) -> SeededDb:
    upgrade(url)
    engine = make_engine(url)
    with session_scope(engine) as session:
        commit_window(session=session, record=tied_record())
    return SeededDb(url, engine)


def check_screenshot(path: Path, min_colours: int) -> None:
    """A rendered page, not a blank one: a real size, and at least `min_colours` distinct colours
    each covering a visible share of the page (background, panels, text, chart series...)."""
    from PIL import Image

    with Image.open(path) as image:
        assert image.width >= 800 and image.height >= 600, image.size
        small = image.convert("RGB").resize((320, 240))
    counts = small.getcolors(maxcolors=320 * 240) or []
    visible = [colour for n, colour in counts if n >= 20]
    assert len(visible) >= min_colours, (path, len(visible))
