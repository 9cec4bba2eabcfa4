"""The evaluate stage on a worker pool: the validator sends keys and seeds, workers send evaluations.

`plan_for` reads from the database how a replica reaches a window's base; `RemoteEvaluation` is what
the round calls instead of evaluating in its own process; `recorded_window` rebuilds a committed
window's task from storage (benchmarks and tests compare what workers compute with what was stored).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scoring.loss_score import PeerEval
from storage.checkpoints import rebuild_plan
from storage.db import run_in_transaction
from validator.state.ledger import Ledger
from validator.workers.pool import WorkerPool
from validator.workers.spec import ReplicaPlan, WindowTask, WorkerJob
from validator.workers.stats import WorkerStats


class WorkerJobFailed(RuntimeError):
    """A peer's evaluation raised on a worker (or kept killing workers): that peer's internal error."""


def plan_for(ledger: Ledger, window: int, base: str) -> ReplicaPlan:
    """The nearest checkpoint at or before `window` and the committed aggregates since."""
    plan = run_in_transaction(
        ledger.engine, lambda s: rebuild_plan(session=s, window=window), config=ledger.db
    )
    # a checkpoint's base is the recorded base of its own window, or `base` when that is `window`
    checkpoint_base = plan.steps[0].base_fingerprint if plan.steps else base
    return ReplicaPlan(window, base, plan.checkpoint, checkpoint_base, plan.steps)


class RemoteEvaluation:
    def __init__(self, pool: WorkerPool, ledger: Ledger) -> None:
        self.pool, self.ledger = pool, ledger

    def __call__(
        self,
        *,
        window: int,
        base: str,
        heldout_seed: str,
        loss_before: float,
        reference: Mapping[str, float],
        peers: Sequence[tuple[int, str]],
    ) -> tuple[list[PeerEval], dict[int, Exception], list[WorkerStats]]:
        """Evaluations of `peers` (uid, archive key) in their order, the peers that failed, and what
        each worker did.

        As in-process: when every one of several peers fails, the fault is the validator's and it
        raises (the round retries the window) instead of blaming them all."""
        if not base:
            raise ValueError("evaluation on workers needs the window's base fingerprint")
        task = WindowTask(plan_for(self.ledger, window, base), heldout_seed, loss_before, dict(reference))
        jobs = [WorkerJob(window, uid, digest) for uid, digest in peers]
        result = self.pool.evaluate(task, jobs)
        failed: dict[int, Exception] = {u: WorkerJobFailed(why) for u, why in result.failed.items()}
        if len(jobs) > 1 and len(failed) == len(jobs):
            raise RuntimeError(f"evaluation failed for all {len(jobs)} peers on workers") from next(
                iter(failed.values())
            )
        return result.ordered(jobs), failed, list(result.workers.values())

    @property
    def size(self) -> int:
        """Workers evaluating at once: the window affords this many times more peers."""
        return self.pool.size

    def close(self) -> None:
        self.pool.close()


def recorded_window(ledger: Ledger, window: int) -> tuple[WindowTask, list[WorkerJob]]:
    """A committed window's evaluation as a task: its base, held-out seed, clip reference and the
    archived submissions of the peers it evaluated."""
    record = ledger.window_detail(window)
    if record is None or not record.evaluations:
        raise LookupError(f"window {window} is not committed with evaluations")
    subs = {s.hotkey: s for s in record.submissions}
    jobs = []
    for ev in record.evaluations:
        digest = subs[ev.hotkey].content_digest
        if digest is None:
            raise LookupError(f"window {window}: {ev.hotkey} was evaluated but is not archived")
        jobs.append(WorkerJob(window, subs[ev.hotkey].uid, digest))
    reference = {str(k): float(v) for k, v in record.clip_reference.items()}
    loss_before = record.evaluations[0].loss_rand_before
    plan = plan_for(ledger, window, record.base_fingerprint)
    return WindowTask(plan, record.heldout_seed, loss_before, reference), jobs
