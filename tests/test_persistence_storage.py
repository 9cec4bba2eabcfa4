"""Residual sketches stored with their window and read back by the windows after it (real
PostgreSQL and SQLite): exact bytes, the hash seed across the whole 64-bit range, pruning."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import Engine

from storage.db import session_scope
from storage.queries import earlier_sketches, window_sketch_seed
from storage.sketch_rows import SketchRecord
from storage.writer import commit_window, prune_sketches
from tests.storage_fixtures import engine_fixture, hotkey, make_window

__all__ = ["engine_fixture"]

SEED = 2**64 - 12345  # above 2^63: stored as a signed 64-bit value and read back unsigned


def test_sketches_round_trip_by_peer_and_window_range(engine: Engine) -> None:
    for window in range(5):
        data = [bytes([window, i]) * 64 for i in range(2)]
        sketches = [SketchRecord(hotkey(i), SEED, data[i]) for i in range(2)]
        with session_scope(engine) as s:
            commit_window(session=s, record=replace(make_window(window), sketches=sketches))
    with session_scope(engine) as s:
        rows = earlier_sketches(session=s, hotkeys=[hotkey(0), hotkey(1), hotkey(5)], first=1, last=3)
        assert sorted(rows) == [hotkey(0), hotkey(1)]  # nobody stored for hotkey 5
        assert [w for w, _ in rows[hotkey(1)]] == [1, 2, 3]  # oldest first, the range inclusive
        assert rows[hotkey(1)][2][1] == SketchRecord(hotkey(1), SEED, bytes([3, 1]) * 64)
        assert (
            window_sketch_seed(session=s, window=4) == SEED
            and window_sketch_seed(session=s, window=9) is None
        )
    with session_scope(engine) as s:
        assert prune_sketches(session=s, before=3) == 6  # windows 0, 1, 2: two peers each
    with session_scope(engine) as s:
        assert [
            w for w, _ in earlier_sketches(session=s, hotkeys=[hotkey(0)], first=0, last=9)[hotkey(0)]
        ] == [3, 4]


def test_windows_that_aggregated_nothing_are_not_compared(engine: Engine) -> None:
    """Windows 0 and 1 aggregate nothing (the warm-up), so window 2 has the same base model as they
    had: their residuals are stored (replay reads the seed back) but never compared."""
    for window in range(4):
        sketches = [SketchRecord(hotkey(0), SEED, bytes([window]) * 64)]
        record = make_window(window, n_gather=0 if window < 2 else 3)
        with session_scope(engine) as s:
            commit_window(session=s, record=replace(record, sketches=sketches))
    with session_scope(engine) as s:
        rows = earlier_sketches(session=s, hotkeys=[hotkey(0)], first=0, last=3)
        assert [w for w, _ in rows[hotkey(0)]] == [2, 3]
        assert window_sketch_seed(session=s, window=0) == SEED
