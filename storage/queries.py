"""Reads shared by the API and replay: they return plain records, never rows."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import fields
from typing import Any

from sqlalchemy import Select, func, inspect, select, text
from sqlalchemy.orm import Session

from storage import models as m
from storage.ranking import ranked
from storage.records import (
    COMMITTED,
    CopyPairRecord,
    EvaluationRecord,
    HistoryPoint,
    LeaderboardEntry,
    PeerSummary,
    PenaltyRecord,
    RatingRecord,
    SelectionRecord,
    SubmissionRecord,
    WeightSetRecord,
    WindowRecord,
    WindowSummary,
)
from storage.sketch_rows import SketchRecord, unsigned_seed
from storage.writer import utc


def rating_of(row: m.Rating | m.RatingHistory) -> RatingRecord:
    return RatingRecord(**fields_of(row, RatingRecord))


def ratings_at(*, session: Session, window: int) -> dict[str, RatingRecord]:
    """Every peer's rating exactly as committed by `window` (the validator rates all tracked peers
    every window, so this is the whole rating state after that window)."""
    rows = session.scalars(select(m.RatingHistory).where(m.RatingHistory.window == window))
    return {r.hotkey: rating_of(r) for r in rows}


def seen_digests(*, session: Session, digests: list[str], before_window: int) -> set[str]:
    """The digests among `digests` already submitted in an earlier window (replays): payload digests
    and decoded digests alike (a decoded digest names the update however it was encoded)."""
    if not digests:
        return set()
    sub = m.Submission
    seen: set[str] = set()
    for column in (sub.payload_digest, sub.decoded_digest):
        stmt = select(column).where(sub.window < before_window, column.in_(digests))
        seen |= {d for d in session.scalars(stmt.distinct()) if d is not None}
    return seen


def aggregated_archived(
    *, session: Session, first_window: int, before_window: int
) -> list[tuple[int, str, str]]:
    """(window, hotkey, content digest) of the archived submissions aggregated in windows
    [first_window, before_window), by window then hotkey: what a recycled update is compared with."""
    stmt = (
        select(m.Submission.window, m.Submission.hotkey, m.Submission.content_digest)
        .join(
            m.Selection,
            (m.Selection.window == m.Submission.window) & (m.Selection.hotkey == m.Submission.hotkey),
        )
        .where(
            m.Submission.window >= first_window,
            m.Submission.window < before_window,
            m.Selection.role == "gather",
            m.Submission.content_digest.is_not(None),
        )
        .order_by(m.Submission.window, m.Submission.hotkey)
    )
    return [(w, h, d) for w, h, d in session.execute(stmt) if d is not None]


def leaderboard(*, session: Session, limit: int | None = None) -> list[LeaderboardEntry]:
    """The peers of the newest committed window's rating state in `ranked` order (rank 1 is best).

    Every committed window writes every peer its state still holds, so a row the newest window did
    not write is a peer the state dropped (its uid recycled, or gone past the inactivity reset): it
    keeps its detail and history but holds no rank. Keyed on the newest committed window, not on
    the newest rating row: a window whose state holds nobody (every peer gone) empties the board.
    """
    cols = (
        m.Rating.hotkey,
        m.Rating.uid,
        m.Rating.mu,
        m.Rating.sigma,
        m.Rating.bma,
        m.Rating.final_score.label("final"),
        m.Rating.last_evaluated_window,
        m.Rating.updated_window,
        m.Rating.state["last_aggregated"].as_integer().label("last_aggregated"),  # one field, not the state
    )
    newest = _newest_committed().scalar_subquery()
    rows = ranked(session.execute(select(*cols).where(m.Rating.updated_window == newest)))
    return [LeaderboardEntry(i, *row[:8]) for i, row in enumerate(rows[:limit], start=1)]


def peer_history(
    *, session: Session, hotkey: str, limit: int = 1000, before: int | None = None
) -> list[HistoryPoint]:
    """The peer's last `limit` committed ratings (windows < `before` if given), oldest first."""
    h = m.RatingHistory
    stmt = select(h.window, h.uid, h.mu, h.sigma, h.bma, h.final_score).where(h.hotkey == hotkey)
    if before is not None:
        stmt = stmt.where(h.window < before)
    rows = session.execute(stmt.order_by(h.window.desc()).limit(limit)).all()
    return [HistoryPoint(*row) for row in reversed(rows)]


