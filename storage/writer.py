"""The validator's writes: one transaction per window, idempotent, race-safe on Postgres and SQLite."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table, delete, insert
from sqlalchemy.orm import Session

from storage import models as m
from storage.dialect import table_of, upsert
from storage.records import COMMITTED, OPEN, WeightSetRecord, WindowRecord
from storage.sketch_rows import sketch_rows


class CommitOutcome(enum.Enum):
    COMMITTED = "committed"
    ALREADY_COMMITTED = "already_committed"


def utc(value: datetime | None) -> datetime | None:
    """Normalise to aware UTC; SQLite keeps no zone, so naive values read back are UTC."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _row(record: Any, window: int) -> dict[str, Any]:
    # Shallow on purpose: dataclasses.asdict deep-copies every JSON value and was a third of a commit.
    row = {f.name: getattr(record, f.name) for f in fields(record)}
    row["window"] = window
    return row


def _window_values(record: WindowRecord, state: str, now: datetime) -> dict[str, Any]:
    return {
        "window": record.window,
        "state": state,
        "base_fingerprint": record.base_fingerprint,
        "heldout_seed": record.heldout_seed,
        "config_digest": record.config_digest,
        "code_version": record.code_version,
        "start_block": record.start_block,
        "timings": dict(record.timings),
        "aggregate_digests": list(record.aggregate_digests),
        "clip_reference": dict(record.clip_reference),
        "aggregate_weights": list(record.aggregate_weights) or None,
        "salvaged": record.salvaged,
        "opened_at": now,
        "committed_at": now if state == COMMITTED else None,
    }


def open_window(*, session: Session, record: WindowRecord) -> bool:
    """Record that a window is being scored (state `open`); False if a row already exists."""
    stmt = upsert(session, m.Window)
    stmt = stmt.values(**_window_values(record, OPEN, datetime.now(UTC)))
    stmt = stmt.on_conflict_do_nothing(index_elements=["window"]).returning(table_of(m.Window).c.window)
    return session.execute(stmt).first() is not None


def _claim_window(session: Session, record: WindowRecord) -> bool:
    # One upsert claims the window: concurrent committers serialise on the primary key and the
    # loser sees state 'committed' in the WHERE clause and gets no row back. It is also the first
    # statement, so SQLite takes its write lock before reading anything (no lock-upgrade deadlock).
    values = _window_values(record, COMMITTED, datetime.now(UTC))
    stmt = upsert(session, m.Window).values(**values)
    update_cols = {k: stmt.excluded[k] for k in values if k not in ("window", "opened_at")}
    stmt = stmt.on_conflict_do_update(
        index_elements=["window"], set_=update_cols, where=m.Window.state != COMMITTED
    )
    # RETURNING, not rowcount: drivers disagree on rowcount for a skipped upsert.
    return session.execute(stmt.returning(table_of(m.Window).c.window)).first() is not None


def _upsert_peers(session: Session, record: WindowRecord) -> None:
    uids = {s.hotkey: s.uid for s in record.submissions}
    # A detached rating (uid < 0: a banned hotkey that holds no uid) names no uid to remember.
    uids.update({r.hotkey: r.uid for r in record.ratings if r.uid >= 0})
    uids.update({r.hotkey: r.uid for r in record.selections})
    named = {p.hotkey for p in record.penalties} | {c.hotkey_a for c in record.copy_pairs}
    named |= {c.hotkey_b for c in record.copy_pairs} | {e.hotkey for e in record.evaluations}
    missing = sorted(named - uids.keys())
    if missing:
        raise ValueError(f"hotkeys without a submission, rating or selection: {missing[:5]}")
    w = record.window
    _keep_detached(session, sorted({r.hotkey for r in record.ratings if r.uid < 0} - uids.keys()), w)
    rows = [{"hotkey": h, "uid": u, "first_window": w, "last_window": w} for h, u in sorted(uids.items())]
    if not rows:
        return
    peers = upsert(session, m.Peer)
    session.execute(
        peers.on_conflict_do_update(
            index_elements=["hotkey"],
            set_={"uid": peers.excluded.uid, "last_window": peers.excluded.last_window},
            where=m.Peer.last_window <= peers.excluded.last_window,
        ),
        rows,
    )
    uid_rows = upsert(session, m.PeerUid)
    session.execute(
        uid_rows.on_conflict_do_update(
            index_elements=["hotkey", "uid"],
            set_={"last_window": uid_rows.excluded.last_window},
            where=m.PeerUid.last_window < uid_rows.excluded.last_window,
        ),
        rows,
    )


