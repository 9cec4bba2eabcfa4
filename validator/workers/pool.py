"""The pool contract, and its in-process form: one replica in the validator's own process."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scoring.loss_score import PeerEval
from validator.metrics import Metrics
from validator.workers.replica import Replica
from validator.workers.spec import WindowTask, WorkerJob


class FingerprintMismatch(RuntimeError):
    """A freshly built replica does not reach the validator's base: storage and model disagree."""


class WorkersLost(RuntimeError):
    """Workers keep failing in one window: the validator's fault (cluster, storage), not a peer's."""


@dataclass(frozen=True, slots=True)
class PoolResult:
    """Evaluations by uid, and the peers whose job raised (or kept killing workers), with why."""

    evals: dict[int, PeerEval] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)

    def ordered(self, jobs: Sequence[WorkerJob]) -> list[PeerEval]:
        return [self.evals[j.uid] for j in jobs if j.uid in self.evals]


class WorkerPool(Protocol):
    @property
    def size(self) -> int: ...
    def evaluate(self, task: WindowTask, jobs: Sequence[WorkerJob]) -> PoolResult: ...
    def close(self) -> None: ...


def observe(metrics: Metrics | None, worker: str, ev: PeerEval) -> None:
    if metrics is not None:
        metrics.worker_peers.labels(worker=worker).inc()
        metrics.worker_seconds.labels(worker=worker).observe(ev.timings.total_s)


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
        for job in jobs:
            try:
                ev = self.replica.evaluate(task, job)
            except Exception as e:  # the peer's job alone fails, as in-process evaluation isolates it
                out.failed[job.uid] = f"{type(e).__name__}: {e}"[:300]
                if self.metrics is not None:
                    self.metrics.worker_failures.labels(worker="local", kind="job").inc()
                continue
            out.evals[job.uid] = ev
            observe(self.metrics, "local", ev)
        return out

    def close(self) -> None:
        return None
