"""Evaluation on Ray workers: two actors commit what one process computes, through faults.

A worker killed with SIGKILL mid-window, or silent past the deadline, has its peer re-run on
another; a peer whose job keeps killing workers fails alone. Each case compares the evaluations with
the committed window bit for bit, and checks from the metrics that the fault really happened.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from scoring.loss_score import PeerEval
from storage.records import WORKER_TIMINGS
from tests.worker_fixtures import (
    WINDOWS,
    committed_run,
    decided,
    losses,
    recorded,
    spec_of,
    undecodable,
)
from validator.demo.runner import DemoRunner
from validator.telemetry.metrics import Metrics
from validator.workers.pool import WorkersLost
from validator.workers.replica import OutOfMemory, Replica
from validator.workers.spec import WindowTask, WorkerJob, WorkerSpec

pytest.importorskip("ray")
from validator.workers.ray_pool import PoolConfig, RayPool
from validator.workers.remote import recorded_window


def _once(replica: Replica, name: str) -> bool:
    """True the first time in a test run (a marker beside the dataset, seen by every worker)."""
    marker = Path(replica.spec.dataset_path).parent / name
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


class KilledOnce(Replica):
    def evaluate(self, task: WindowTask, job: WorkerJob) -> PeerEval:
        if _once(self, "killed-once"):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().evaluate(task, job)


class EveryFaultOnce(Replica):
    """Each way a worker is lost, once in the window, each on a peer of its own (the window's first
    four uids, `TARGETS`): its process killed, silent past the deadline, out of memory, its archive
    read failing (the bucket did not answer: the validator's fault)."""

    TARGETS = (1, 2, 3, 4)

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        read, self.failing_read = self.archive.get, False

        def get(digest: str) -> bytes:
            if self.failing_read and _once(self, "archive-once"):
                raise OSError("the bucket did not answer")
            return read(digest)

        self.archive.get = get  # type: ignore[method-assign]

    def evaluate(self, task: WindowTask, job: WorkerJob) -> PeerEval:
        killed, hung, oom, archive = self.TARGETS
        if job.uid == killed and _once(self, "killed-once"):
            os.kill(os.getpid(), signal.SIGKILL)
        if job.uid == hung and _once(self, "hung-once"):
            time.sleep(3600)
        if job.uid == oom and _once(self, "oom-once"):
            raise OutOfMemory("OutOfMemoryError: CUDA out of memory")
        self.failing_read = job.uid == archive
        return super().evaluate(task, job)


class KilledByUid2(Replica):
    def evaluate(self, task: WindowTask, job: WorkerJob) -> PeerEval:
        if job.uid == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().evaluate(task, job)


def _failures(metrics: Metrics, kind: str) -> float:
    return sum(
        s.value
        for m in metrics.worker_failures.collect()
        for s in m.samples
        if s.name.endswith("_total") and s.labels.get("kind") == kind
    )


def _pool(run: DemoRunner, metrics: Metrics, replica: type[Replica] = Replica, **cfg: float) -> RayPool:
    return RayPool(spec_of(run), PoolConfig(workers=2, **cfg), metrics=metrics, replica=replica)  # type: ignore[arg-type]


def test_two_workers_commit_what_one_process_computes(ray_runtime: None, worker_run: DemoRunner) -> None:
    metrics = Metrics()
    pool = _pool(worker_run, metrics)
    try:
        for window in WINDOWS:
            out = pool.evaluate(*recorded_window(worker_run.round.ledger, window))
            assert not out.failed
            assert {uid: losses(ev) for uid, ev in out.evals.items()} == recorded(worker_run, window)
            assert sorted(out.workers) == ["w0", "w1"]  # both synced, placed and counted
            assert sum(w.peers for w in out.workers.values()) == len(out.evals)
        assert len(set(pool.pids())) == 2
        assert sorted(w.pid for w in out.workers.values()) == sorted(pool.pids())
        task, _ = recorded_window(worker_run.round.ledger, 3)
        broken = pool.evaluate(task, [WorkerJob(3, 77, undecodable(worker_run, "77"))])
        assert not broken.evals and "no longer decodes" in broken.failed[77]
        # nothing archived under this key: the validator's storage, run again until the pool gives up
        with pytest.raises(WorkersLost, match="archive"):
            pool.evaluate(task, [WorkerJob(3, 78, "ab" * 32)])
        assert pool.faults == 3 * pool.size + 1
    finally:
        pool.close()
    done = {w: metrics.worker_peers.labels(worker=w)._value.get() for w in ("w0", "w1")}
    assert sum(done.values()) == sum(len(recorded(worker_run, w)) for w in WINDOWS)
    assert min(done.values()) > 0  # both workers took jobs
    assert _failures(metrics, "died") == _failures(metrics, "hung") == 0
    assert _failures(metrics, "job") == 1
    assert _failures(metrics, "archive") == 3 * 2 + 1


# The hang deadline leaves room for a loaded machine (2 cores shared with other jobs): a peer here takes
# well under a second alone, but a fresh worker's first one can take many times that.
# A worker's own fault (its archive read, its memory) is no peer's: the job runs again, the archive's on
# the same actor (counted against the window's cap on the validator's faults), the rest on a fresh one.
# Every kind in one window, each on a peer of its own: one pool and one deadline's wait, not four.
# The deadline now also covers three retries on fresh workers: 45 s, not the hang case's own 30 s.
def test_a_lost_worker_of_any_kind_changes_nothing_committed(
    ray_runtime: None, worker_run: DemoRunner
) -> None:
    metrics = Metrics()
    task, jobs = recorded_window(worker_run.round.ledger, 2)
    assert set(EveryFaultOnce.TARGETS) <= {j.uid for j in jobs}
    pool = _pool(worker_run, metrics, EveryFaultOnce, deadline_s=45)
    try:
        out = pool.evaluate(task, jobs)
    finally:
        pool.close()
    assert not out.failed
    assert {uid: losses(ev) for uid, ev in out.evals.items()} == recorded(worker_run, 2)
    assert [_failures(metrics, kind) for kind in ("died", "hung", "oom", "archive")] == [1, 1, 1, 1]
    assert pool.faults == 1  # the archive's read alone is the validator's


def test_a_peer_that_keeps_killing_workers_fails_alone(ray_runtime: None, worker_run: DemoRunner) -> None:
    task, jobs = recorded_window(worker_run.round.ledger, 2)
    assert 2 in {j.uid for j in jobs}
    metrics = Metrics()
    pool = _pool(worker_run, metrics, KilledByUid2, max_attempts=2)
    try:
        out = pool.evaluate(task, jobs)
    finally:
        pool.close()
    assert set(out.failed) == {2} and "ended 2 workers" in out.failed[2]
    expected = {u: v for u, v in recorded(worker_run, 2).items() if u != 2}
    assert {uid: losses(ev) for uid, ev in out.evals.items()} == expected
    assert _failures(metrics, "died") == 2
    assert pool.faults == 0  # charged to the peer: hostile peers cannot spend the validator's cap


def test_the_demo_on_two_workers_commits_the_same_windows_through_a_kill(
    ray_runtime: None, worker_run: DemoRunner, tmp_path: Path
) -> None:
    """The round on `eval_workers = 2` commits windows 1-3 exactly as the in-process run did, with
    the worker that takes window 2's first peer killed by SIGKILL while it holds it."""
    metrics: list[Metrics] = []

    def kill_in_window_2(runner: DemoRunner, window: int) -> None:
        remote = runner.round.judging.remote
        assert remote is not None  # the round evaluates on workers
        if window == 2:
            remote.pool.close()
            metrics.append(Metrics())
            remote.pool = _pool(runner, metrics[0], KilledOnce)

    run = committed_run(tmp_path / "on-workers", env={"GAUNTLET_EVAL_WORKERS": "2"}, before=kill_in_window_2)
    assert [decided(run, w) for w in WINDOWS] == [decided(worker_run, w) for w in WINDOWS]
    assert _failures(metrics[0], "died") == 1
    seen: set[str] = set()
    for window in WINDOWS:  # each window records its workers, the peers they took and the kill
        record = run.round.ledger.window_detail(window)
        assert record is not None
        workers = record.timings[WORKER_TIMINGS]
        # a worker that took no peer in a window is not listed: on a loaded machine one worker
        # sometimes takes a small window's every peer before the other is ready
        names = [w["name"] for w in workers]
        assert names == sorted(names) and set(names) <= {"w0", "w1"} and all(w["pid"] for w in workers)
        assert sum(w["peers"] for w in workers) == len(record.evaluations)
        assert sum(w["failures"] for w in workers) == (1 if window == 2 else 0)
        seen |= set(names)
    assert seen == {"w0", "w1"}
