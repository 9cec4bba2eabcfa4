"""A small committed run for the evaluation-worker tests, and one Ray runtime per test session.

Windows 1-3 of a local subnet, checkpointed every 3 windows: window 2's replica plan is a checkpoint
plus one archived aggregate, window 3's a checkpoint alone, so both ways a replica advances are used.
The committed evaluations are what any worker must reproduce bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import astuple, replace
from pathlib import Path

import pytest

from scoring.loss_score import PeerEval
from storage.records import WORKER_TIMINGS, EvaluationRecord, WindowRecord
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers
from validator.workers.replica import Replica
from validator.workers.setup import worker_spec
from validator.workers.spec import WorkerSpec
from validator.workers.stats import WorkerStats, summary

SCENARIO = "honest:3,lazy:1,noise:1"
WINDOWS = range(1, 4)


def committed_run(
    workdir: Path,
    *,
    env: dict[str, str] | None = None,
    before: Callable[[DemoRunner, int], None] = lambda runner, window: None,
) -> DemoRunner:
    """Windows 1-3 of the scenario; `env` adds GAUNTLET_ settings, `before` runs before each window."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("GAUNTLET_")}
    for key in saved:
        del os.environ[key]
    added = {"GAUNTLET_CHECKPOINT_EVERY": "3"} | (env or {})
    os.environ.update(added)
    try:
        cfg = DemoConfig(parse_peers(SCENARIO), workdir=workdir, inner_steps=5, corpus_tokens=300_000)
        runner = DemoRunner(cfg)
        for w in WINDOWS:
            runner.publish(w)
            before(runner, w)
            runner.validate(w)
    finally:
        for key in added:
            del os.environ[key]
        os.environ.update(saved)
    return runner


def decided(runner: DemoRunner, window: int) -> tuple[object, ...]:
    """What a committed window decided, without wall-clock timings or the files' own bytes."""
    r = runner.round.ledger.window_detail(window)
    assert r is not None
    # payload digests, not the files' (sr25519 signatures are randomized, so a re-run's bytes differ)
    subs = sorted((s.hotkey, s.uid, s.status, s.reason, s.payload_digest) for s in r.submissions)
    evals = sorted((e.hotkey, losses(e)) for e in r.evaluations)
    ratings = sorted(repr(x) for x in r.ratings)
    chosen = sorted((x.hotkey, x.role, x.rank) for x in r.selections)
    header = (r.base_fingerprint, r.heldout_seed, r.config_digest, r.salvaged)
    return header, tuple(r.aggregate_digests), dict(r.clip_reference), subs, evals, ratings, chosen


def on_two_workers(record: WindowRecord) -> WindowRecord:
    """`record` as a validator on two GPU workers writes it: w1 was lost once and took one peer.
    (Listed out of order: the summary is recorded by worker name.)"""
    workers = [
        WorkerStats("w1", "gpu-b", 4343, "cuda:0", peers=1, seconds=1.25, failures=1),
        WorkerStats("w0", "gpu-a", 4242, "cuda:0", peers=2, seconds=3.0),
    ]
    return replace(record, timings={**record.timings, WORKER_TIMINGS: summary(workers)})


def spec_of(runner: DemoRunner) -> WorkerSpec:
    cfg = runner.round.cfg
    return worker_spec(runner.settings, runner.state.model.model.cfg, cfg.eval, cfg.check.codec)


def losses(ev: PeerEval | EvaluationRecord) -> tuple[float | int, ...]:
    """Everything an evaluation decides (its timings are wall clock, not results)."""
    return tuple(astuple(ev)[1:8])  # the uid or hotkey, then the losses, score, gain and indicator


def recorded(runner: DemoRunner, window: int) -> dict[int, tuple[float | int, ...]]:
    record = runner.round.ledger.window_detail(window)
    assert record is not None and record.evaluations
    uids = {s.hotkey: s.uid for s in record.submissions}
    return {uids[e.hotkey]: losses(e) for e in record.evaluations}


@pytest.fixture(scope="session")
def worker_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRunner:
    return committed_run(tmp_path_factory.mktemp("workers"))


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[None]:
    """A small local runtime shared by every test that needs one (no dashboard, no log forwarding)."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def replica_of(runner: DemoRunner) -> Replica:
    return Replica(spec_of(runner))


def undecodable(runner: DemoRunner, text: str) -> str:
    """The digest of bytes archived that no longer decode: a job on them raises (the peer's)."""
    return runner.round.ledger.archive.put(f"not a submission: {text}".encode())
