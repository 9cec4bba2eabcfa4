"""The pool contract, and its in-process form: one replica in the validator's own process."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scoring.loss_score import PeerEval
from validator.telemetry.metrics import Metrics
from validator.workers.replica import ArchiveUnreadable, Replica
from validator.workers.spec import WindowTask, WorkerJob
from validator.workers.stats import WorkerStats

LOCAL = "local"  # the one worker of a `LocalPool`


class FingerprintMismatch(RuntimeError):
    """A freshly built replica does not reach the validator's base: storage and model disagree."""


class WorkersLost(RuntimeError):
    """Workers keep failing in one window: the validator's fault (cluster, storage), not a peer's."""


@dataclass(frozen=True, slots=True)
class PoolResult:
    """Evaluations by uid, the peers whose job raised (or kept killing workers) with why, and what
    each worker did (by worker name)."""

    evals: dict[int, PeerEval] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    workers: dict[str, WorkerStats] = field(default_factory=dict)

    def worker(self, name: str) -> WorkerStats:
        return self.workers.setdefault(name, WorkerStats(name))

    def done(self, metrics: Metrics | None, worker: str, uid: int, ev: PeerEval) -> None:
        """`ev` is the peer's evaluation, by `worker`: kept, counted and observed."""
        self.evals[uid] = ev
        self.worker(worker).evaluated(ev.timings.total_s)
        if metrics is not None:
            metrics.worker_peers.labels(worker=worker).inc()
            metrics.worker_seconds.labels(worker=worker).observe(ev.timings.total_s)

    def lost(self, metrics: Metrics | None, worker: str, kind: str) -> None:
        """A failure of `worker`: `job` (a peer's evaluation raised), died, hung, oom, fingerprint or
        archive (a peer's archived bytes could not be read)."""
        self.worker(worker).failures += 1
        if metrics is not None:
            metrics.worker_failures.labels(worker=worker, kind=kind).inc()

    def ordered(self, jobs: Sequence[WorkerJob]) -> list[PeerEval]:
        return [self.evals[j.uid] for j in jobs if j.uid in self.evals]


class WorkerPool(Protocol):
    @property
    def size(self) -> int: ...
    def evaluate(self, task: WindowTask, jobs: Sequence[WorkerJob]) -> PoolResult: ...
    def close(self) -> None: ...


class LocalPool:
    """The pool contract without Ray: jobs one after another on one replica in this process."""

    def __init__(self, replica: Replica, metrics: Metrics | None = None) -> None:
        self.replica, self.metrics = replica, metrics

    @property
    def size(self) -> int:
        return 1

    def evaluate(self, task: WindowTask, jobs: Sequence[WorkerJob]) -> PoolResult:
        if self.replica.sync(task.plan) != task.plan.base:
            raise FingerprintMismatch(f"the replica does not reach base {task.plan.base[:12]}")
        out = PoolResult()
        info = self.replica.info()
        out.worker(LOCAL).placed(info.host, info.pid, info.device)
        for job in jobs:
            try:
                ev = self.replica.evaluate(task, job)
            except ArchiveUnreadable as e:  # the validator's own storage: the round retries the window
                raise WorkersLost(f"peer {job.uid}'s archived submission: {e}") from e
            except Exception as e:  # the peer's job alone fails, as in-process evaluation isolates it
                out.failed[job.uid] = f"{type(e).__name__}: {e}"[:300]
                out.lost(self.metrics, LOCAL, "job")
                continue
            out.done(self.metrics, LOCAL, job.uid, ev)
        return out

    def close(self) -> None:
        return None
