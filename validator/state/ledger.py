"""The validator's side of storage: commit a window, look up replays, checkpoint, and restore.

Restoring rebuilds the global model for the first uncommitted window from the nearest checkpoint
plus the archived submissions aggregated since, and the rating state from the last committed
window, so a restarted process continues exactly where the database says it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import structlog
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from scoring.fingerprint import checkpoint_fingerprint, next_base
from scoring.model import LlamaModel
from scoring.ranking import PeerRating, RatingState
from scoring.wire import CodecConfig
from storage import queries
from storage.archive import ArchiveCorruptError, BlobStore, SubmissionArchive
from storage.checkpoints import (
    RebuildPlan,
    drop_checkpoints,
    load_checkpoint,
    nearest_checkpoint,
    rebuild_plan,
    save_checkpoint,
    unreferenced_checkpoints,
)
from storage.db import DatabaseConfig, run_in_transaction
from storage.records import NOT_LEADER, RatingRecord, WeightSetRecord, WindowRecord
from storage.sketch_rows import SketchRecord
from storage.writer import CommitOutcome, commit_window, prune_sketches, record_weight_set
from validator.state.global_model import GlobalModel, load_model_bytes, model_bytes, replay_aggregates

T = TypeVar("T")
log = structlog.get_logger(__name__)


def rating_state(records: Mapping[str, RatingRecord], window: int | None) -> RatingState:
    """The exact RatingState back from the records of one committed window."""
    peers = {hotkey: PeerRating.from_dict(record.state) for hotkey, record in records.items()}
    return RatingState(dict(sorted(peers.items())), window)


class CommittedElsewhere(RuntimeError):
    """Another process committed this window differently: this process's model is not the record's."""


class Ledger:
    def __init__(
        self,
        engine: Engine,
        blobs: BlobStore,
        archive: SubmissionArchive,
        *,
        checkpoint_every: int,
        db: DatabaseConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine, self.blobs, self.archive = engine, blobs, archive
        self.checkpoint_every, self.db = checkpoint_every, db
        self.clock = clock
        self._next_orphan_sweep: float | None = None  # None: sweep at the first prune (a restart)
        self.scratch: Path | None = None  # large temporary files (state/scratch.py); None: the system's

    def _tx(self, work: Callable[[Session], T]) -> T:
        return run_in_transaction(self.engine, work, config=self.db)

    def commit(self, record: WindowRecord) -> CommitOutcome:
        """Commit the window; an identical earlier commit (a lost acknowledgement) is fine, but a
        different one (another process) raises, so the round boundary rebuilds from storage."""
        outcome = self._tx(lambda s: commit_window(session=s, record=record))
        if outcome is CommitOutcome.ALREADY_COMMITTED:
            stored = self.window_detail(record.window)
            aggregate = (
                tuple(record.aggregate_digests),
                dict(record.clip_reference),
                tuple(record.aggregate_weights),
            )
            if stored is None or aggregate != (
                tuple(stored.aggregate_digests),
                dict(stored.clip_reference),
                tuple(stored.aggregate_weights),
            ):
                raise CommittedElsewhere(f"window {record.window} was committed with another aggregate")
            if _by_hotkey(stored.ratings) != _by_hotkey(record.ratings):
                # the same aggregate from a process that saw a peer differently (a second process on
                # this database): carried on, its ratings were never stored, and the next windows
                # were derived from them; raised, the round rebuilds from the stored ones
                raise CommittedElsewhere(f"window {record.window} was committed with other ratings")
        return outcome

    def seen_before(self, digests: list[str], window: int) -> set[str]:
        return self._tx(lambda s: queries.seen_digests(session=s, digests=digests, before_window=window))

    def aggregated_archived(self, window: int, windows: int) -> list[tuple[int, str, str]]:
        """(window, hotkey, content digest) of the submissions aggregated in the `windows` windows
        before `window`."""
        first = window - windows
        return self._tx(
            lambda s: queries.aggregated_archived(session=s, first_window=first, before_window=window)
        )

    def window_detail(self, window: int) -> WindowRecord | None:
        return self._tx(lambda s: queries.window_detail(session=s, window=window))

    def window_state(self, window: int) -> str | None:
        return self._tx(lambda s: queries.window_state(session=s, window=window))

    def window_rules(self, window: int) -> tuple[str, str] | None:
        """(settings digest, code version) the window was scored under; None if never stored."""
        return self._tx(lambda s: queries.window_rules(session=s, window=window))

    def latest_committed(self) -> int | None:
        return self._tx(lambda s: queries.latest_committed_window(session=s))

    def checkpoint(self, gm: GlobalModel) -> None:
        data = model_bytes(gm.model)
        self._tx(lambda s: save_checkpoint(session=s, store=self.blobs, window=gm.window, data=data))

    def record_weights(self, record: WeightSetRecord) -> None:
        self._tx(lambda s: record_weight_set(session=s, record=record))

    def last_weights_set(self) -> int | None:
        """The window of the newest successful weight set: the next one pays the work since."""
        latest = self._tx(lambda s: queries.weight_sets(session=s, limit=1, outcome="ok"))
        return latest[0].window if latest else None

    def last_weights_failed(self) -> bool:
        """Whether the newest weight-setting attempt failed (so a restarted process retries it)."""
        # a follower's `skipped` row (not the leader) written after the leader's failure must not hide it
        latest = self._tx(lambda s: queries.weight_sets(session=s, limit=50))
        attempted = [r for r in latest if r.outcome != "skipped" or r.error != NOT_LEADER]
        return bool(attempted) and attempted[0].outcome == "failed"

    def prune(self, window: int, sketch_windows: int = 0, earlier_windows: int = 0) -> int:
        """Delete what no window within the retention can need any more (a no-op when it keeps
        everything), and return how many blobs were deleted (old and orphaned submissions and
        checkpoints). A window within it replays from its own submissions, the aggregates since the
        checkpoint its model is rebuilt from, the `earlier_windows` aggregates the recycling check
        compares with, and the `sketch_windows` windows of residual sketches the persistence check
        reads back: cut at the retention alone, the oldest windows it keeps replayed differently.
        Checkpoints older than the first aggregate kept go too: nothing can be rebuilt from them.

        Orphans (bodies of attempts that never committed) need a listing of the whole archive, so
        they are swept at the first prune of the process (a crash leaves them) and then at most
        once per half grace: a blob is at most 1.5 × grace old when it goes."""
        keep = self.archive.config.retention_windows
        if keep is None:
            return 0  # the default: no database round trip every window for nothing
        oldest = window - keep  # the oldest window that stays replayable
        self._tx(lambda s: prune_sketches(session=s, before=oldest - sketch_windows))
        # Aggregates since the checkpoint the oldest is rebuilt from, read from the checkpoints as they
        # are: one every `checkpoint_every` windows was assumed, and after a missed one the blobs the
        # oldest replayable window (and a restart) rebuild from were deleted
        base = self._tx(lambda s: nearest_checkpoint(session=s, window=oldest))
        deleted = 0
        if base is not None:  # none that old: every aggregate since the first checkpoint is needed
            needed_from = min(base.window, oldest - earlier_windows)
            # the archive's own retention counts back from the window it is given
            deleted = self._tx(lambda s: self.archive.prune(session=s, current_window=needed_from + keep))
            # an older checkpoint rebuilds nothing any more (the aggregates after it are gone); kept,
            # one full model every `checkpoint_every` windows piled up for ever
            deleted += self._delete_blobs(self._tx(lambda s: drop_checkpoints(session=s, before=needed_from)))
        now = self.clock()
        if self._next_orphan_sweep is None or now >= self._next_orphan_sweep:
            orphans = self._tx(lambda s: self.archive.prune_orphans(session=s))
            older_than = time.time() - self.archive.config.orphan_grace_s
            unnamed = self._tx(
                lambda s: unreferenced_checkpoints(session=s, store=self.blobs, older_than=older_than)
            )
            orphans += self._delete_blobs(unnamed)
            self._next_orphan_sweep = now + self.archive.config.orphan_grace_s / 2
            log.info("archive_orphans_pruned", window=window, deleted=orphans)
            deleted += orphans
        return deleted

    def _delete_blobs(self, keys: Sequence[str]) -> int:
        for key in keys:
            self.blobs.delete(key)
        return len(keys)

    def sketches(
        self, hotkeys: Collection[str], first: int, last: int
    ) -> dict[str, list[tuple[int, SketchRecord]]]:
        """Each of `hotkeys`' stored residual sketches of windows `first` … `last` that aggregated
        something, oldest first (validator/round/drift.py says why)."""
        return self._tx(
            lambda s: queries.earlier_sketches(session=s, hotkeys=hotkeys, first=first, last=last)
        )

    def sketch_seed(self, window: int) -> int | None:
        """The hash seed of `window`'s stored sketches (replay takes them with the same)."""
        return self._tx(lambda s: queries.window_sketch_seed(session=s, window=window))

    def maybe_checkpoint(self, gm: GlobalModel) -> None:
        """A checkpoint every `checkpoint_every` windows, and whenever the newest is that many behind:
        one missed (a crash between a window's commit and its checkpoint, a store that refused the
        write) was otherwise never written, and rebuilding reached ever further back."""
        last = self._tx(lambda s: nearest_checkpoint(session=s, window=gm.window))
        if (
            gm.window % self.checkpoint_every == 0
            or last is None
            or gm.window - last.window >= self.checkpoint_every
        ):
            self.checkpoint(gm)

    def ratings_after(self, window: int | None) -> RatingState:
        if window is None:
            return RatingState()
        return rating_state(self._tx(lambda s: queries.ratings_at(session=s, window=window)), window)

    def restore(
        self, model: LlamaModel, *, start_window: int, outer_lr: float, codec: CodecConfig
    ) -> tuple[GlobalModel, RatingState]:
        """The model at the start of the first uncommitted window, and the ratings before it.

        On a fresh database `model` (as initialized) becomes the checkpoint of `start_window`. A
        process that stopped before its first commit may come back in a later window: nothing was
        aggregated yet, so the initial checkpoint is still the model, re-checkpointed at the new start."""
        latest = self.latest_committed()
        if latest is None:
            first = self._tx(lambda s: nearest_checkpoint(session=s, window=start_window))
            if first is not None:
                load_model_bytes(model, load_checkpoint(store=self.blobs, record=first))
            gm = GlobalModel(model, checkpoint_fingerprint(dict(model.named_parameters())), start_window)
            self.checkpoint(gm)
            return gm, RatingState()
        target = latest + 1
        if self._tx(lambda s: nearest_checkpoint(session=s, window=target)) is None:
            raise LookupError(f"no checkpoint at or before window {target}")
        return self.model_at(model, target, outer_lr=outer_lr, codec=codec), self.ratings_after(latest)

    def _base_at_checkpoint(self, window: int, model: LlamaModel) -> str:
        """The fingerprint of the model a checkpoint holds (the start of `window`)."""
        here = self._tx(lambda s: queries.window_detail(session=s, window=window))
        if here is not None:
            return here.base_fingerprint
        before = self._tx(lambda s: queries.window_detail(session=s, window=window - 1))
        if before is not None:
            return next_base(before.base_fingerprint, before.aggregate_digests)
        return checkpoint_fingerprint(dict(model.named_parameters()))  # the very first checkpoint

    def _older_plan(self, window: int, below: int) -> RebuildPlan:
        return self._tx(lambda s: rebuild_plan(session=s, window=window, below=below))

    def _archived(self, digests: Sequence[str | None]) -> Iterator[bytes]:
        return (self.archive.get(d) for d in digests if d is not None)

    def model_at(self, model: LlamaModel, window: int, *, outer_lr: float, codec: CodecConfig) -> GlobalModel:
        """Load into `model` the global model at the start of `window` (checkpoint + aggregates)."""
        plan = self._tx(lambda s: rebuild_plan(session=s, window=window))
        unreadable: list[int] = []
        while True:
            try:
                data = load_checkpoint(store=self.blobs, record=plan.checkpoint)
                break
            except (ArchiveCorruptError, KeyError) as error:
                # torn or lost (a power loss, a disk fault): every restart failed on it, though an
                # older checkpoint and the archived aggregates since rebuild the same model
                unreadable.append(plan.checkpoint.window)
                try:
                    plan = self._older_plan(window, plan.checkpoint.window)
                except LookupError:  # none older (or its aggregates are pruned): this one is the news
                    raise error from None
        if unreadable:
            log.warning("checkpoints_unreadable", windows=unreadable, rebuilt_from=plan.checkpoint.window)
        load_model_bytes(model, data)
        gm = GlobalModel(
            model, self._base_at_checkpoint(plan.checkpoint.window, model), plan.checkpoint.window
        )
        for step in plan.steps:
            if None in step.content_digests:
                raise LookupError(f"window {step.window}: an aggregated submission is not archived")
        # lazily: each archived submission is read when its turn comes, one in memory at a time
        steps = (
            (
                step.aggregate_digests,
                self._archived(step.content_digests),
                step.clip_reference,
                step.weights,
            )
            for step in plan.steps
        )
        replay_aggregates(gm, steps, outer_lr=outer_lr, codec=codec, scratch=self.scratch)
        return gm


def _by_hotkey(ratings: Sequence[RatingRecord]) -> dict[str, RatingRecord]:
    return {r.hotkey: r for r in ratings}
