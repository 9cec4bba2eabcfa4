"""What crosses the wire between the validator and its workers: keys, seeds and small configs.

No model weights and no peer bytes travel through Ray: a worker reads checkpoints and archived
submissions itself (a filesystem every host mounts at the same path, or the archive's S3 bucket), so a
window costs the object store a few kilobytes however large the model is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from scoring.consensus import OUTER_LR
from scoring.eval_plan import EvalConfig
from scoring.model import ModelConfig
from scoring.wire import CodecConfig
from storage.archive import BlobStore, LocalBlobStore, ObjectBlobStore
from storage.checkpoints import AggregateStep
from storage.records import CheckpointRecord
from validator.stores.commitments import LocationPolicy, parse_location
from validator.stores.objstore import open_store


@dataclass(frozen=True, slots=True)
class BlobSpec:
    """Where checkpoints and archived submissions are: a shared folder, or an archive URL (S3).

    Credentials travel with the spec to each worker (inside the cluster only); leave them None to have
    the store read its own environment."""

    root: str | None = None
    url: str | None = None
    key_id: str | None = None
    secret: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.root is None) == (self.url is None):
            raise ValueError("a blob spec is a folder or a URL, exactly one of them")

    def open(self) -> BlobStore:
        if self.root is not None:
            return LocalBlobStore(Path(self.root))
        assert self.url is not None
        loc = parse_location(self.url, LocationPolicy.local())
        if loc.is_file:
            return LocalBlobStore(loc.path)
        creds = (self.key_id, self.secret) if self.key_id and self.secret else None
        return ObjectBlobStore(open_store(loc, credentials=creds))


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Everything a worker needs to build its replica; the same for every worker of a pool.

    `devices` is the replica's devices: one today ("cpu", "cuda", "auto"); several once a replica is
    sharded over GPUs (a 72B model in bf16 does not fit one)."""

    model: ModelConfig
    dataset_path: str
    seq_len: int
    blobs: BlobSpec
    eval: EvalConfig
    codec: CodecConfig = CodecConfig()
    outer_lr: float = OUTER_LR
    devices: tuple[str, ...] = ("auto",)
    threads: int | None = 1  # torch threads per worker: one per CPU slot, so N workers fill N cores


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    """How to reach the model at the start of `window`: a checkpoint, then stored aggregates.

    `base` is the validator's fingerprint for `window`: a replica that arrives elsewhere is rebuilt."""

    window: int
    base: str
    checkpoint: CheckpointRecord
    checkpoint_base: str
    steps: tuple[AggregateStep, ...]

    def __post_init__(self) -> None:
        windows = [s.window for s in self.steps]
        if windows != list(range(self.checkpoint.window, self.window)):
            start = self.checkpoint.window
            raise ValueError(f"steps {windows[:5]} do not lead from checkpoint {start} to {self.window}")
        if any(None in s.content_digests for s in self.steps):
            raise ValueError("an aggregated submission of the plan is not archived")


@dataclass(frozen=True, slots=True)
class WindowTask:
    """A window's shared inputs: the replica plan, the recorded held-out seed, the validator's
    held-out loss before any update and the clip reference. Replicas measure that loss again on
    their own device (the score compares it with losses they compute); the validator's value is
    kept for the record and for comparison."""

    plan: ReplicaPlan
    heldout_seed: str
    loss_before: float
    reference: Mapping[str, float]

    @property
    def window(self) -> int:
        return self.plan.window


@dataclass(frozen=True, slots=True)
class WorkerJob:
    """One peer to evaluate: idempotent, so it can run again on any worker after a failure."""

    window: int
    uid: int
    content_digest: str  # the archive key of the peer's submission bytes