def peer_summary(*, session: Session, hotkey: str) -> PeerSummary | None:
    """A peer's identity, uid history and current rating."""
    peer = session.get(m.Peer, hotkey)
    if peer is None:
        return None
    uids = session.execute(
        select(m.PeerUid.uid, m.PeerUid.first_window, m.PeerUid.last_window)
        .where(m.PeerUid.hotkey == hotkey)
        .order_by(m.PeerUid.first_window)
    )
    rating = session.get(m.Rating, hotkey)
    return PeerSummary(
        hotkey=peer.hotkey,
        uid=peer.uid,
        first_window=peer.first_window,
        last_window=peer.last_window,
        uid_history=tuple((u, f, last) for u, f, last in uids),
        rating=None if rating is None else rating_of(rating),
    )


def schema_revision(*, session: Session) -> str | None:
    """The Alembic revision the database is at; None when it was never migrated."""
    if not inspect(session.connection()).has_table("alembic_version"):
        return None
    revision: str | None = session.scalar(text("SELECT version_num FROM alembic_version"))
    return revision


def _newest_committed() -> Select[int]:
    return select(func.max(m.Window.window)).where(m.Window.state == COMMITTED)


def latest_committed_window(*, session: Session) -> int | None:
    return session.scalar(_newest_committed())


def latest_weight_set(*, session: Session) -> int | None:
    """The id of the newest weight-setting attempt (ids grow with every attempt)."""
    return session.scalar(select(func.max(m.WeightSet.id)))


def window_state(*, session: Session, window: int) -> str | None:
    return session.scalar(select(m.Window.state).where(m.Window.window == window))


def window_rules(*, session: Session, window: int) -> tuple[str, str] | None:
    """The settings digest and code version a window was scored under (a header read alone)."""
    rules = select(m.Window.config_digest, m.Window.code_version).where(m.Window.window == window)
    row = session.execute(rules).first()
    return None if row is None else (row[0], row[1])


def list_windows(*, session: Session, limit: int = 50, before: int | None = None) -> list[WindowSummary]:
    """Newest windows first, with their submission and evaluation counts."""
    n_sub = select(func.count()).where(m.Submission.window == m.Window.window).scalar_subquery()
    n_eval = select(func.count()).where(m.Evaluation.window == m.Window.window).scalar_subquery()
    w = m.Window
    stmt = select(w.window, w.state, w.base_fingerprint, w.start_block, w.committed_at, n_sub, n_eval)
    if before is not None:
        stmt = stmt.where(w.window < before)
    rows = session.execute(stmt.order_by(w.window.desc()).limit(limit))
    return [
        WindowSummary(win, state, base, block, utc(at), ns, ne)
        for win, state, base, block, at, ns, ne in rows
    ]


def selection(*, session: Session, window: int) -> list[SelectionRecord]:
    """The aggregation set of a window: gather peers then reserves, each by rank."""
    stmt = select(m.Selection).where(m.Selection.window == window)
    rows = session.scalars(stmt.order_by(m.Selection.role, m.Selection.rank))
    return [SelectionRecord(hotkey=s.hotkey, uid=s.uid, role=s.role, rank=s.rank) for s in rows]


def fields_of(row: Any, record_type: Any) -> dict[str, Any]:
    names = record_type if isinstance(record_type, tuple) else [f.name for f in fields(record_type)]
    return {n: getattr(row, n) for n in names}


