"""API load benchmark: uvicorn in a subprocess over Postgres seeded with N peers x W windows of
rating history (COPY), driven by bounded keep-alive request loops from this process.

    .venv/bin/python benchmarks/bench_api.py            # 256 peers x 10,000 windows
    .venv/bin/python benchmarks/bench_api.py --quick    # 32 peers x 200 windows, a few seconds

Prints one line per endpoint and a final JSON line. Target (2 cores): /v1/peers >= 500 req/s,
p99 < 50 ms, no errors. Rate limiting is off in the benchmarked server (one client would hit it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg

from storage.db import make_engine, session_scope
from storage.migrate import upgrade
from storage.records import RatingRecord, SelectionRecord, SubmissionRecord, WindowRecord
from storage.writer import commit_window

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
FULL_WINDOWS = 3  # the newest windows are committed through the real writer, with every child row


def hotkey(i: int) -> str:
    return f"5Bench{i:042d}"


@contextmanager
def temp_database() -> Iterator[str]:
    name = f"gauntlet_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _template(
    cur: psycopg.Cursor[tuple[object, ...]], table: str, window: int
) -> tuple[list[str], list[list[str]]]:
    """A table's column names and the text-format COPY rows the writer stored for `window`.

    Cloning rows the real writer produced keeps this seeding right when the schema grows columns.
    """
    cur.execute(f"SELECT * FROM {table} LIMIT 0")
    names = [d.name for d in cur.description or ()]
    rows: list[list[str]] = []
    with cur.copy(f'COPY (SELECT * FROM {table} WHERE "window" = {window}) TO STDOUT') as copy:
        for chunk in copy:
            rows.extend(line.split("\t") for line in bytes(chunk).decode().splitlines())
    return names, rows


def copy_history(dsn: str, n_peers: int, first: int, last: int) -> None:
    """Windows first..last and every peer's rating in each, cloned from window `first - 1` with COPY."""
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        names, (window_row,) = _template(cur, "windows", first - 1)
        hist_names, hist_rows = _template(cur, "rating_history", first - 1)
        col = {n: i for i, n in enumerate(hist_names)}
        with cur.copy("COPY windows FROM STDIN") as copy:
            for w in range(first, last + 1):
                row = list(window_row)
                row[names.index("window")] = str(w)
                row[names.index("base_fingerprint")] = f"{w:064x}"
                copy.write("\t".join(row) + "\n")
        with cur.copy("COPY rating_history FROM STDIN") as copy:
            for w in range(first, last + 1):
                lines = []
                for template in hist_rows:
                    row = list(template)
                    i = int(row[col["uid"]])
                    row[col["window"]] = str(w)
                    row[col["mu"]] = repr(25.0 + i / 10 + w / 1e4)
                    row[col["sigma"]] = repr(8.0 - w / 1e4)
                    row[col["final_score"]] = repr(i / 7 + w / 1e3)
                    lines.append("\t".join(row))
                copy.write("\n".join(lines) + "\n")
        conn.commit()


def full_window(window: int, n_peers: int) -> WindowRecord:
    subs = [
        SubmissionRecord(
            hotkey(i),
            i,
            "ok" if i % 10 else "invalid",
            None if i % 10 else "bad_signature",
            object_key=f"gauntlet/1/{window}/{hotkey(i)}.safetensors",
            payload_digest=f"{i:064x}",
        )
        for i in range(n_peers)
    ]
    ratings = [
        RatingRecord(
            hotkey(i),
            i,
            25.0 + i / 10 + window / 1e4,
            8.0 - window / 1e4,
            0.5,
            i / 7 + window / 1e3,
            last_evaluated_window=window,
        )
        for i in range(n_peers)
    ]
    gather = [
        SelectionRecord(hotkey(n_peers - 1 - r), n_peers - 1 - r, "gather", r)
        for r in range(min(20, n_peers))
    ]
    return WindowRecord(
        window,
        f"{window:064x}",
        f"s{window}",
        "c" * 64,
        "bench",
        submissions=subs,
        ratings=ratings,
        selections=gather,
    )


def seed(url: str, dsn: str, n_peers: int, n_windows: int) -> float:
    start = time.perf_counter()
    upgrade(url)
    engine = make_engine(url)
    # Window 1 and the newest windows go through the real writer; the bulk between is cloned.
    full = [1, *range(max(2, n_windows - FULL_WINDOWS + 1), n_windows + 1)]
    with session_scope(engine) as session:
        commit_window(session=session, record=full_window(1, n_peers))
    if n_windows - FULL_WINDOWS >= 2:
        copy_history(dsn, n_peers, 2, n_windows - FULL_WINDOWS)
    for w in full[1:]:
        with session_scope(engine) as session:
            commit_window(session=session, record=full_window(w, n_peers))
    engine.dispose()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
    return time.perf_counter() - start


