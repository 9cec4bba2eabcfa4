"""One model replica that evaluates peers exactly as the in-process evaluation does (no Ray here).

The replica advances itself: each window it is told the plan to reach the window's base (checkpoint
key plus the archived aggregates since) and takes the shortest way there: nothing when it is already
there, the last window's aggregate when it is one window behind, the whole plan otherwise. It reports
the base fingerprint it reached; the caller compares it with its own.
"""

from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from scoring.data import Dataset, batches, heldout_from_seed
from scoring.eval_plan import own_batches
from scoring.loss_score import (
    Batches,
    PagedLoss,
    PeerEval,
    PeerJob,
    deterministic,
    evaluate_peers,
    paged_loss,
)
from scoring.model import build_model, select_device
from storage.archive import SubmissionArchive
from storage.checkpoints import AggregateStep, load_checkpoint
from validator.state.global_model import (
    GlobalModel,
    load_model_bytes,
    replay_aggregates,
    stored_archived,
)
from validator.workers.spec import ReplicaPlan, WindowTask, WorkerJob, WorkerSpec


class StaleReplica(RuntimeError):
    """A job arrived for a window or base the replica is not at (the pool syncs before each window)."""


class ArchiveUnreadable(RuntimeError):
    """The validator's own archive did not give back a peer's bytes (missing, corrupt, I/O): never
    the peer's fault, whose bytes were judged and archived by the validator itself."""


class OutOfMemory(RuntimeError):
    """The replica's device or host ran out of memory during a peer's job. Updates have the model's
    shapes, so this is most likely the worker's state; a fresh worker tries again."""


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    host: str
    pid: int
    device: str


def placement(devices: tuple[str, ...]) -> torch.device:
    """The device of a replica. Several devices (one replica sharded over GPUs) are the next step;
    until then they are refused here, before any weights are loaded."""
    if len(devices) != 1:
        raise ValueError(f"a replica spans one device for now, not {len(devices)}: {devices}")
    return select_device(devices[0])


class Replica:
    def __init__(self, spec: WorkerSpec) -> None:
        if spec.threads is not None:
            torch.set_num_threads(spec.threads)  # N workers on N cores must not oversubscribe them
        self.spec = spec
        self.device = placement(spec.devices)
        self.blobs = spec.blobs.open()
        self.archive = SubmissionArchive(self.blobs)
        self.dataset = Dataset.open(spec.dataset_path, seq_len=spec.seq_len)
        # Weights come from a checkpoint at the first sync; until then the replica is at no window.
        self.state = GlobalModel(build_model(spec.model, device=self.device), base="", window=-1)
        # the window's held-out batches and their loss before any update, by (seed, position)
        self._heldout: tuple[tuple[str, int, str], Batches, PagedLoss] | None = None

    def info(self) -> WorkerInfo:
        return WorkerInfo(socket.gethostname(), os.getpid(), str(self.device))

    @property
    def position(self) -> tuple[int, str]:
        return self.state.window, self.state.base

    def sync(self, plan: ReplicaPlan) -> str:
        """Move to the start of `plan.window`; returns the base fingerprint reached."""
        if self.position == (plan.window, plan.base):
            return self.state.base
        last = plan.steps[-1] if plan.steps else None
        if last is not None and self.position == (last.window, last.base_fingerprint):
            self._advance([last])
        else:
            self._load(plan)
        return self.state.base

    def _load(self, plan: ReplicaPlan) -> None:
        self.state.window, self.state.base = -1, ""  # a failure midway leaves no believable position
        load_model_bytes(self.state.model, load_checkpoint(store=self.blobs, record=plan.checkpoint))
        self.state.window, self.state.base = plan.checkpoint.window, plan.checkpoint_base
        self._advance(plan.steps)

    def _advance(self, steps: tuple[AggregateStep, ...] | list[AggregateStep]) -> None:
        """Apply stored windows' aggregates the way a restarted validator replays them."""
        for step in steps:
            # read one at a time as replay_aggregates spools them: never every blob in memory at once
            blobs = (self.archive.get(d) for d in step.content_digests if d is not None)
            try:
                replay_aggregates(
                    self.state,
                    [(step.aggregate_digests, blobs, step.clip_reference, step.weights)],
                    outer_lr=self.spec.outer_lr,
                    codec=self.spec.codec,
                )
            except BaseException:
                # the weights may be half-updated: no position is believable until a reload
                self.state.window, self.state.base = -1, ""
                raise

    def evaluate(self, task: WindowTask, job: WorkerJob) -> PeerEval:
        """LossScore of one peer, through the same `evaluate_peers` as the in-process evaluation."""
        if job.window != task.window or self.position != (task.window, task.plan.base):
            raise StaleReplica(f"replica at {self.position}, job for window {job.window}")
        try:
            data = self.archive.get(job.content_digest)
        except Exception as e:
            raise ArchiveUnreadable(f"{type(e).__name__}: {e}"[:300]) from e
        try:
            load = partial(own_batches, self.dataset, job.window, job.uid, task.heldout_seed, self.spec.eval)
            heldout, before = self._heldout_of(task.heldout_seed)
            # from a file, a parameter at a time, as the validator's own evaluation reads its spooled
            # downloads: decoded whole, an update took 8-11 times its file in this worker's memory
            with tempfile.TemporaryDirectory(prefix="gauntlet-job-") as folder:
                path = Path(folder) / "update.safetensors"
                update = stored_archived(data, path, self.state.model, self.spec.codec)
                del data
                results = evaluate_peers(
                    self.state.model, [PeerJob(job.uid, update, load)], heldout, reference=task.reference,
                    cfg=self.spec.eval.loss, before=before,
                )  # fmt: skip
        except (torch.OutOfMemoryError, MemoryError) as e:  # the model is restored (finally) before this
            raise OutOfMemory(f"{type(e).__name__}: {e}"[:300]) from e
        return results[0]

    def _heldout_of(self, seed: str) -> tuple[Batches, PagedLoss]:
        """The held-out batches and the model's losses on them before any update, once per window.

        Measured here, on this replica's device, not taken from the validator: a peer's score compares
        losses, and both sides must come from the same device and kernels (on CPU the validator's
        value is reproduced bit for bit: same weights, batches and deterministic kernels)."""
        key = (seed, *self.position)
        if self._heldout is None or self._heldout[0] != key:
            cfg = self.spec.eval
            pages = heldout_from_seed(seed, n_pages=cfg.heldout_pages, dataset=self.dataset)
            data = batches(self.dataset, pages, cfg.batch_size)
            with deterministic(self.device):  # as the validator's `heldout`
                self._heldout = (key, data, paged_loss(self.state.model, data))
        return self._heldout[1], self._heldout[2]
