"""Model checkpoints every N windows plus the per-window aggregates: enough to rebuild any window's base.

A checkpoint for window W is the global model at the *start* of W (the model whose fingerprint is
base(W)). The caller serializes the model (safetensors); storage keeps bytes and bookkeeping only.
Rebuilding window W's base: load the nearest checkpoint C <= W, then apply the aggregates of
windows C .. W-1 in order, each the selected submissions (by archived content digest).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from storage import models as m
from storage.archive import ArchiveCorruptError, BlobStore, sha256_hex
from storage.dialect import upsert
from storage.records import COMMITTED, CheckpointRecord


@dataclass(frozen=True, slots=True)
class AggregateStep:
    """One window's aggregate: the payload digests aggregated and where their bytes are archived."""

    window: int
    base_fingerprint: str
    aggregate_digests: tuple[str, ...]
    content_digests: tuple[str | None, ...]  # archive keys, aligned with aggregate_digests
    clip_reference: dict[str, float]
    weights: tuple[float, ...] = ()  # aligned with aggregate_digests; () equal weights


@dataclass(frozen=True, slots=True)
class RebuildPlan:
    """Load `checkpoint`, then apply `steps` in order, to get the model at the start of the window."""

    window: int
    checkpoint: CheckpointRecord
    steps: tuple[AggregateStep, ...]


def checkpoint_key(window: int, digest: str) -> str:
    return f"checkpoints/{window:010d}/{digest}.safetensors"


def _record(row: m.Checkpoint) -> CheckpointRecord:
    return CheckpointRecord(window=row.window, key=row.key, digest=row.digest, size=row.size)


def save_checkpoint(*, session: Session, store: BlobStore, window: int, data: bytes) -> CheckpointRecord:
    """Store the bytes and record them; a second save for the same window keeps the first."""
    digest = sha256_hex(data)
    key = checkpoint_key(window, digest)
    store.put(key, data)
    stmt = upsert(session, m.Checkpoint).values(
        window=window, key=key, digest=digest, size=len(data), created_at=datetime.now(UTC)
    )
    session.execute(stmt.on_conflict_do_nothing(index_elements=["window"]))
    row = session.get(m.Checkpoint, window)
    assert row is not None
    return _record(row)


def load_checkpoint(*, store: BlobStore, record: CheckpointRecord) -> bytes:
    data = store.get(record.key)
    if sha256_hex(data) != record.digest:
        raise ArchiveCorruptError(f"checkpoint for window {record.window} is corrupt")
    return data


def nearest_checkpoint(*, session: Session, window: int) -> CheckpointRecord | None:
    """The latest checkpoint at or before `window`."""
    stmt = select(m.Checkpoint).where(m.Checkpoint.window <= window).order_by(m.Checkpoint.window.desc())
    row = session.scalars(stmt.limit(1)).first()
    return None if row is None else _record(row)


def drop_checkpoints(*, session: Session, before: int) -> list[str]:
    """Delete the rows of checkpoints older than window `before`; returns their blob keys, which
    the caller deletes once this transaction has committed (a row must never name a deleted blob:
    restoring would fail on it, where a blob without a row is only an orphan the sweep finds)."""
    stmt = delete(m.Checkpoint).where(m.Checkpoint.window < before).returning(m.Checkpoint.key)
    return sorted(session.scalars(stmt))


def unreferenced_checkpoints(*, session: Session, store: BlobStore, older_than: float) -> list[str]:
    """Checkpoint blobs no row names, last written before `older_than` (wall clock): a second save
    for an already checkpointed window (the row keeps the first), a crash between the write and
    the commit, or a prune whose deletes did not all happen. There is one row per checkpoint, a
    few per retention, so the names are read at once."""
    named = set(session.scalars(select(m.Checkpoint.key)))
    listed = store.listing("checkpoints")
    return sorted(item.key for item in listed if item.modified < older_than and item.key not in named)


def _step(session: Session, window: m.Window) -> AggregateStep:
    digests = tuple(str(d) for d in window.aggregate_digests)
    rows = session.execute(
        select(m.Submission.payload_digest, m.Submission.content_digest).where(
            m.Submission.window == window.window, m.Submission.payload_digest.in_(digests)
        )
    )
    content = {payload: blob for payload, blob in rows}
    archived = tuple(content.get(d) for d in digests)
    reference = {str(k): float(v) for k, v in window.clip_reference.items()}
    weights = tuple(float(w) for w in window.aggregate_weights or ())
    return AggregateStep(window.window, window.base_fingerprint, digests, archived, reference, weights)


def rebuild_plan(*, session: Session, window: int, below: int | None = None) -> RebuildPlan:
    """What to load and apply to rebuild the base of `window`; LookupError if something is missing.
    `below`: from a checkpoint older than that window's (a newer one could not be read)."""
    checkpoint = nearest_checkpoint(
        session=session, window=window if below is None else min(window, below - 1)
    )
    if checkpoint is None:
        raise LookupError(f"no checkpoint at or before window {window}")
    rows = session.scalars(
        select(m.Window)
        .where(m.Window.window >= checkpoint.window, m.Window.window < window, m.Window.state == COMMITTED)
        .order_by(m.Window.window)
    ).all()
    found = [r.window for r in rows]
    expected = list(range(checkpoint.window, window))
    if found != expected:
        missing = sorted(set(expected) - set(found))
        raise LookupError(f"windows {missing[:5]} between checkpoint and {window} are not committed")
    return RebuildPlan(window, checkpoint, tuple(_step(session, r) for r in rows))
