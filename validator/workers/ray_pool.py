"""One long-lived Ray actor per device, each holding a `Replica`; jobs go to whichever is free.

Faults: an actor that dies, or runs out of memory, has its job re-run on a fresh one (a job that keeps
doing that fails that peer, never the window); an actor silent past the deadline is killed and treated
the same way; an actor whose replica does not reach the validator's base fingerprint is replaced by a
fresh one; a job whose archived bytes could not be read is run again (the validator's storage, never
the peer's fault). The validator's own faults are capped per window: past the cap the pool gives up
(`WorkersLost`) and the round retries the window. Results do not depend on which actor ran a job:
every replica holds the same bits and evaluates as in-process.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
import structlog
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from validator.telemetry.metrics import Metrics
from validator.workers.pool import PoolResult, WorkersLost
from validator.workers.replica import ArchiveUnreadable, OutOfMemory, Replica, StaleReplica, WorkerInfo
from validator.workers.spec import WindowTask, WorkerJob, WorkerSpec

log = structlog.get_logger(__name__)


def connect(workers: int, address: str | None = None) -> None:
    """Join `address` (a running cluster: `ray start --head` / `ray start --address`) or start a
    local runtime with one CPU slot per worker. A runtime already started in this process is reused."""
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)


@dataclass(frozen=True, slots=True)
class PoolConfig:
    workers: int
    deadline_s: float = 600.0  # one peer's evaluation; past it the actor is abandoned as hung
    sync_deadline_s: float = 1800.0  # a fresh replica loads a checkpoint and replays aggregates
    max_attempts: int = 3  # a peer whose job killed this many workers is failed, not retried
    gpus_per_worker: float = 0.0  # 1 on GPU hosts: Ray pins each actor to its own device

    def __post_init__(self) -> None:
        if self.workers < 1 or self.max_attempts < 1 or min(self.deadline_s, self.sync_deadline_s) <= 0:
            raise ValueError("workers and max_attempts must be >= 1 and deadlines positive")


@dataclass(slots=True)
class _Call:
    slot: int
    job: WorkerJob | None  # None: a sync to the window's base
    started: float


@dataclass(slots=True)
class _Run:
    """One window's evaluation in progress: the calls in flight, the jobs waiting, how many workers
    each peer's job has ended, and what is settled so far."""

    task: WindowTask
    queue: deque[WorkerJob]
    inflight: dict[Any, _Call] = field(default_factory=dict)
    attempts: Counter[int] = field(default_factory=Counter)
    out: PoolResult = field(default_factory=PoolResult)


