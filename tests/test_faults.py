"""Faults on real services: the validator killed, its database, cache and peers' stores failing,
the chain refusing weights, and a window full of hostile files. Each ends with every window
committed exactly once and the same decisions an undisturbed run makes."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.settings import ApiConfig
from scoring.signing import dev_keypair
from storage.db import make_engine
from tests.api_fixtures import run_server
from tests.fault_fixtures import (
    FIRST,
    REDIS_URL,
    REFERENCE_WINDOWS,
    child_env,
    closed_port,
    comparable,
    duplicate_rows,
    ensure_postgres,
    ensure_redis,
    gauntlet_env,
    make_runner,
    pg_cluster,
    records,
    redis_events,
    redis_stopped,
    register_stores,
    run_windows,
    silent_server,
    weight_sets,
    window_states,
)
from tests.hostile_fixtures import EXPECTED, HostileMix, HostileNet, rss_sampled
from tests.kill_fixtures import run_with_kills
from tests.storage_fixtures import PG_URL, create_pg_database, drop_pg_database
from validator.chain.local import LocalChain, LocalChainConfig
from validator.chain.protocol import Chain, Neuron, WeightLimits, WeightOutcome
from validator.demo.runner import DemoRunner
from validator.settings import Settings
from validator.wiring import chain_for

WINDOWS = REFERENCE_WINDOWS


@pytest.fixture
def pg_url() -> Iterator[str]:
    name = create_pg_database()
    try:
        yield PG_URL.format(name=name)
    finally:
        ensure_postgres()
        drop_pg_database(name)


@pytest.fixture
def pg_runner(pg_url: str, tmp_path: Path) -> Iterator[DemoRunner]:
    """The scenario's localnet with the validator's database on Postgres."""
    with gauntlet_env(database_url=pg_url):
        runner = make_runner(tmp_path / "demo")
    yield runner
    runner.round.ledger.engine.dispose()


def test_gauntlet_run_killed_and_restarted(
    fault_reference: DemoRunner, pg_runner: DemoRunner, pg_url: str, tmp_path: Path
) -> None:
    runner = pg_runner
    env = child_env(runner.cfg.workdir, tmp_path / "home", {"GAUNTLET_DATABASE_URL": pg_url})
    report = run_with_kills(runner, env, windows=WINDOWS, kills=3, seed=7)
    assert report.restarts == 3 and report.exit_code == 0
    engine = make_engine(pg_url)
    try:
        assert window_states(engine) == dict.fromkeys(WINDOWS, "committed")
        assert duplicate_rows(engine) == 0
    finally:
        engine.dispose()
    got = [comparable(r) for r in records(runner, WINDOWS)]
    want = [comparable(r) for r in records(fault_reference, WINDOWS)]
    for a, b in zip(got, want, strict=True):
        assert a == b, (a.window, report.kills)


def test_postgres_restarted_during_commit(fault_reference: DemoRunner, pg_runner: DemoRunner) -> None:
    outage = FIRST + 1
    restarts: list[threading.Timer] = []
    marks: dict[str, float] = {}

    def stop_after_evaluate(stage: str, window: int) -> None:
        if stage == "evaluate" and window == outage and not restarts:
            assert pg_cluster("stop") == 0, "could not stop the local Postgres cluster"
            marks["stopped"] = time.monotonic()
            restarts.append(threading.Timer(1.5, pg_cluster, args=("start",)))
            restarts[0].start()
        if stage == "commit" and window == outage:
            marks["committed"] = time.monotonic()

    windows, runner = range(FIRST, FIRST + 3), pg_runner
    try:
        runner.round = dataclasses.replace(runner.round, hook=stop_after_evaluate)
        run_windows(runner, windows)
    finally:
        for timer in restarts:
            timer.join()
        ensure_postgres()
    assert len(restarts) == 1
    assert marks["committed"] - marks["stopped"] >= 1.5  # the commit waited for the server to return
    assert window_states(runner.round.ledger.engine) == dict.fromkeys(windows, "committed")
    assert duplicate_rows(runner.round.ledger.engine) == 0
    got = [comparable(r) for r in records(runner, windows)]
    assert got == [comparable(r) for r in records(fault_reference, windows)]


@pytest.fixture
def redis_runner(tmp_path: Path) -> Iterator[DemoRunner]:
    """Two honest peers; the validator publishes events and takes its leader lock in the real Redis."""
    with gauntlet_env(redis_url=REDIS_URL):
        runner = make_runner(tmp_path / "demo", "honest:2")
    yield runner
    ensure_redis()
    runner.round.weigher.lock.release()
    runner.round.ledger.engine.dispose()


def test_redis_down_scoring_and_api_go_on(redis_runner: DemoRunner) -> None:
    runner = redis_runner
    run_windows(runner, range(1, 2))  # connected to Redis before it goes away
    with redis_stopped():
        run_windows(runner, range(2, 3))
        assert runner.round.ledger.window_state(2) == "committed"
        config = ApiConfig(database_url=runner.settings.database_url, redis_url=REDIS_URL)
        with run_server(config) as server, httpx.Client(base_url=server.base_url, timeout=10) as client:
            body = client.get("/v1/peers").json()
        assert body["window"] == 2
        assert {p["hotkey"] for p in body["peers"]} == set(runner.network.behaviour_of())
    sets = weight_sets(runner.round.ledger.engine)
    assert [(w, outcome, error) for w, outcome, error in sets if w == 2] == [(2, "skipped", "not the leader")]
    with redis_events() as events:
        run_windows(runner, range(3, 4))
        got = events(until=("window_committed", 3), timeout_s=10.0)
    assert {e["type"] for e in got if e["window"] == 3} >= {
        "window_opened",
        "peer_scored",
        "weights_set",
        "window_committed",
    }
    scored = {e["hotkey"]: e["status"] for e in got if e["type"] == "peer_scored"}
    assert scored == {p: "ok" for p in runner.network.behaviour_of()}  # one per peer, once committed


def test_unreachable_stores_end_missing_within_deadline(tmp_path: Path) -> None:
    with gauntlet_env(fetch_deadline_s="3"), silent_server() as hanging:
        runner = make_runner(tmp_path / "demo", "honest:1,malformed:1")
        try:
            bad = register_stores(runner, {"hanging": hanging, "closed": closed_port()})
            runner.publish(1)
            report = runner.validate(1)
        finally:
            runner.round.ledger.engine.dispose()
    status = {p.hotkey: (p.status, p.reason) for p in report.peers}
    assert {status[h] for h in bad.values()} == {("missing", "fetch_failed")}
    assert report.timings["fetch"] < 3.0 + 1.0  # the deadline, not the 60 s request timeout
    honest = [h for h, kind in runner.network.behaviour_of().items() if kind == "honest"]
    assert status[honest[0]] == ("ok", None)
    record = records(runner, range(1, 2))[0]
    assert {s.hotkey: s.reason for s in record.submissions if s.hotkey in bad.values()} == dict.fromkeys(
        bad.values(), "fetch_failed"
    )


class RaisingChain:
    """A chain whose `set_weights` raises, as an SDK or RPC failure would; the rest is delegated."""

    def __init__(self, inner: LocalChain) -> None:
        self.inner = inner

    def block(self) -> int:
        return self.inner.block()

    def block_timestamp(self, block: int) -> float:
        return self.inner.block_timestamp(block)

    def wait_for_block(self, block: int, timeout: float) -> int:
        return self.inner.wait_for_block(block, timeout)

    @property
    def hotkey(self) -> str:
        return self.inner.hotkey

    def weight_limits(self) -> WeightLimits:
        return self.inner.weight_limits()

    def neurons(self) -> list[Neuron]:
        return self.inner.neurons()

    def commitments(self) -> dict[str, str]:
        return self.inner.commitments()

    def set_weights(self, weights: dict[int, float]) -> WeightOutcome:
        raise RuntimeError("connection to the chain endpoint reset")


def test_set_weights_failures_recorded_and_retried(tmp_path: Path) -> None:
    with gauntlet_env(windows_per_weights="2"):
        # three: nobody is paid before window 3 aggregates proven work (scoring/earnings.py)
        runner = make_runner(tmp_path / "demo", "honest:3")
    path, hotkey = runner.chain.config.path, runner.validator_hotkey
    limited = LocalChain(LocalChainConfig(path, validator_hotkey=hotkey, weights_rate_limit=5))
    chains: dict[int, Chain] = {
        4: LocalChain(LocalChainConfig(path, validator_hotkey=dev_keypair("//nobody").ss58_address)),
        5: RaisingChain(runner.chain),
        6: limited,
        7: limited,
    }
    try:
        for w in range(1, 8):
            runner.round.weigher.chain = chains.get(w, runner.chain)
            runner.publish(w)
            if w == 6:  # another set at this block: the validator's own is now too fast
                assert limited.set_weights({1: 1.0}).ok
            runner.validate(w)
        sets = weight_sets(runner.round.ledger.engine)
        states = window_states(runner.round.ledger.engine)
    finally:
        runner.round.ledger.engine.dispose()
    assert states == dict.fromkeys(range(1, 8), "committed")
    assert [(w, outcome) for w, outcome, _ in sets] == [
        (2, "ok"),  # nothing aggregated yet: a self-weight (nobody to pay), nothing retried
        (4, "failed"),
        (5, "failed"),
        (6, "failed"),
        (7, "ok"),
    ]
    errors = [error or "" for _, _, error in sets[:4]]
    assert errors[0] == "" and errors[1].startswith("NotRegistered")
    assert errors[2].startswith("RuntimeError: connection") and errors[3].startswith("SettingWeightsTooFast")


def test_hostile_window_at_scale(tmp_path: Path) -> None:
    with gauntlet_env():
        runner = make_runner(tmp_path / "demo", "honest:1")
    try:
        net = HostileNet(runner, HostileMix(peers=64, hostile=50))
        runner.publish(1)
        net.publish(1, hostile=False)
        runner.validate(1)
        runner.publish(2)
        net.publish(2, hostile=True)
        with rss_sampled() as rss:
            report = runner.validate(2)
        state = runner.round.ledger.window_state(2)
    finally:
        runner.round.ledger.engine.dispose()
    assert state == "committed"
    by_hotkey = {p.hotkey: p for p in report.peers}
    victim = by_hotkey[runner.network.peers[0].hotkey]
    assert (victim.status, victim.evaluation is not None) == ("ok", True)
    for p in net.peers:
        got = by_hotkey[p.hotkey]
        if p.kind == "honest":
            assert (got.status, got.evaluation is not None) == ("ok", True), got.detail
        else:
            assert (got.status, got.reason) == EXPECTED[p.kind], (p.kind, got.detail)
        if p.kind == "copy":
            assert got.evaluation is not None and got.hotkey not in report.selection.gather
    assert rss[1] - rss[0] < 256  # MB: 64 files of up to ~1 MB each, decoded one window at a time


def test_gauntlet_run_on_the_demo_chain_knows_its_own_hotkey(tmp_path: Path) -> None:
    with gauntlet_env():
        runner = make_runner(tmp_path / "demo", "honest:1")
    runner.round.ledger.engine.dispose()
    with gauntlet_env(config=str(runner.cfg.workdir / "gauntlet.toml")):
        link = chain_for(Settings())
        chain, hotkey = link.chain, link.hotkey
    assert isinstance(chain, LocalChain)
    assert (hotkey, chain.config.validator_hotkey) == (runner.validator_hotkey, runner.validator_hotkey)
