"""Storage benchmark on Postgres: window commit, leaderboard and one peer's 1,000-window history.

Fills rating_history with WINDOWS x PEERS rows by COPY first (10,000 x 256 by default, --quick uses
fewer), then times the repository functions the validator and the API call. Prints readable lines
and a final JSON line. Targets: commit < 200 ms, leaderboard < 20 ms, history < 50 ms.

    .venv/bin/python benchmarks/bench_storage.py [--quick] [--windows N] [--admin-dsn DSN]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import psycopg
from sqlalchemy import Engine

from storage.db import make_engine, run_in_transaction, session_scope
from storage.migrate import upgrade
from storage.queries import leaderboard, peer_history
from storage.records import (
    EvaluationRecord,
    RatingRecord,
    SelectionRecord,
    SubmissionRecord,
    WindowRecord,
)
from storage.writer import CommitOutcome, commit_window

TARGETS_MS = {"commit": 200.0, "leaderboard": 20.0, "history": 50.0}


def hotkey(i: int) -> str:
    return f"5Bench{i:042d}"


def copy_rows(conn: psycopg.Connection[Any], sql: str, lines: Any) -> None:
    with conn.cursor() as cur, cur.copy(sql) as copy:
        for chunk in lines:
            copy.write(chunk)


def fill_history(conn: psycopg.Connection[Any], windows: int, peers: int) -> int:
    """COPY peers, windows and rating history.

    Bulk-load practice: FK triggers are skipped for this session and the history indexes are rebuilt
    after the load (same names and definitions as the migration), which is several times faster.
    """
    now = datetime.now(UTC).isoformat()
    conn.execute("SET session_replication_role = replica")
    conn.execute("SET maintenance_work_mem = '256MB'")
    conn.execute("ALTER TABLE rating_history DROP CONSTRAINT pk_rating_history")
    conn.execute("DROP INDEX ix_rating_history_window")
    copy_rows(conn, "COPY peers FROM STDIN", [f"{hotkey(i)}\t{i}\t0\t{windows - 1}\n" for i in range(peers)])
    copy_rows(
        conn,
        'COPY windows ("window", state, base_fingerprint, heldout_seed, config_digest, code_version,'
        " timings, aggregate_digests, clip_reference, opened_at, committed_at) FROM STDIN",
        [
            f"{w}\tcommitted\t{w:064x}\ts{w}\tcfg\tbench\t{{}}\t[]\t{{}}\t{now}\t{now}\n"
            for w in range(windows)
        ],
    )
    keys = [hotkey(i) for i in range(peers)]

    def history_chunks() -> Any:
        for w in range(windows):
            yield "".join(
                f"{keys[i]}\t{w}\t{i}\t{25 + i / 100 + w / 1e5}\t{8.3 - w / 1e5}\t0.5\t{i / 10}\t{{}}\t{w}\t"
                f'{{"mu": {25 + i / 100}, "sigma": 8.3, "misses": 0}}\n'
                for i in range(peers)
            ).encode()

    copy_rows(
        conn,
        'COPY rating_history (hotkey, "window", uid, mu, sigma, bma, final_score, penalty,'
        " last_evaluated_window, state) FROM STDIN",
        history_chunks(),
    )
    conn.execute('ALTER TABLE rating_history ADD CONSTRAINT pk_rating_history PRIMARY KEY (hotkey, "window")')
    conn.execute('CREATE INDEX ix_rating_history_window ON rating_history ("window")')
    conn.execute("SET session_replication_role = origin")
    conn.commit()
    conn.execute("ANALYZE")
    return windows * peers


def make_record(window: int, peers: int, n_eval: int = 20) -> WindowRecord:
    t = datetime.now(UTC)
    return WindowRecord(
        window=window,
        base_fingerprint=f"{window:064x}",
        heldout_seed=f"s{window}",
        config_digest="cfg",
        code_version="bench",
        start_block=window * 115,
        timings={"fetch_s": 1.0, "eval_s": 60.0},
        aggregate_digests=[f"{i:064x}" for i in range(n_eval)],
        submissions=[
            SubmissionRecord(
                hotkey(i),
                i,
                "ok",
                object_key=f"gauntlet/1/{window}/{hotkey(i)}.safetensors",
                etag="e",
                size=1 << 20,
                payload_digest=f"{i:064x}",
                content_digest=f"{i:064x}",
                storage_time=t,
                fetched_time=t,
            )
            for i in range(peers)
        ],
        evaluations=[
            EvaluationRecord(hotkey(i), 5.0, 4.9, 5.1, 5.05, 0.01, 0.02, 1, {"eval_s": 0.05})
            for i in range(n_eval)
        ],
        ratings=[
            RatingRecord(
                hotkey(i),
                i,
                25.0 + i / 100,
                8.0,
                0.5,
                i / 10,
                {"misses": 0},
                window,
                {"mu": 25.0 + i / 100, "sigma": 8.0, "bma": 0.5},
            )
            for i in range(peers)
        ],
        selections=[SelectionRecord(hotkey(i), i, "gather", i) for i in range(20)]
        + [SelectionRecord(hotkey(20 + i), 20 + i, "reserve", i) for i in range(10)],
    )


def timed_ms(fn: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def commit_ms(engine: Engine, first_window: int, peers: int, repeats: int) -> float:
    """Median wall time of committing `repeats` fresh windows, each in its own transaction."""
    samples = []
    for k in range(repeats):
        record = make_record(first_window + k, peers)
        start = time.perf_counter()
        outcome = run_in_transaction(
            engine, partial(lambda s, r: commit_window(session=s, record=r), r=record)
        )
        samples.append((time.perf_counter() - start) * 1000)
        assert outcome is CommitOutcome.COMMITTED
    return statistics.median(samples)


def measure(engine: Engine, args: argparse.Namespace) -> dict[str, float]:
    commit = commit_ms(engine, args.windows, args.peers, args.commits)
    n_hist = min(1000, args.windows + args.commits)

    def read_board() -> None:
        with session_scope(engine) as s:
            assert len(leaderboard(session=s)) == args.peers

    def read_history() -> None:
        with session_scope(engine) as s:
            assert len(peer_history(session=s, hotkey=hotkey(7), limit=1000)) == n_hist

    board, history = timed_ms(read_board, args.reads), timed_ms(read_history, args.reads)
    # peers, peer_uids, submissions, ratings and history per peer; evaluations, selections, window
    commit_rows = args.peers * 5 + 20 + 30 + 1
    return {
        "commit_ms": round(commit, 2),
        "commit_rows": commit_rows,
        "commit_rows_per_s": round(commit_rows / commit * 1000),
        "leaderboard_ms": round(board, 2),
        "leaderboard_rows_per_s": round(args.peers / board * 1000),
        "history_ms": round(history, 2),
        "history_rows_per_s": round(n_hist / history * 1000),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    name = f"gauntlet_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    engine = make_engine(f"postgresql+psycopg://postgres@{args.host}:{args.port}/{name}")
    try:
        upgrade(engine)
        start = time.perf_counter()
        with psycopg.connect(f"{args.admin_dsn.rsplit('dbname=', 1)[0]}dbname={name}") as conn:
            rows = fill_history(conn, args.windows, args.peers)
        create_s = time.perf_counter() - start
        print(f"created {rows:,} history rows in {create_s:.1f} s ({rows / create_s:,.0f} rows/s)")
        figures = measure(engine, args)
    finally:
        engine.dispose()
        with psycopg.connect(args.admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    met = all(figures[f"{k}_ms"] < target for k, target in TARGETS_MS.items())
    return {
        "backend": "postgresql",
        "windows": args.windows,
        "peers": args.peers,
        "history_rows": rows,
        "create_s": round(create_s, 2),
        "create_rows_per_s": round(rows / create_s),
        **figures,
        "targets_met": met,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="200 windows, fewer repeats (CI smoke run)")
    parser.add_argument("--windows", type=int, default=10_000)
    parser.add_argument("--peers", type=int, default=256)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", default="5432")
    parser.add_argument("--admin-dsn", default="host=127.0.0.1 port=5432 user=postgres dbname=postgres")
    args = parser.parse_args()
    args.commits, args.reads = (3, 10) if args.quick else (7, 50)
    if args.quick:
        args.windows = min(args.windows, 200)
    result = run(args)
    print(
        f"window commit ({args.peers} peers, 20 evaluated): {result['commit_ms']:.1f} ms "
        f"(target < {TARGETS_MS['commit']:.0f}), {result['commit_rows_per_s']:,} rows/s"
    )
    print(
        f"leaderboard ({args.peers} peers): {result['leaderboard_ms']:.2f} ms "
        f"(target < {TARGETS_MS['leaderboard']:.0f})"
    )
    print(
        f"peer history (1,000 of {args.windows:,} windows): {result['history_ms']:.2f} ms "
        f"(target < {TARGETS_MS['history']:.0f})"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
