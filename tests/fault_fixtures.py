"""Fault injection on real services: a small localnet scenario, the `gauntlet run` child process,
Postgres and Redis stopped and started, and the checks that nothing was lost or counted twice."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import Engine, text

from scoring.signing import dev_keypair
from storage.records import WindowRecord
from tests.storage_fixtures import pg_cluster, wait_for_postgres
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers
from validator.telemetry.events import EVENTS_CHANNEL

SCENARIO = "honest:3,lazy:1,malformed:1"
FIRST = 1
# The windows of the session's reference run (conftest.fault_reference), which the restart and fault
# tests compare with: four, so three crash points and a kill plan fit after the first window.
REFERENCE_WINDOWS = range(FIRST, FIRST + 4)
REDIS_URL = "redis://127.0.0.1:6379/0"
REPO = Path(__file__).resolve().parents[1]


@contextmanager
def gauntlet_env(**values: str) -> Iterator[None]:
    """Only the given GAUNTLET_ variables (e.g. DATABASE_URL) while the block runs; then the old ones."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("GAUNTLET_")}
    for key in saved:
        del os.environ[key]
    os.environ.update({f"GAUNTLET_{k.upper()}": v for k, v in values.items()})
    try:
        yield
    finally:
        for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
            del os.environ[key]
        os.environ.update(saved)


def make_runner(
    workdir: Path, scenario: str = SCENARIO, hook: Callable[[str, int], None] | None = None
) -> DemoRunner:
    """The demo's localnet at test size (H = 5); `gauntlet run` on its chain scores the same way."""
    cfg = DemoConfig(parse_peers(scenario), workdir=workdir, inner_steps=5, corpus_tokens=300_000)
    return DemoRunner(cfg, hook=hook)


def reconnect(runner: DemoRunner) -> None:
    """Rebuild the runner's Round from storage (what a restarted process does), freeing the old pool."""
    runner.round.ledger.engine.dispose()
    runner.round, runner.state = runner.connect()


def run_windows(runner: DemoRunner, windows: range) -> None:
    for w in windows:
        runner.publish(w)
        runner.validate(w)


def records(runner: DemoRunner, windows: range) -> list[WindowRecord]:
    out = []
    for w in windows:
        record = runner.round.ledger.window_detail(w)
        if record is None:
            raise LookupError(f"window {w} is not committed")
        out.append(record)
    return out


def comparable(record: WindowRecord) -> WindowRecord:
    """What must be identical across runs: everything but wall-clock facts and signatures (sr25519
    signatures are randomized, so file bytes, etags and content digests differ). The config digest
    leaves out paths, so runs in different folders must still agree on it."""
    return replace(
        record,
        timings={},
        submissions=[
            replace(s, content_digest=None, etag=None, fetched_time=None) for s in record.submissions
        ],
        evaluations=[replace(e, timings={}) for e in record.evaluations],
    )


def duplicate_rows(engine: Engine) -> int:
    """(hotkey, window) pairs stored more than once in rating_history or submissions."""
    total = 0
    with engine.connect() as conn:
        for table in ("rating_history", "submissions"):
            groups = f'SELECT hotkey, "window" FROM {table} GROUP BY hotkey, "window" HAVING COUNT(*) > 1'
            sql = f"SELECT COUNT(*) FROM ({groups}) d"
            total += int(conn.execute(text(sql)).scalar_one())
    return total


def window_states(engine: Engine) -> dict[int, str]:
    with engine.connect() as conn:
        rows = conn.execute(text('SELECT "window", state FROM windows ORDER BY "window"')).all()
    return {int(w): str(s) for w, s in rows}


def child_env(workdir: Path, home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a `gauntlet run` child: the demo's config file, no inherited GAUNTLET_."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")}
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        GAUNTLET_CONFIG=str(workdir / "gauntlet.toml"), HOME=str(home), OMP_NUM_THREADS="1",
        GAUNTLET_REDIS_URL="",  # a SIGKILLed holder would keep the leader lock for its whole TTL
    )  # fmt: skip
    env.update(extra or {})
    return env


# Postgres ---------------------------------------------------------------------------------


def ensure_postgres() -> None:
    """Start the cluster if it is down (a no-op when it runs) and wait until it answers."""
    pg_cluster("start")
    wait_for_postgres()


# Redis ------------------------------------------------------------------------------------


def redis_alive() -> bool:
    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def stop_redis() -> None:
    subprocess.run(["redis-cli", "-p", "6379", "shutdown", "nosave"], check=False, capture_output=True)
    end = time.monotonic() + 10
    while redis_alive():
        if time.monotonic() > end:
            raise RuntimeError("Redis did not stop")
        time.sleep(0.05)


def ensure_redis(deadline_s: float = 30.0) -> None:
    """Start Redis as the suite expects it (no persistence) unless it answers; wait until it does."""
    if redis_alive():
        return
    subprocess.run(
        ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", "6379",
         "--save", "", "--appendonly", "no"],
        check=False, capture_output=True,
    )  # fmt: skip
    end = time.monotonic() + deadline_s
    while not redis_alive():
        if time.monotonic() > end:
            raise RuntimeError("Redis did not come back")
        time.sleep(0.05)


@contextmanager
def redis_stopped() -> Iterator[None]:
    stop_redis()
    try:
        yield
    finally:
        ensure_redis()


def weight_sets(engine: Engine) -> list[tuple[int, str, str | None]]:
    """(window, outcome, error) of every recorded weight-setting attempt, oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(text('SELECT "window", outcome, error FROM weight_sets ORDER BY id')).all()
    return [(int(w), str(o), None if e is None else str(e)) for w, o, e in rows]


@contextmanager
def redis_events() -> Iterator[Callable[..., list[dict[str, Any]]]]:
    """Subscribe to the validator's event channel; yields `collect(until=(type, window), timeout_s)`."""
    client = redis.Redis.from_url(REDIS_URL)
    sub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    sub.subscribe(EVENTS_CHANNEL)
    sub.get_message(timeout=2.0)  # the subscription confirmation

    def collect(*, until: tuple[str, int], timeout_s: float) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            message = sub.get_message(timeout=0.2)
            if message is None:
                continue
            event = json.loads(message["data"])
            got.append(event)
            if (event.get("type"), event.get("window")) == until:
                break
        return got

    try:
        yield collect
    finally:
        sub.close()
        client.close()


# Peers' object stores that fail -----------------------------------------------------------


@contextmanager
def silent_server() -> Iterator[str]:
    """An S3 location whose server accepts connections and never answers; yields its commitment."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with suppress(TimeoutError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/bucket"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def closed_port() -> str:
    """An S3 location on a port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/bucket"


def register_stores(runner: DemoRunner, commitments: Mapping[str, str]) -> dict[str, str]:
    """Register one extra peer per named commitment on the runner's chain; returns name → hotkey."""
    out = {}
    uid = max(n.uid for n in runner.chain.neurons()) + 1
    for i, (name, text_) in enumerate(sorted(commitments.items())):
        hotkey = dev_keypair(f"//gauntlet-fault-{name}").ss58_address
        runner.chain.register(hotkey, uid=uid + i)
        runner.chain.commit(hotkey, text_)
        out[name] = hotkey
    return out
