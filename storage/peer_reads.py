"""One peer's rows across windows, read without the rest of each window.

A peer's detail used to load each of its newest windows whole and pick its rows out: with a crowd
of 256 sybils, 50 windows took 27 s and 700 MB (every rating's link evidence, every copy pair),
for one request anyone can repeat with another peer. Here each table is read once, filtered by
the peer's hotkey and the windows asked for.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import select, union
from sqlalchemy.orm import Session

from storage import models as m
from storage.queries import fields_of, rating_of, submission_of
from storage.records import EvaluationRecord, PenaltyRecord, RatingRecord, SelectionRecord, SubmissionRecord


def peer_windows(
    *, session: Session, hotkey: str, limit: int, before: int | None = None
) -> list[tuple[int, str]]:
    """(window, state) of the peer's own newest `limit` windows below `before`, newest first.

    The peer's windows, not the newest windows overall: a peer that left the subnet for a while
    (deregistered, then registered again) has gaps, and its detail still shows `limit` of its
    windows. Each table gives at most `limit` of the peer's newest windows through an index that
    starts with the hotkey: the peer's whole history is never read.
    """
    branches = []
    for t in (m.Submission, m.RatingHistory, m.Penalty):
        newest = select(t.window).where(t.hotkey == hotkey)
        if before is not None:
            newest = newest.where(t.window < before)
        branches.append(newest.order_by(t.window.desc()).limit(limit).subquery())
    own = union(*(select(b.c.window) for b in branches)).subquery()
    stmt = select(m.Window.window, m.Window.state).where(m.Window.window.in_(select(own.c.window)))
    rows = session.execute(stmt.order_by(m.Window.window.desc()).limit(limit))
    return [(w, state) for w, state in rows]


def peer_rows(*, session: Session, hotkey: str, windows: Collection[int]) -> dict[int, PeerRows]:
    """window -> the peer's submission, evaluation, rating, selection and penalties in it (windows
    where it has no row are absent)."""
    if not windows:
        return {}
    out: dict[int, PeerRows] = {}

    def rows(model: Any, *order: Any) -> list[Any]:
        stmt = select(model).where(model.window.in_(list(windows)), model.hotkey == hotkey)
        return list(session.scalars(stmt.order_by(model.window, *order)))

    def at(window: int) -> PeerRows:
        return out.setdefault(window, PeerRows())

    for s in rows(m.Submission):
        at(s.window).submission = submission_of(s)
    for e in rows(m.Evaluation):
        at(e.window).evaluation = EvaluationRecord(**fields_of(e, EvaluationRecord))
    for r in rows(m.RatingHistory):
        at(r.window).rating = rating_of(r)
    for sel in rows(m.Selection):
        at(sel.window).selection = SelectionRecord(
            hotkey=sel.hotkey, uid=sel.uid, role=sel.role, rank=sel.rank
        )
    for p in rows(m.Penalty, m.Penalty.id):
        at(p.window).penalties.append(PenaltyRecord(**fields_of(p, PenaltyRecord)))
    return out


class PeerRows:
    """A peer's part of one window."""

    __slots__ = ("evaluation", "penalties", "rating", "selection", "submission")

    def __init__(self) -> None:
        self.submission: SubmissionRecord | None = None
        self.evaluation: EvaluationRecord | None = None
        self.rating: RatingRecord | None = None
        self.selection: SelectionRecord | None = None
        self.penalties: list[PenaltyRecord] = []
