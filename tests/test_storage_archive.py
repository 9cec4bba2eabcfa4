"""The content-addressed submission archive, checkpoints and the rebuild plan."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
from sqlalchemy import Engine

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
from storage.records import SubmissionRecord, WindowRecord
from storage.writer import commit_window
from tests.storage_fixtures import (
    make_window,
)


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
    assert SubmissionRecord("h", 1, "ok").status == "ok"
