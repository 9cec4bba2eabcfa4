"""Round trips of every repository function on real Postgres and SQLite."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import Engine, func, select

from storage import models as m
from storage.db import session_scope
from storage.queries import (
    aggregated_archived,
    latest_committed_window,
    leaderboard,
    list_windows,
    peer_history,
    peer_summary,
    ratings_at,
    seen_digests,
    selection,
    weight_sets,
    window_detail,
    window_state,
)
from storage.records import RatingRecord, SubmissionRecord, WeightSetRecord
from storage.writer import CommitOutcome, commit_window, open_window, record_weight_set
from tests.api_fixtures import TIED_ORDER, tied_record
from tests.storage_fixtures import (
    hotkey,
    make_window,
)


def _count(engine: Engine, model: type[m.Base]) -> int:
    with session_scope(engine) as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def test_commit_then_window_detail_returns_the_same_record(engine: Engine) -> None:
    record = make_window(7)
    with session_scope(engine) as s:
        assert commit_window(session=s, record=record) is CommitOutcome.COMMITTED
    with session_scope(engine) as s:
        got = window_detail(session=s, window=7)
        assert window_state(session=s, window=7) == "committed"
        assert window_detail(session=s, window=8) is None
    assert got == record
    # Floats are bit-exact (1e-17 steps and 1e-300 inside JSON survive).
    assert got is not None and got.evaluations[1].score == 0.1 / 3 + 1e-17
    assert got.ratings[0].state["history"] == [0.1, 1e-300, -2.5e17]


def test_second_commit_is_a_no_op(engine: Engine) -> None:
    record = make_window(3)
    with session_scope(engine) as s:
        assert commit_window(session=s, record=record) is CommitOutcome.COMMITTED
    changed = dataclasses.replace(record, code_version="other")
    with session_scope(engine) as s:
        assert commit_window(session=s, record=changed) is CommitOutcome.ALREADY_COMMITTED
    assert _count(engine, m.Submission) == 8
    assert _count(engine, m.RatingHistory) == 8
    with session_scope(engine) as s:
        got = window_detail(session=s, window=3)
    assert got is not None and got.code_version == "0.1.0+test"


def test_open_then_committed(engine: Engine) -> None:
    record = make_window(11)
    with session_scope(engine) as s:
        assert open_window(session=s, record=record)
        assert not open_window(session=s, record=record)
        assert window_state(session=s, window=11) == "open"
        assert latest_committed_window(session=s) is None
    with session_scope(engine) as s:
        assert commit_window(session=s, record=record) is CommitOutcome.COMMITTED
    with session_scope(engine) as s:
        assert window_state(session=s, window=11) == "committed"
        assert latest_committed_window(session=s) == 11
        assert [w.state for w in list_windows(session=s)] == ["committed"]


def test_ratings_leaderboard_history_and_replay_state(engine: Engine) -> None:
    for w in (1, 2, 3):
        with session_scope(engine) as s:
            commit_window(session=s, record=make_window(w))
    # An older window committed late must not overwrite the newer current rating.
    with session_scope(engine) as s:
        commit_window(session=s, record=make_window(0))
    with session_scope(engine) as s:
        current = peer_summary(session=s, hotkey=hotkey(5))
        board = leaderboard(session=s, limit=3)
        history = peer_history(session=s, hotkey=hotkey(2))
        short = peer_history(session=s, hotkey=hotkey(2), limit=2, before=3)
        latest = latest_committed_window(session=s)
    assert current is not None and current.rating == make_window(3).ratings[5]
    assert [e.hotkey for e in board] == [hotkey(7), hotkey(6), hotkey(5)]
    assert [e.rank for e in board] == [1, 2, 3]
    assert board[0].final_score == 7 / 7 + 3 and board[0].updated_window == 3
    assert [p.window for p in history] == [0, 1, 2, 3]
    assert history[-1].mu == 25.0 + 2 / 3 + 3 / 1000
    assert [p.window for p in short] == [1, 2]
    assert latest == 3


def test_selection_peer_summary_and_window_list(engine: Engine) -> None:
    with session_scope(engine) as s:
        commit_window(session=s, record=make_window(1))
    moved = dataclasses.replace(
        make_window(2),
        submissions=[SubmissionRecord(hotkey(0), 42, "missing", "missing")],
        ratings=[RatingRecord(hotkey(0), 42, 20.0, 5.0, 0.0, 0.0)],
        evaluations=[],
        penalties=[],
        copy_pairs=[],
        selections=[],
    )
    with session_scope(engine) as s:
        commit_window(session=s, record=moved)
    with session_scope(engine) as s:
        sel = selection(session=s, window=1)
        peer = peer_summary(session=s, hotkey=hotkey(0))
        windows = list_windows(session=s, limit=10)
        assert peer_summary(session=s, hotkey="nobody") is None
        assert selection(session=s, window=2) == []
    assert [(x.role, x.rank) for x in sel] == [("gather", 0), ("gather", 1), ("gather", 2), ("reserve", 0)]
    assert peer is not None and peer.uid == 42 and (peer.first_window, peer.last_window) == (1, 2)
    assert peer.uid_history == ((0, 1, 1), (42, 2, 2))
    assert peer.rating == RatingRecord(hotkey(0), 42, 20.0, 5.0, 0.0, 0.0)
    assert [(w.window, w.n_submissions, w.n_evaluations) for w in windows] == [(2, 1, 0), (1, 8, 4)]
    assert windows[0].committed_at is not None and windows[0].committed_at.tzinfo is not None


def test_weight_sets_are_appended_after_commit(engine: Engine) -> None:
    with session_scope(engine) as s:
        commit_window(session=s, record=make_window(3))
    failed = WeightSetRecord(3, 900, [1, 2], [0.25, 0.75], "failed", "rate limited")
    ok = WeightSetRecord(3, 905, [1, 2], [0.25, 0.75], "ok")
    with session_scope(engine) as s:
        first = record_weight_set(session=s, record=failed)
        second = record_weight_set(session=s, record=ok)
    assert second > first
    with session_scope(engine) as s:
        assert weight_sets(session=s, window=3) == [ok, failed]
        assert weight_sets(session=s, window=4) == []


def test_commit_refuses_unknown_hotkeys(engine: Engine) -> None:
    record = dataclasses.replace(make_window(1), copy_pairs=[], penalties=[], selections=[])
    bad = dataclasses.replace(record, submissions=record.submissions[1:], ratings=record.ratings[1:])
    with pytest.raises(ValueError, match="without a submission"), session_scope(engine) as s:
        commit_window(session=s, record=bad)
    assert _count(engine, m.Window) == 0


def test_records_validate() -> None:
    with pytest.raises(ValueError, match="reason"):
        SubmissionRecord("h", 1, "invalid")
    with pytest.raises(ValueError, match="status"):
        SubmissionRecord("h", 1, "weird", "x")
    with pytest.raises(ValueError, match="same length"):
        WeightSetRecord(1, None, [1], [], "ok")
    with pytest.raises(ValueError, match="duplicate"):
        dataclasses.replace(make_window(1), ratings=list(make_window(1).ratings) * 2)


def test_clip_reference_round_trips_bit_exact(engine: Engine) -> None:
    reference = {"model.embed_tokens.weight": 0.1 / 3, "model.norm.weight": 1e-300}
    record = dataclasses.replace(make_window(4), clip_reference=reference)
    with session_scope(engine) as s:
        commit_window(session=s, record=record)
    with session_scope(engine) as s:
        got = window_detail(session=s, window=4)
    assert got is not None and dict(got.clip_reference) == reference


def test_ratings_at_is_exactly_one_windows_state(engine: Engine) -> None:
    first, second = make_window(5), make_window(6, n_peers=5)
    with session_scope(engine) as s:
        commit_window(session=s, record=first)
        commit_window(session=s, record=second)
    with session_scope(engine) as s:
        at5, at6 = ratings_at(session=s, window=5), ratings_at(session=s, window=6)
        assert ratings_at(session=s, window=7) == {}
    assert at5 == {r.hotkey: r for r in first.ratings}
    assert at6 == {r.hotkey: r for r in second.ratings}  # peers dropped after 5 are not resurrected


def test_seen_digests_finds_only_earlier_windows(engine: Engine) -> None:
    first, second = make_window(5), make_window(6)
    with session_scope(engine) as s:
        commit_window(session=s, record=first)
        commit_window(session=s, record=second)
    old = first.submissions[0].payload_digest
    new = second.submissions[0].payload_digest
    assert old is not None and new is not None
    with session_scope(engine) as s:
        assert seen_digests(session=s, digests=[old, new, "f" * 64], before_window=6) == {old}
        assert seen_digests(session=s, digests=[old], before_window=5) == set()
        assert seen_digests(session=s, digests=[], before_window=9) == set()
    # A decoded digest (the update however encoded) counts as seen the same way.
    again = make_window(7)
    subs = [dataclasses.replace(again.submissions[0], decoded_digest="d" * 64), *again.submissions[1:]]
    with session_scope(engine) as s:
        commit_window(session=s, record=dataclasses.replace(again, submissions=subs))
    with session_scope(engine) as s:
        assert seen_digests(session=s, digests=["d" * 64, old], before_window=8) == {"d" * 64, old}
        assert seen_digests(session=s, digests=["d" * 64], before_window=7) == set()


def test_aggregated_archived_lists_only_gathered_submissions_of_the_windows_asked(engine: Engine) -> None:
    with session_scope(engine) as s:
        for w in (4, 5, 6):
            commit_window(session=s, record=make_window(w, n_gather=2 if w == 5 else 3))
    with session_scope(engine) as s:
        rows = aggregated_archived(session=s, first_window=5, before_window=7)
        none = aggregated_archived(session=s, first_window=7, before_window=9)
    # reserve (hotkey 3 in window 5, hotkey 3 in 6) and the other valid peers are not aggregated
    assert rows == [(5, hotkey(0), f"{0:064x}"), (5, hotkey(1), f"{1:064x}")] + [
        (6, hotkey(i), f"{i:064x}") for i in range(3)
    ]
    assert none == []


def test_the_leaderboard_reads_the_last_aggregated_window_on_both_backends(engine: Engine) -> None:
    """The ranking rule's second key is one field of each rating's JSON state, extracted in SQL (no
    peer's whole state is loaded): the aggregated peer at final 0 ranks above better ordinals."""
    with session_scope(engine) as session:
        commit_window(session=session, record=tied_record())
    with session_scope(engine) as session:
        assert [e.uid for e in leaderboard(session=session)] == TIED_ORDER


def test_peer_text_that_the_database_would_refuse_is_stored_escaped_and_cut(engine: Engine) -> None:
    """A rejection's detail quotes what a peer sent, and an ETag is the peer's store's: a NUL
    (PostgreSQL's text refuses it), a lone surrogate (no UTF-8 for it), an ETag past String(256) or
    a size past BigInteger would fail the window's commit, for every peer, in every retry."""
    hostile = "base \x00\x00ab\ud800… is not the current"
    record = make_window(5)
    subs = list(record.submissions)
    subs[-1] = dataclasses.replace(
        subs[-1], detail=hostile * 40, etag='"' + "e" * 300 + '"', version_id="\x00v", size=1 << 64
    )
    penalty = dataclasses.replace(record.penalties[0], detail=hostile)
    record = dataclasses.replace(record, submissions=subs, penalties=[penalty])
    assert "\x00" not in record.submissions[-1].detail and len(record.submissions[-1].detail) == 500
    assert record.penalties[0].detail == "base \\x00\\x00ab\\ud800… is not the current"
    with session_scope(engine) as s:
        assert commit_window(session=s, record=record) is CommitOutcome.COMMITTED
    with session_scope(engine) as s:
        got = window_detail(session=s, window=5)
    assert got == record
    assert got is not None and len(got.submissions[-1].etag or "") == 256
    assert got.submissions[-1].size is None  # a size no BigInteger holds (the detail still quotes it)
