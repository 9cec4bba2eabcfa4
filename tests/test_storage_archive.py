"""The content-addressed submission archive, checkpoints and the rebuild plan."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from sqlalchemy import Engine, select

from storage.archive import (
    ArchiveConfig,
    ArchiveCorruptError,
    BlobStore,
    LocalBlobStore,
    ObjectBlobStore,
    SubmissionArchive,
)
from storage.checkpoints import (
    load_checkpoint,
    nearest_checkpoint,
    rebuild_plan,
    save_checkpoint,
)
from storage.db import session_scope
from storage.models import Checkpoint, ResidualSketch
from storage.records import SubmissionRecord, WindowRecord
from storage.sketch_rows import SketchRecord
from storage.writer import commit_window
from tests.storage_fixtures import (
    make_window,
)
from validator.state.global_model import GlobalModel
from validator.state.ledger import Ledger


@pytest.fixture(params=["folder", "obstore"])
def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    if request.param == "folder":
        return LocalBlobStore(tmp_path / "blobs")
    return ObjectBlobStore.local(tmp_path / "blobs")


def test_blob_store_put_get_exists_delete(blobs: BlobStore) -> None:
    assert not blobs.exists("a/b")
    blobs.put("a/b", b"\x00\x01payload")
    assert blobs.exists("a/b")
    assert blobs.get("a/b") == b"\x00\x01payload"
    blobs.delete("a/b")
    blobs.delete("a/b")  # deleting twice is fine
    assert not blobs.exists("a/b")
    with pytest.raises(KeyError):
        blobs.get("a/b")
    with pytest.raises(ValueError, match="unsafe"):
        blobs.put("../escape", b"x")


def test_archive_is_content_addressed_and_verified(blobs: BlobStore, tmp_path: Path) -> None:
    archive = SubmissionArchive(blobs)
    data = b"safetensors bytes"
    digest = archive.put(data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert blobs.exists(f"archive/{digest[:2]}/{digest}")
    assert archive.put(data) == digest and archive.get(digest) == data
    blobs.put(SubmissionArchive.key(digest), b"tampered")
    with pytest.raises(ArchiveCorruptError):
        archive.get(digest)
    with pytest.raises(ValueError, match="digest"):
        SubmissionArchive.key("ABC")


def _window_with_blobs(window: int, digests: list[str]) -> WindowRecord:
    record = make_window(window, n_peers=len(digests), n_eval=0, n_gather=1)
    subs = [
        dataclasses.replace(s, content_digest=d) for s, d in zip(record.submissions, digests, strict=True)
    ]
    return dataclasses.replace(record, submissions=subs, copy_pairs=[], penalties=[])


def test_prune_keeps_blobs_still_referenced(engine: Engine, tmp_path: Path) -> None:
    archive = SubmissionArchive(LocalBlobStore(tmp_path), ArchiveConfig(retention_windows=2))
    old, shared, new = (archive.put(x) for x in (b"old", b"shared", b"new"))
    with session_scope(engine) as s:
        commit_window(session=s, record=_window_with_blobs(1, [old, shared]))
        commit_window(session=s, record=_window_with_blobs(5, [new, shared]))
    with session_scope(engine) as s:
        assert SubmissionArchive(archive.store).prune(session=s, current_window=5) == 0  # keep forever
        assert archive.prune(session=s, current_window=5) == 1
    assert not archive.exists(old) and archive.exists(shared) and archive.exists(new)


class _Counting(LocalBlobStore):
    """A folder store that counts the existence checks a prune makes (a HEAD each on S3)."""

    checks = 0

    def exists(self, key: str) -> bool:
        self.checks += 1
        return super().exists(key)


def test_a_prune_reads_only_the_windows_that_fell_out_of_retention_since_the_last(
    engine: Engine, tmp_path: Path
) -> None:
    """Reading every old window again asked the store about every blob ever deleted, every window:
    the aggregate stage grew slower for ever (256 peers: 50,944 checks a window at window 240)."""
    store = _Counting(tmp_path)
    archive = SubmissionArchive(store, ArchiveConfig(retention_windows=2))
    blobs = {w: [archive.put(f"{w}-{i}".encode()) for i in range(3)] for w in range(1, 8)}
    with session_scope(engine) as s:
        for w, digests in blobs.items():
            commit_window(session=s, record=_window_with_blobs(w, digests))
    store.checks = 0
    with session_scope(engine) as s:
        assert archive.prune(session=s, current_window=5) == 6  # windows 1 and 2
    assert store.checks == 6
    for current, fallen in ((6, 3), (7, 4), (8, 5)):
        store.checks = 0
        with session_scope(engine) as s:
            assert archive.prune(session=s, current_window=current) == 3
        assert store.checks == 3 and not any(archive.exists(d) for d in blobs[fallen])
    assert all(archive.exists(d) for w in (6, 7) for d in blobs[w])


def _age(root: Path, key: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(root / key, (then, then))


def test_blob_store_lists_a_prefix_with_modification_times(blobs: BlobStore, tmp_path: Path) -> None:
    for key in ("archive/ab/one", "archive/cd/two", "archived/three", "checkpoints/four"):
        blobs.put(key, b"x")
    _age(tmp_path / "blobs", "archive/ab/one", 3600)
    listed = sorted(blobs.listing("archive"))
    assert [item.key for item in listed] == ["archive/ab/one", "archive/cd/two"]  # by path segment
    assert listed[0].modified == pytest.approx(time.time() - 3600, abs=5)
    assert listed[1].modified == pytest.approx(time.time(), abs=5)
    assert list(blobs.listing("nothing-here")) == []


def test_folder_listing_skips_unfinished_writes(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put("archive/ab/one", b"x")
    (tmp_path / "archive/ab/.tmp-k3j2").write_bytes(b"half")  # a put killed before its rename
    assert [item.key for item in store.listing("archive/")] == ["archive/ab/one"]


def test_orphans_older_than_the_grace_are_deleted(engine: Engine, blobs: BlobStore, tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    archive = SubmissionArchive(blobs, ArchiveConfig(retention_windows=2, orphan_grace_s=3600))
    old_window, recent_window, orphan, fresh = (archive.put(x) for x in (b"w1", b"w5", b"orphan", b"fresh"))
    with session_scope(engine) as s:
        commit_window(session=s, record=_window_with_blobs(1, [old_window]))  # past the retention
        commit_window(session=s, record=_window_with_blobs(5, [recent_window]))
    misnamed = f"archive/ab/{'cd' * 32}"  # the folder does not match the digest
    strays = ["archive/zz/readme", misnamed, f"archive/{orphan[:2]}/.tmp-x"]
    for key in strays:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(b"not ours")
    for key in [*strays, *(SubmissionArchive.key(d) for d in (old_window, recent_window, orphan))]:
        _age(root, key, 7200)
    with session_scope(engine) as s:
        keep_all = SubmissionArchive(blobs, ArchiveConfig(orphan_grace_s=3600))  # no retention
        assert keep_all.prune_orphans(session=s) == 0 and archive.exists(orphan)
        assert archive.prune_orphans(session=s, now=time.time() - 3 * 3600) == 0  # not old yet then
        assert archive.prune_orphans(session=s) == 1
    assert not archive.exists(orphan)
    assert archive.exists(old_window) and archive.exists(recent_window) and archive.exists(fresh)
    assert all((root / key).is_file() for key in strays)


def test_orphan_sweep_asks_the_database_in_batches(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("storage.archive._BATCH", 2)  # five blobs: three batches
    archive = SubmissionArchive(LocalBlobStore(tmp_path), ArchiveConfig(retention_windows=2))
    digests = [archive.put(bytes([i])) for i in range(5)]
    for digest in digests:
        _age(tmp_path, SubmissionArchive.key(digest), 7 * 3600)
    with session_scope(engine) as s:
        commit_window(session=s, record=_window_with_blobs(3, digests[1::2]))
        assert archive.prune_orphans(session=s) == 3
    assert [archive.exists(d) for d in digests] == [False, True, False, True, False]


def test_ledger_sweeps_orphans_at_start_then_once_per_half_grace(engine: Engine, tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    archive = SubmissionArchive(blobs, ArchiveConfig(retention_windows=2, orphan_grace_s=3600))
    clock = [1000.0]
    ledger = Ledger(engine, blobs, archive, checkpoint_every=1, clock=lambda: clock[0])

    def orphan(data: bytes) -> str:
        digest = archive.put(data)
        _age(tmp_path, SubmissionArchive.key(digest), 7200)
        return digest

    first = orphan(b"left by a crash")
    assert ledger.prune(10) == 1 and not archive.exists(first)  # the first prune after a start
    second = orphan(b"a failed attempt")
    clock[0] += 1799
    assert ledger.prune(11) == 0 and archive.exists(second)  # within grace / 2: not listed again
    clock[0] += 1
    assert ledger.prune(12) == 1 and not archive.exists(second)


def test_a_prune_keeps_what_the_oldest_replayable_window_reads(engine: Engine, tmp_path: Path) -> None:
    """Cut at the retention alone, the oldest windows it keeps lost the sketches their persistence
    check reads and the aggregates their recycling check and model rebuild read: they replayed
    differently (a stored drift of 0.004 recomputed as 0.0)."""
    blobs = LocalBlobStore(tmp_path)
    archive = SubmissionArchive(blobs, ArchiveConfig(retention_windows=6))
    ledger = Ledger(engine, blobs, archive, checkpoint_every=3, clock=lambda: 0.0)
    digests = {w: archive.put(f"window {w}".encode()) for w in range(1, 13)}
    with session_scope(engine) as s:
        for w, digest in digests.items():
            record = _window_with_blobs(w, [digest])
            sketch = SketchRecord(record.submissions[0].hotkey, 7, bytes(128))
            commit_window(session=s, record=dataclasses.replace(record, sketches=[sketch]))
        for w in (3, 6, 9, 12):
            save_checkpoint(session=s, store=blobs, window=w, data=f"model@{w}".encode())
    ledger.prune(12, sketch_windows=4, earlier_windows=2)
    # window 6, the oldest replayable: its model is the checkpoint at 6 (the start of window 6); the
    # recycling check reads the aggregates of 4-5, the persistence check the sketches of 2-5
    assert [w for w, d in digests.items() if archive.exists(d)] == list(range(4, 13))
    with session_scope(engine) as s:
        kept = sorted(set(s.scalars(select(ResidualSketch.window))))
    assert kept == list(range(2, 13))


def test_a_missed_checkpoint_keeps_the_aggregates_rebuilding_reads(engine: Engine, tmp_path: Path) -> None:
    """A checkpoint missed (a crash between a window's commit and its checkpoint): the prune assumed
    one every `checkpoint_every` windows and deleted the aggregates the oldest replayable window, and
    a restart, rebuild from; window 7 then failed to replay (KeyError on an archive key)."""
    blobs = LocalBlobStore(tmp_path)
    archive = SubmissionArchive(blobs, ArchiveConfig(retention_windows=5))
    ledger = Ledger(engine, blobs, archive, checkpoint_every=3, clock=lambda: 0.0)
    digests = {w: archive.put(f"window {w}".encode()) for w in range(1, 13)}
    with session_scope(engine) as s:
        for w, digest in digests.items():
            commit_window(session=s, record=_window_with_blobs(w, [digest]))
        for w in (3, 9, 12):  # 6 was missed
            save_checkpoint(session=s, store=blobs, window=w, data=f"model@{w}".encode())
    ledger.prune(12, earlier_windows=2)
    # window 7, the oldest replayable: rebuilt from the checkpoint at 3 and the aggregates of 3-6
    assert [w for w, d in digests.items() if archive.exists(d)] == list(range(3, 13))


def at(window: int) -> GlobalModel:
    return cast(GlobalModel, SimpleNamespace(window=window))


def test_a_missed_checkpoint_is_written_at_the_next_window(engine: Engine, tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    ledger = Ledger(engine, blobs, SubmissionArchive(blobs), checkpoint_every=3, clock=lambda: 0.0)
    written: list[int] = []

    def checkpoint(gm: GlobalModel) -> None:  # the row and blob, without a model to serialize
        written.append(gm.window)
        with session_scope(engine) as s:
            save_checkpoint(session=s, store=blobs, window=gm.window, data=f"model@{gm.window}".encode())

    ledger.checkpoint = checkpoint  # type: ignore[method-assign]
    checkpoint(at(3))

    for window in (4, 5, 7, 8, 9, 10):  # the model at the start of each; 6's checkpoint never came
        ledger.maybe_checkpoint(at(window))
    assert written == [3, 7, 9]  # 7: three behind the newest (3); 9 on the grid again


def test_checkpoints_and_rebuild_plan(engine: Engine, tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    with session_scope(engine) as s:
        for w in range(2, 6):
            commit_window(session=s, record=make_window(w))
        first = save_checkpoint(session=s, store=store, window=2, data=b"model@2")
        again = save_checkpoint(session=s, store=store, window=2, data=b"other")
        save_checkpoint(session=s, store=store, window=4, data=b"model@4")
    assert again == first and load_checkpoint(store=store, record=first) == b"model@2"
    with session_scope(engine) as s:
        assert nearest_checkpoint(session=s, window=1) is None
        plan = rebuild_plan(session=s, window=4)  # checkpoint 4 itself, nothing to apply
        assert plan.checkpoint.window == 4 and plan.steps == ()
        plan = rebuild_plan(session=s, window=6)
        with pytest.raises(LookupError, match="no checkpoint"):
            rebuild_plan(session=s, window=1)
        with pytest.raises(LookupError, match="not committed"):
            rebuild_plan(session=s, window=8)
    assert plan.checkpoint.window == 4 and [st.window for st in plan.steps] == [4, 5]
    step = plan.steps[0]
    assert step.aggregate_digests == tuple(make_window(4).aggregate_digests)
    expected = tuple(s.content_digest for s in make_window(4).submissions[:3])
    assert step.content_digests == expected and step.base_fingerprint == f"{4:064x}"


def test_configs_validate() -> None:
    with pytest.raises(ValueError):
        ArchiveConfig(retention_windows=0)
    with pytest.raises(ValueError):
        ArchiveConfig(orphan_grace_s=0)
    assert SubmissionRecord("h", 1, "ok").status == "ok"


def test_a_prune_drops_checkpoints_nothing_can_rebuild_from(engine: Engine, tmp_path: Path) -> None:
    """Kept, one whole model every `checkpoint_every` windows piled up for ever, with retention
    set; so did the blob of a second save for a checkpointed window (the row keeps the first)."""
    blobs = LocalBlobStore(tmp_path)
    archive = SubmissionArchive(blobs, ArchiveConfig(retention_windows=6, orphan_grace_s=3600))
    ledger = Ledger(engine, blobs, archive, checkpoint_every=3, clock=lambda: 0.0)
    with session_scope(engine) as s:
        for w in range(1, 13):
            commit_window(session=s, record=_window_with_blobs(w, [archive.put(f"window {w}".encode())]))
        saved = {
            w: save_checkpoint(session=s, store=blobs, window=w, data=f"model@{w}".encode())
            for w in (3, 6, 9, 12)
        }
        save_checkpoint(session=s, store=blobs, window=9, data=b"a second save of 9")
    unnamed = sorted(
        i.key for i in blobs.listing("checkpoints") if i.key not in {c.key for c in saved.values()}
    )
    assert len(unnamed) == 1
    _age(tmp_path, unnamed[0], 7200)
    fresh = "checkpoints/0000000013/written-just-now.safetensors"  # a save whose row is not committed yet
    blobs.put(fresh, b"model@13")
    ledger.prune(12, earlier_windows=2)
    # window 6, the oldest replayable, rebuilds from the checkpoint at 6; aggregates from 4 on are kept,
    # so the checkpoint at 3 (whose window-3 aggregate is gone) rebuilds nothing
    with session_scope(engine) as s:
        assert sorted(s.scalars(select(Checkpoint.window))) == [6, 9, 12]
        assert load_checkpoint(store=blobs, record=rebuild_plan(session=s, window=6).checkpoint) == b"model@6"
    left = sorted(i.key for i in blobs.listing("checkpoints"))
    assert left == sorted([*(saved[w].key for w in (6, 9, 12)), fresh])


def test_without_retention_no_checkpoint_goes(engine: Engine, tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    archive = SubmissionArchive(blobs)  # retention None: the default keeps everything
    ledger = Ledger(engine, blobs, archive, checkpoint_every=3, clock=lambda: 0.0)
    with session_scope(engine) as s:
        for w in range(1, 13):
            commit_window(session=s, record=_window_with_blobs(w, [archive.put(f"window {w}".encode())]))
        for w in (3, 6, 9, 12):
            save_checkpoint(session=s, store=blobs, window=w, data=f"model@{w}".encode())
        save_checkpoint(session=s, store=blobs, window=9, data=b"a second save of 9")
    for item in list(blobs.listing("checkpoints")):
        _age(tmp_path, item.key, 10 * 24 * 3600)
    assert ledger.prune(12, earlier_windows=2) == 0
    assert len(list(blobs.listing("checkpoints"))) == 5