def _children(session: Session, window: int) -> dict[str, Any]:
    def rows(model: type[m.Base], *order: Any) -> list[Any]:
        return list(session.scalars(select(model).where(model.window == window).order_by(*order)))  # type: ignore[attr-defined]

    return {
        "submissions": [submission_of(s) for s in rows(m.Submission, m.Submission.hotkey)],
        "evaluations": [
            EvaluationRecord(**fields_of(e, EvaluationRecord))
            for e in rows(m.Evaluation, m.Evaluation.hotkey)
        ],
        "ratings": [rating_of(r) for r in rows(m.RatingHistory, m.RatingHistory.hotkey)],
        "penalties": [PenaltyRecord(**fields_of(p, PenaltyRecord)) for p in rows(m.Penalty, m.Penalty.id)],
        "copy_pairs": [
            CopyPairRecord(**fields_of(c, CopyPairRecord))
            for c in rows(m.CopyPair, m.CopyPair.hotkey_a, m.CopyPair.hotkey_b)
        ],
        "selections": selection(session=session, window=window),
    }


def submission_of(row: m.Submission) -> SubmissionRecord:
    values = fields_of(row, SubmissionRecord)
    values["storage_time"], values["fetched_time"] = utc(row.storage_time), utc(row.fetched_time)
    return SubmissionRecord(**values)


def window_detail(*, session: Session, window: int) -> WindowRecord | None:
    """The window as committed (or as far as it got), children ordered by hotkey."""
    w = session.get(m.Window, window)
    if w is None:
        return None
    header = fields_of(
        w,
        ("window", "base_fingerprint", "heldout_seed", "config_digest", "code_version", "start_block"),
    )
    return WindowRecord(
        **header,
        timings=w.timings,
        aggregate_digests=w.aggregate_digests,
        clip_reference=w.clip_reference,
        aggregate_weights=w.aggregate_weights or (),
        salvaged=w.salvaged,
        **_children(session, window),
    )


def weight_sets(
    *,
    session: Session,
    window: int | None = None,
    limit: int = 50,
    before: int | None = None,
    outcome: str | None = None,
) -> list[WeightSetRecord]:
    """Weight-setting attempts by window, newest first, and within a window the latest attempt first
    (optionally of one window, of windows < `before`, or with one outcome)."""
    stmt = select(m.WeightSet)
    if outcome is not None:
        stmt = stmt.where(m.WeightSet.outcome == outcome)
    if window is not None:
        stmt = stmt.where(m.WeightSet.window == window)
    if before is not None:
        stmt = stmt.where(m.WeightSet.window < before)
    rows = session.scalars(stmt.order_by(m.WeightSet.window.desc(), m.WeightSet.id.desc()).limit(limit))
    return [
        WeightSetRecord(
            window=r.window, block=r.block, uids=r.uids, weights=r.weights, outcome=r.outcome, error=r.error
        )
        for r in rows
    ]


def earlier_sketches(
    *, session: Session, hotkeys: Collection[str], first: int, last: int
) -> dict[str, list[tuple[int, SketchRecord]]]:
    """Each of `hotkeys`' residual sketches from windows `first` … `last` (inclusive) that aggregated
    something (a gathered peer), oldest first: the windows the persistence check compares with
    (validator/round/drift.py says why)."""
    moved = select(m.Selection.window).where(
        m.Selection.role == "gather", m.Selection.window.between(first, last)
    )
    rows = session.execute(
        select(m.ResidualSketch)
        .where(
            m.ResidualSketch.window.between(first, last),
            m.ResidualSketch.hotkey.in_(sorted(hotkeys)),
            m.ResidualSketch.window.in_(moved),
        )
        .order_by(m.ResidualSketch.hotkey, m.ResidualSketch.window)
    ).scalars()
    out: dict[str, list[tuple[int, SketchRecord]]] = {}
    for r in rows:
        out.setdefault(r.hotkey, []).append((r.window, SketchRecord(r.hotkey, unsigned_seed(r.seed), r.data)))
    return out


def window_sketch_seed(*, session: Session, window: int) -> int | None:
    """The hash seed `window`'s sketches were taken with; None when it stored none."""
    query = select(m.ResidualSketch.seed).where(m.ResidualSketch.window == window).limit(1)
    value = session.execute(query).scalar_one_or_none()
    return None if value is None else unsigned_seed(value)
