"""Evaluation workers without Ray: a replica reproduces the committed evaluations bit for bit."""

from __future__ import annotations

import math
import os
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
import torch

from scoring.loss_score import PeerEval
from storage.records import WORKER_TIMINGS
from tests.worker_fixtures import WINDOWS, losses, recorded, replica_of, spec_of, undecodable
from validator.demo.runner import DemoRunner
from validator.round.loop import Judging, Round, WindowState
from validator.service import _reconnect, serve
from validator.state.ledger import Ledger
from validator.telemetry.metrics import Metrics
from validator.workers import replica as replica_module
from validator.workers.pool import FingerprintMismatch, LocalPool, PoolResult, WorkerPool, WorkersLost
from validator.workers.remote import RemoteEvaluation, plan_for, recorded_window
from validator.workers.replica import Replica, placement
from validator.workers.setup import _check_fits, start_pool, worker_spec
from validator.workers.spec import BlobSpec, WorkerJob
from validator.workers.stats import IN_PROCESS


def test_a_replica_reproduces_every_committed_window(
    worker_run: DemoRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    replica = replica_of(worker_run)
    loads: list[int] = []
    load = Replica._load
    monkeypatch.setattr(Replica, "_load", lambda self, plan: (loads.append(plan.window), load(self, plan)))
    metrics = Metrics()
    pool = LocalPool(replica, metrics)
    for window in WINDOWS:
        task, jobs = recorded_window(worker_run.round.ledger, window)
        # the replica measures the baseline loss itself: the validator's value is not needed
        out = pool.evaluate(replace(task, loss_before=math.nan), jobs)
        assert not out.failed
        assert {uid: losses(ev) for uid, ev in out.evals.items()} == recorded(worker_run, window)
        local = out.workers["local"]
        assert (local.peers, local.failures, local.pid, local.device) == (len(jobs), 0, os.getpid(), "cpu")
        assert local.seconds == sum(ev.timings.total_s for ev in out.evals.values())
    # window 2 is one archived aggregate after window 1: applied, not reloaded from the checkpoint
    assert loads == [1, 3]
    assert replica.position == (3, worker_run.round.ledger.window_detail(3).base_fingerprint)  # type: ignore[union-attr]
    assert metrics.worker_peers.labels(worker="local")._value.get() == sum(
        len(recorded(worker_run, w)) for w in WINDOWS
    )


def test_a_replica_that_cannot_reach_the_base_is_refused(worker_run: DemoRunner) -> None:
    task, jobs = recorded_window(worker_run.round.ledger, 2)
    wrong = replace(task, plan=replace(task.plan, base="0" * 64))
    with pytest.raises(FingerprintMismatch):
        LocalPool(replica_of(worker_run)).evaluate(wrong, jobs)


def test_a_job_that_raises_fails_its_peer_only(worker_run: DemoRunner) -> None:
    task, jobs = recorded_window(worker_run.round.ledger, 2)
    broken = WorkerJob(2, 77, undecodable(worker_run, "77"))
    out = LocalPool(replica_of(worker_run)).evaluate(task, [*jobs, broken])
    assert set(out.failed) == {77} and "no longer decodes" in out.failed[77]
    assert {uid: losses(ev) for uid, ev in out.evals.items()} == recorded(worker_run, 2)


def test_an_archive_that_cannot_give_bytes_back_is_the_validators_fault(worker_run: DemoRunner) -> None:
    """Bytes the validator judged and archived itself: missing or corrupt, no peer is charged."""
    task, jobs = recorded_window(worker_run.round.ledger, 2)
    missing = WorkerJob(2, 77, "ab" * 32)  # nothing archived under this key
    with pytest.raises(WorkersLost, match="KeyError"):
        LocalPool(replica_of(worker_run)).evaluate(task, [*jobs, missing])


def test_a_worker_reads_a_peers_update_from_a_file(
    worker_run: DemoRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each job's archived bytes go to a file and are read a parameter at a time, as the validator's
    own evaluation reads its spooled downloads (decoded whole, an update took 8-11x its file), with
    the same evaluation to the bit; the file is gone after the job."""
    task, jobs = recorded_window(worker_run.round.ledger, 2)
    seen: list[Path] = []
    stored = replica_module.stored_archived

    def spy(data: bytes, path: Path, *args: object) -> object:
        seen.append(path)
        return stored(data, path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(replica_module, "stored_archived", spy)
    out = LocalPool(replica_of(worker_run)).evaluate(task, jobs)
    assert not out.failed and {u: losses(ev) for u, ev in out.evals.items()} == recorded(worker_run, 2)
    assert len(seen) == len(jobs) and not any(p.exists() for p in seen)


def test_a_device_out_of_memory_is_reported_as_such(
    worker_run: DemoRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one process there is no fresh worker to try again: the peer's job fails, named as memory
    (on Ray workers the pool runs it again on a fresh actor: tests/test_workers_ray.py)."""
    task, jobs = recorded_window(worker_run.round.ledger, 2)

    def out_of_memory(*args: object, **kwargs: object) -> list[PeerEval]:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(replica_module, "evaluate_peers", out_of_memory)
    out = LocalPool(replica_of(worker_run)).evaluate(task, jobs[:1])
    assert out.failed[jobs[0].uid].startswith("OutOfMemory: OutOfMemoryError")


def test_a_job_for_another_window_is_refused_before_any_work(worker_run: DemoRunner) -> None:
    task, jobs = recorded_window(worker_run.round.ledger, 2)
    out = LocalPool(replica_of(worker_run)).evaluate(task, [replace(jobs[0], window=3)])
    assert "StaleReplica" in out.failed[jobs[0].uid]


def test_every_peer_failing_is_the_validators_fault(worker_run: DemoRunner) -> None:
    ledger = worker_run.round.ledger
    task, _ = recorded_window(ledger, 2)
    evaluate = RemoteEvaluation(LocalPool(replica_of(worker_run)), ledger)
    bad = [(5, undecodable(worker_run, "5")), (6, undecodable(worker_run, "6"))]
    with pytest.raises(RuntimeError, match="failed for all 2 peers"):
        evaluate(
            window=2, base=task.plan.base, heldout_seed=task.heldout_seed, loss_before=task.loss_before,
            reference=task.reference, peers=bad,
        )  # fmt: skip
    evals, failed, workers = evaluate(
        window=2, base=task.plan.base, heldout_seed=task.heldout_seed, loss_before=task.loss_before,
        reference=task.reference, peers=bad[:1],
    )  # fmt: skip
    assert evals == [] and set(failed) == {5}
    assert [(w.name, w.peers, w.failures) for w in workers] == [("local", 0, 1)]


def test_the_in_process_round_records_itself_as_one_worker(worker_run: DemoRunner) -> None:
    """The demo evaluates in the validator's process: each window records that one worker, with the
    peers it evaluated and their mean LossScore seconds, for the API and dashboard to show."""
    for window in WINDOWS:
        record = worker_run.round.ledger.window_detail(window)
        assert record is not None
        (worker,) = record.timings[WORKER_TIMINGS]
        assert worker["name"] == IN_PROCESS and worker["pid"] == os.getpid() and worker["device"] == "cpu"
        assert (worker["peers"], worker["failures"]) == (len(record.evaluations), 0)
        per_peer = sum(e.timings["total_s"] for e in record.evaluations) / len(record.evaluations)
        assert worker["seconds_per_peer"] == pytest.approx(per_peer, abs=1e-5)


def test_plans_lead_from_the_nearest_checkpoint(worker_run: DemoRunner) -> None:
    ledger = worker_run.round.ledger
    base2 = ledger.window_detail(2).base_fingerprint  # type: ignore[union-attr]
    plan = plan_for(ledger, 2, base2)
    assert plan.checkpoint.window == 1 and [s.window for s in plan.steps] == [1]
    assert plan.checkpoint_base == ledger.window_detail(1).base_fingerprint  # type: ignore[union-attr]
    assert plan_for(ledger, 3, "f" * 64).steps == ()


def test_one_replica_spans_one_device_for_now() -> None:
    assert placement(("cpu",)).type == "cpu"
    with pytest.raises(ValueError, match="one device"):
        placement(("cuda:0", "cuda:1"))
    with pytest.raises(ValueError, match="exactly one"):
        BlobSpec()


def test_pool_results_keep_the_jobs_order(worker_run: DemoRunner) -> None:
    task, jobs = recorded_window(worker_run.round.ledger, 3)
    out = LocalPool(Replica(spec_of(worker_run))).evaluate(task, list(reversed(jobs)))
    assert [e.uid for e in PoolResult(out.evals).ordered(jobs)] == [j.uid for j in jobs]


def test_settings_choose_in_process_or_workers(worker_run: DemoRunner) -> None:
    s = worker_run.settings
    spec = spec_of(worker_run)
    assert start_pool(s, spec) is None  # eval_workers = 0: the in-process default
    assert spec.blobs.root is not None and Path(spec.blobs.root) == (Path(s.workdir) / "blobs").resolve()
    with pytest.raises(ValueError, match="eval_workers is 0"):
        type(s).model_validate(s.model_dump() | {"eval_ray_address": "auto"})
    with pytest.raises(ValueError, match="dataset_path"):
        worker_spec(s.model_copy(update={"dataset_path": None}), spec.model, spec.eval, spec.codec)


class _ClosedPool(LocalPool):
    """A pool that only records that it was closed (a Ray pool would free its actors)."""

    def __init__(self, name: str, closed: list[str]) -> None:
        self.name, self.closed = name, closed

    def close(self) -> None:
        self.closed.append(self.name)


def test_a_replaced_or_stopped_round_closes_its_workers() -> None:
    closed: list[str] = []
    fetcher = object()  # kept across a reconnect (validator/service.py): the same in both

    def round_of(name: str) -> Round:
        remote = RemoteEvaluation(cast(WorkerPool, _ClosedPool(name, closed)), cast(Ledger, None))
        engine = SimpleNamespace(dispose=lambda: None)
        lock = SimpleNamespace(release=lambda: None)
        fake = SimpleNamespace(
            ledger=SimpleNamespace(engine=engine),
            judging=Judging(remote=remote),
            weigher=SimpleNamespace(lock=lock, led_at=None),
            fetcher=fetcher,
            cfg=SimpleNamespace(window=SimpleNamespace(blocks_per_window=10)),
        )
        return cast(Round, fake)

    old, new, state = round_of("old"), round_of("new"), cast(WindowState, None)
    got, _ = _reconnect(old, state, lambda r, s: (new, s), threading.Event(), 0.0)
    assert got is new and closed == ["old"]  # the rebuilt round's workers replace the old ones
    stop = threading.Event()
    stop.set()
    assert serve(new, state, stop=stop, reconnect=lambda r, s: (r, s)) == 0
    assert closed == ["old", "new"]


def test_a_pool_larger_than_the_cluster_is_refused_at_start() -> None:
    _check_fits(2, 2.0, 16.0)  # a GPU each
    _check_fits(2, None, 2.0)  # a CPU slot each
    with pytest.raises(ValueError, match="2 GPUs"):
        _check_fits(3, 2.0, 16.0)
    with pytest.raises(ValueError, match="2 CPU slots"):
        _check_fits(3, None, 2.0)