def _keep_detached(session: Session, hotkeys: list[str], window: int) -> None:
    """A detached peer's row already names the uids it held; a database that never saw it (one
    started from a copied rating state) gets the row its rating needs, under the detached uid."""
    if hotkeys:
        rows = [{"hotkey": h, "uid": -1, "first_window": window, "last_window": window} for h in hotkeys]
        session.execute(upsert(session, m.Peer).on_conflict_do_nothing(index_elements=["hotkey"]), rows)


def _rating_rows(record: WindowRecord) -> list[dict[str, Any]]:
    return [
        {**_row(r, record.window), "penalty": dict(r.penalty), "state": dict(r.state)} for r in record.ratings
    ]


def _upsert_ratings(session: Session, rows: list[dict[str, Any]]) -> None:
    current = [{**{k: v for k, v in r.items() if k != "window"}, "updated_window": r["window"]} for r in rows]
    stmt = upsert(session, m.Rating)
    cols = [c for c in current[0] if c != "hotkey"]
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["hotkey"],
            set_={c: stmt.excluded[c] for c in cols},
            # A late commit of an older window must not overwrite a newer rating.
            where=m.Rating.updated_window <= stmt.excluded.updated_window,
        ),
        current,
    )


def _insert_rows(session: Session, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        session.execute(insert(table), list(rows))


def _child_rows(record: WindowRecord) -> list[tuple[Table, list[dict[str, Any]]]]:
    w = record.window
    subs = [_row(s, w) for s in record.submissions]
    for row in subs:
        row["storage_time"], row["fetched_time"] = utc(row["storage_time"]), utc(row["fetched_time"])
    evals = [{**_row(e, w), "timings": dict(e.timings)} for e in record.evaluations]
    return [
        (table_of(m.Submission), subs),
        (table_of(m.Evaluation), evals),
        (table_of(m.Penalty), [_row(p, w) for p in record.penalties]),
        (table_of(m.CopyPair), [_row(c, w) for c in record.copy_pairs]),
        (table_of(m.Selection), [_row(s, w) for s in record.selections]),
        (table_of(m.ResidualSketch), sketch_rows(record.sketches, w)),
    ]


def commit_window(*, session: Session, record: WindowRecord) -> CommitOutcome:
    """Write the whole window in the caller's transaction; a second commit is a no-op.

    The caller owns the transaction (`session_scope` / `run_in_transaction`), so a crash anywhere
    before its COMMIT leaves no trace of the window.
    """
    if not _claim_window(session, record):
        return CommitOutcome.ALREADY_COMMITTED
    _upsert_peers(session, record)
    for table, rows in _child_rows(record):
        _insert_rows(session, table, rows)
    ratings = _rating_rows(record)
    if ratings:
        _insert_rows(session, table_of(m.RatingHistory), ratings)
        _upsert_ratings(session, ratings)
    return CommitOutcome.COMMITTED


def record_weight_set(*, session: Session, record: WeightSetRecord) -> int:
    """Append one weight-setting attempt (after the window commit; retries add rows). Returns its id."""
    row = m.WeightSet(
        window=record.window,
        block=record.block,
        uids=list(record.uids),
        weights=list(record.weights),
        outcome=record.outcome,
        error=record.error,
        recorded_at=datetime.now(UTC),
    )
    session.add(row)
    session.flush()
    return row.id


def prune_sketches(*, session: Session, before: int) -> int:
    """Delete the residual sketches of windows before `before`; how many rows went."""
    result = session.execute(delete(m.ResidualSketch).where(m.ResidualSketch.window < before))
    return int(getattr(result, "rowcount", 0) or 0)