class RayPool:
    def __init__(
        self,
        spec: WorkerSpec,
        cfg: PoolConfig,
        *,
        metrics: Metrics | None = None,
        replica: type[Replica] = Replica,  # tests substitute a replica that hangs or crashes
    ) -> None:
        if not ray.is_initialized():
            raise RuntimeError("call workers.ray_pool.connect first")
        self.spec, self.cfg, self.metrics = spec, cfg, metrics
        self._cls = ray.remote(replica).options(
            num_cpus=1, num_gpus=cfg.gpus_per_worker, max_restarts=0, max_task_retries=0
        )
        self.actors: list[Any] = [self._cls.remote(spec) for _ in range(cfg.workers)]
        self.synced = [False] * cfg.workers
        self.placed: list[WorkerInfo | None] = [None] * cfg.workers  # each actor's host, pid, device
        self.faults = 0  # the validator's own faults this window (rebuilds, unreadable archive)

    @property
    def size(self) -> int:
        return len(self.actors)

    def pids(self) -> list[int]:
        return [info.pid for info in ray.get([a.info.remote() for a in self.actors])]

    def evaluate(self, task: WindowTask, jobs: Sequence[WorkerJob]) -> PoolResult:
        run = _Run(task, deque(jobs))
        out, queue, inflight = run.out, run.queue, run.inflight
        task_ref = ray.put(task)  # once per window: every job refers to it
        self.synced = [False] * self.size
        self.faults = 0
        for slot in range(self.size):
            self._sync(slot, run)
        while queue or any(c.job is not None for c in inflight.values()):
            busy = {c.slot for c in inflight.values()}
            for slot in range(self.size):
                if queue and self.synced[slot] and slot not in busy:
                    job = queue.popleft()
                    inflight[self.actors[slot].evaluate.remote(task_ref, job)] = _Call(slot, job, _now())
            if not inflight:  # unreachable while every slot syncs or works: never wait on nothing
                raise WorkersLost("no worker is syncing or evaluating")
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
            for ref in ready:
                self._settle(ref, inflight.pop(ref), run)
            for ref, call in list(inflight.items()):
                limit = self.cfg.deadline_s if call.job is not None else self.cfg.sync_deadline_s
                if _now() - call.started > limit:
                    del inflight[ref]
                    self._lost(call, "hung", run)
        return out

    def _sync(self, slot: int, run: _Run) -> None:
        run.inflight[self.actors[slot].sync.remote(run.task.plan)] = _Call(slot, None, _now())

    def _settle(self, ref: Any, call: _Call, run: _Run) -> None:
        name, out = f"w{call.slot}", run.out
        try:
            value = ray.get(ref, timeout=0)
        except (RayActorError, GetTimeoutError):
            return self._lost(call, "died", run)
        except RayTaskError as e:
            if isinstance(e.cause, StaleReplica):  # the pool's fault (a missed sync), not the peer's
                return self._lost(call, "died", run, peer=False)
            if call.job is None:
                return self._lost(call, "died", run)
            if isinstance(e.cause, ArchiveUnreadable):  # the actor is fine: the job again, after the rest
                out.lost(self.metrics, name, "archive")
                self._pool_fault("archive")
                run.queue.append(call.job)
                return None
            if isinstance(e.cause, OutOfMemory):  # a fresh actor's memory; charged, so it ends
                return self._lost(call, "oom", run)
            out.failed[call.job.uid] = f"{type(e.cause).__name__}: {e.cause}"[:300]
            out.lost(self.metrics, name, "job")
            return None
        except RayError:  # any other Ray failure (object lost, node died...): the worker is gone
            return self._lost(call, "died", run)
        if call.job is None:
            if value == run.task.plan.base:
                self.synced[call.slot] = True
                self._place(call.slot, out)
            else:
                log.warning("worker_fingerprint_mismatch", worker=name, got=str(value)[:12])
                self._lost(call, "fingerprint", run)
            return None
        out.done(self.metrics, name, call.job.uid, value)
        return None

    def _place(self, slot: int, out: PoolResult) -> None:
        """Note where the slot's actor runs (asked once per actor; it has just answered a sync)."""
        stats, info = out.worker(f"w{slot}"), self.placed[slot]
        if info is None:
            try:
                info = self.placed[slot] = ray.get(self.actors[slot].info.remote(), timeout=30.0)
            except (RayActorError, RayTaskError, GetTimeoutError):  # where it ran is only for display
                return
        stats.placed(info.host, info.pid, info.device)

    def _lost(self, call: _Call, kind: str, run: _Run, *, peer: bool = True) -> None:
        """Replace the slot's actor with a fresh one; its job, if any, goes back to the queue.

        A worker lost during a peer's job is charged to that peer (`peer`; its attempts end at
        `max_attempts`); any other loss (a sync, a wrong fingerprint, a stale replica) is the pool's
        and counts toward the window's cap on its own faults. Peers' losses must not: a few hostile
        peers would otherwise fail the whole window."""
        name, out, queue, attempts = f"w{call.slot}", run.out, run.queue, run.attempts
        log.warning("worker_replaced", worker=name, kind=kind, uid=None if call.job is None else call.job.uid)
        out.lost(self.metrics, name, kind)
        charged = peer and call.job is not None
        if not charged:
            self._pool_fault(kind)
        for ref, other in list(run.inflight.items()):  # whatever else it had queued will not come back
            if other.slot == call.slot:
                del run.inflight[ref]
                if other.job is not None:
                    queue.appendleft(other.job)
        if call.job is not None and not charged:
            queue.appendleft(call.job)
        elif call.job is not None:
            attempts[call.job.uid] += 1
            if attempts[call.job.uid] >= self.cfg.max_attempts:
                out.failed[call.job.uid] = f"its evaluation ended {attempts[call.job.uid]} workers ({kind})"
            else:
                queue.appendleft(call.job)
        ray.kill(self.actors[call.slot], no_restart=True)
        self.actors[call.slot] = self._cls.remote(self.spec)
        self.synced[call.slot], self.placed[call.slot] = False, None
        self._sync(call.slot, run)

    def _pool_fault(self, kind: str) -> None:
        self.faults += 1
        if self.faults > 3 * self.size:  # every replica failing is the validator's fault
            raise WorkersLost(f"{self.faults} faults of the validator's own in one window (last: {kind})")

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors, self.placed = [], []


def _now() -> float:
    return time.monotonic()
