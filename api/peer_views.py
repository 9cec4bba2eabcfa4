"""Peer reads: the ranking, one peer's detail and its rating history. Run in the threadpool."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from api.cache import WindowMemo
from api.http import ApiError
from api.schemas import (
    HistoryPointOut,
    PeerDetail,
    PeerHistory,
    PeerList,
    PeerRow,
    PeerWindow,
    PenaltyOut,
    SelectionOut,
    UidSpan,
)
from api.window_views import below, evaluation_out, load_window, public, rating_out
from storage.peer_reads import PeerRows, peer_rows, peer_windows
from storage.queries import leaderboard, peer_history, peer_summary
from storage.records import LeaderboardEntry, PeerSummary

PeerSort = Literal[
    "rank", "uid", "hotkey", "mu", "sigma", "ordinal", "bma", "final_score", "last_evaluated_window"
]
MAX_HOTKEY_LEN: Final = 64
MAX_UID: Final = 65_535
NAME: Final = r"^[a-z][a-z0-9_]{0,31}$"  # a status or behaviour name


def _unknown_peer(ident: str) -> ApiError:
    shown = ident if len(ident) <= MAX_HOTKEY_LEN else ident[:MAX_HOTKEY_LEN] + "…"
    return ApiError(404, "not_found", f"unknown peer {shown!r}")


def _is_uid(ident: str) -> bool:
    return ident.isascii() and ident.isdigit()  # str.isdigit also accepts '²', which int() refuses


def check_peer_ident(ident: str) -> None:
    """404 for what can name no peer, before any cache or database read. A uid has one spelling:
    '0', never '00' (each spelling would be a cache entry of its own for the same peer)."""
    malformed = len(ident) > MAX_HOTKEY_LEN or "\x00" in ident or not ident
    if malformed or (_is_uid(ident) and ident != str(int(ident))):
        raise _unknown_peer(ident)


def resolve_peer(session: Session, ident: str) -> PeerSummary:
    """A peer by hotkey, or by the uid it holds now (a recycled uid names its newest holder)."""
    check_peer_ident(ident)
    hotkey = ident
    if _is_uid(ident):
        uid = int(ident)
        holders = [e for e in leaderboard(session=session) if e.uid == uid] if uid <= MAX_UID else []
        if not holders:
            raise _unknown_peer(ident)
        hotkey = max(holders, key=lambda e: (e.updated_window, e.hotkey)).hotkey
    summary = peer_summary(session=session, hotkey=hotkey)
    if summary is None:
        raise _unknown_peer(ident)
    return summary


@dataclass(frozen=True, slots=True)
class PeerFilter:
    """Which peers /v1/peers lists; None matches everything."""

    status: str | None = None
    hotkey_prefix: str | None = None
    label: str | None = None

    def matches(self, row: PeerRow) -> bool:
        return (
            (self.status is None or row.last_status == self.status)
            and (self.hotkey_prefix is None or row.hotkey.startswith(self.hotkey_prefix))
            and (self.label is None or row.label == self.label)
        )


def _row(entry: LeaderboardEntry, status: str | None, label: str | None) -> PeerRow:
    return public(PeerRow, entry, last_status=status, label=label)


def _sorted(rows: list[PeerRow], sort: PeerSort, descending: bool) -> list[PeerRow]:
    # Rows arrive in rank order, and sorts are stable: ties keep rank order. Nulls go last.
    present = [r for r in rows if getattr(r, sort) is not None]
    absent = [r for r in rows if getattr(r, sort) is None]
    return sorted(present, key=lambda r: getattr(r, sort), reverse=descending) + absent


class PeerQuery(BaseModel):
    """/v1/peers' query parameters: the sort, the page and the filter travel together to the read
    and into the cache key."""

    model_config = ConfigDict(frozen=True)

    sort: PeerSort = "rank"
    order: Literal["asc", "desc"] = "asc"
    limit: int = Field(default=256, ge=1, le=1000)
    offset: int = Field(default=0, ge=0, le=1_000_000)
    status: str | None = Field(
        default=None, pattern=NAME, description="only peers with this status in the newest window"
    )
    hotkey_prefix: str | None = Field(
        default=None, min_length=1, max_length=64, description="only hotkeys that start with this"
    )
    label: str | None = Field(
        default=None, pattern=NAME, description="only peers with this behaviour (where known)"
    )

    @property
    def where(self) -> PeerFilter:
        return PeerFilter(status=self.status, hotkey_prefix=self.hotkey_prefix, label=self.label)

    def cache_key(self) -> str:
        # repr quotes the prefix, so no two filters share a key.
        return f"peers:{self.sort}:{self.order}:{self.limit}:{self.offset}:{self.where!r}"


def peer_list(
    session: Session,
    memo: WindowMemo,
    query: PeerQuery,
    *,
    latest: int | None,
    labels: Mapping[str, str] | None = None,
) -> PeerList:
    """The ranking (rank is the place in the whole ranking, also when filtered), sorted, filtered
    and paginated."""
    board = leaderboard(session=session)
    # the window the ratings were read at labels the body and gives the statuses: `latest` is the
    # API's view of the newest commit, up to `commit_refresh_s` old, and a body said window 5 over
    # window 6's rows (an audit)
    window = board[0].updated_window if board else latest
    statuses: dict[str, str] = {}
    stored = None if window is None else load_window(session, memo, window)
    if stored is not None:
        statuses = {s.hotkey: s.status for s in stored[1].submissions}
    labels = labels or {}
    every = [_row(e, statuses.get(e.hotkey), labels.get(e.hotkey)) for e in board]
    where = query.where
    rows = [r for r in every if where.matches(r)]
    page = _sorted(rows, query.sort, query.order == "desc")[query.offset : query.offset + query.limit]
    return PeerList(window=window, total=len(rows), offset=query.offset, limit=query.limit, peers=page)


def _peer_window(window: int, state: str, part: PeerRows) -> PeerWindow:
    sub, ev, rating, sel = part.submission, part.evaluation, part.rating, part.selection
    return PeerWindow(
        window=window,
        state=state,
        status=None if sub is None else sub.status,
        reason=None if sub is None else sub.reason,
        detail="" if sub is None else sub.detail,
        evaluation=None if ev is None else evaluation_out(ev),
        rating=None if rating is None else rating_out(rating),
        penalties=[public(PenaltyOut, p) for p in part.penalties],
        selection=None if sel is None else public(SelectionOut, sel),
    )


def peer_detail(session: Session, summary: PeerSummary, *, n_windows: int) -> PeerDetail:
    ranks = {e.hotkey: e.rank for e in leaderboard(session=session)}
    hk = summary.hotkey
    own = peer_windows(session=session, hotkey=hk, limit=n_windows, before=below(summary.last_window))
    parts = peer_rows(session=session, hotkey=hk, windows=[w for w, _ in own])
    windows = [_peer_window(w, state, parts[w]) for w, state in own if w in parts]
    return PeerDetail(
        hotkey=summary.hotkey,
        uid=summary.uid,
        rank=ranks.get(summary.hotkey),
        first_window=summary.first_window,
        last_window=summary.last_window,
        uid_history=[UidSpan(uid=u, first_window=f, last_window=last) for u, f, last in summary.uid_history],
        rating=None if summary.rating is None else rating_out(summary.rating),
        windows=windows,
    )


def history_body(
    session: Session, hotkey: str, *, from_window: int | None, to_window: int | None, limit: int
) -> PeerHistory:
    """Points with from_window <= window <= to_window (both optional; a reversed range is empty),
    the newest `limit` of them, oldest first.

    A peer has at most one point per window, so the newest (to - from + 1) points before to + 1
    cover the whole range.
    """
    if from_window is not None and to_window is not None:
        limit = min(limit, to_window - from_window + 1)  # <= 0 for an empty range
    before = None if to_window is None else below(to_window)
    points = [] if limit <= 0 else peer_history(session=session, hotkey=hotkey, limit=limit, before=before)
    return PeerHistory(
        hotkey=hotkey,
        from_window=from_window,
        to_window=to_window,
        points=[public(HistoryPointOut, p) for p in points if from_window is None or p.window >= from_window],
    )