SERVER = """
import sys
from api.app import serve
from api.settings import ApiConfig
serve(ApiConfig(database_url=sys.argv[1], redis_url=sys.argv[2] or None, redis_prefix=sys.argv[3],
                rate_limit_per_minute=0), "127.0.0.1", int(sys.argv[4]))
"""


@contextmanager
def api_server(url: str, redis_url: str, port: int) -> Iterator[str]:
    prefix = f"gauntlet:bench:{uuid.uuid4().hex[:8]}:"
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, url, redis_url, prefix, str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the API server did not start")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
        if redis_url:
            import redis

            client = redis.Redis.from_url(redis_url)
            keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> int:
    """One keep-alive HTTP/1.1 GET; returns the status. A minimal client keeps our side cheap."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(
        int(v) for k, _, v in (h.partition(":") for h in lines[1:]) if k.lower() == "content-length"
    )
    await reader.readexactly(length)
    return int(lines[0].split()[1])


async def _worker(
    port: int, paths: list[str], counter: Iterator[int], stop_at: float, out: list[float]
) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    errors = 0
    try:
        for i in counter:
            if time.perf_counter() > stop_at:
                break
            start = time.perf_counter()
            try:
                status = await _get(reader, writer, paths[i % len(paths)])
            except (OSError, asyncio.IncompleteReadError, StopIteration, ValueError):
                errors += 1
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            out.append(time.perf_counter() - start)
            errors += status != 200
    finally:
        writer.close()
    return errors


def load(port: int, paths: list[str], n_requests: int, concurrency: int, max_s: float) -> dict[str, float]:
    """n_requests spread over `concurrency` connections, stopped after max_s seconds in any case."""

    async def run() -> tuple[list[float], int, float]:
        latencies: list[float] = []
        counter = iter(range(n_requests))
        start = time.perf_counter()
        errors = await asyncio.gather(
            *(_worker(port, paths, counter, start + max_s, latencies) for _ in range(concurrency))
        )
        return latencies, sum(errors), time.perf_counter() - start

    latencies, errors, elapsed = asyncio.run(run())
    latencies.sort()

    def pick(q: float) -> float:
        return (
            latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else float("nan")
        )

    return {
        "requests": len(latencies),
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(pick(0.50), 2),
        "p99_ms": round(pick(0.99), 2),
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="32 peers x 200 windows, 400 requests each")
    parser.add_argument("--peers", type=int, default=256)
    parser.add_argument("--windows", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=5000, help="per endpoint")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=30.0, help="per endpoint")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="empty: run without Redis")
    parser.add_argument("--port", type=int, default=18731)
    args = parser.parse_args()
    if args.quick:
        args.peers, args.windows, args.requests = 32, 200, 400
    with temp_database() as name:
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
        seed_s = seed(url, f"host=127.0.0.1 port=5432 user=postgres dbname={name}", args.peers, args.windows)
        rows = args.peers * args.windows
        print(f"seeded {args.peers} peers x {args.windows} windows ({rows:,} history rows) in {seed_s:.1f} s")
        newest = range(args.windows - FULL_WINDOWS + 1, args.windows + 1)
        endpoints = {
            "peers": ["/v1/peers"],
            "history": [
                f"/v1/peers/{hotkey(i)}/history" for i in range(0, args.peers, max(1, args.peers // 16))
            ],
            "window": [f"/v1/windows/{w}" for w in newest],
        }
        results: dict[str, object] = {
            "n_peers": args.peers,
            "n_windows": args.windows,
            "seed_s": round(seed_s, 1),
        }
        with api_server(url, args.redis_url, args.port):
            for name_, paths in endpoints.items():
                load(args.port, paths, min(200, args.requests), args.concurrency, args.max_seconds)  # warm-up
                figures = load(args.port, paths, args.requests, args.concurrency, args.max_seconds)
                print(
                    f"{name_:8s} {figures['rps']:8.1f} req/s  p50 {figures['p50_ms']:6.2f} ms  "
                    f"p99 {figures['p99_ms']:6.2f} ms  errors {figures['errors']}"
                )
                results[name_] = figures
    peers = results["peers"]
    assert isinstance(peers, dict)
    results["target_met"] = peers["rps"] >= 500 and peers["p99_ms"] < 50 and peers["errors"] == 0
    print(json.dumps(results))


if __name__ == "__main__":
    main()
