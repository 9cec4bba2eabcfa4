"""SQLAlchemy 2 rows: the schema Alembic migrates (DESIGN.md §9). Only storage imports these.

Peers are keyed by hotkey (uids get recycled); everything per window is keyed by (window, hotkey).
Floats are DOUBLE PRECISION so values round-trip bit-exactly on Postgres and SQLite alike.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    false,
    text,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from storage.fields import HOTKEY_CHARS
from storage.records import SELECTION_ROLES, WINDOW_STATES

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

HOTKEY = String(HOTKEY_CHARS)
DIGEST = String(128)
UTC_TIME = DateTime(timezone=True)
WINDOW_FK = "windows.window"
PEER_FK = "peers.hotkey"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        float: Double,
        datetime: UTC_TIME,
    }


def _one_of(column: str, values: tuple[str, ...]) -> str:
    """A check constraint's SQL: `column` holds one of `values` (storage/records.py's vocabulary)."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _window_fk() -> Mapped[int]:
    return mapped_column(ForeignKey(WINDOW_FK, ondelete="CASCADE"), primary_key=True)


def _peer_fk() -> Mapped[str]:
    return mapped_column(HOTKEY, ForeignKey(PEER_FK), primary_key=True)


class Peer(Base):
    __tablename__ = "peers"
    hotkey: Mapped[str] = mapped_column(HOTKEY, primary_key=True)
    uid: Mapped[int]
    first_window: Mapped[int]
    last_window: Mapped[int]


class PeerUid(Base):
    """uid history: which uids a hotkey held, and over which windows."""

    __tablename__ = "peer_uids"
    hotkey: Mapped[str] = _peer_fk()
    uid: Mapped[int] = mapped_column(primary_key=True)
    first_window: Mapped[int]
    last_window: Mapped[int]


class Window(Base):
    __tablename__ = "windows"
    __table_args__ = (CheckConstraint(_one_of("state", WINDOW_STATES), name="state"),)
    window: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    state: Mapped[str] = mapped_column(String(16), index=True)
    base_fingerprint: Mapped[str] = mapped_column(DIGEST)
    heldout_seed: Mapped[str] = mapped_column(DIGEST)
    config_digest: Mapped[str] = mapped_column(DIGEST)
    code_version: Mapped[str] = mapped_column(String(64))
    start_block: Mapped[int | None] = mapped_column(BigInteger)
    timings: Mapped[dict[str, Any]]
    aggregate_digests: Mapped[list[Any]]
    clip_reference: Mapped[dict[str, Any]]
    aggregate_weights: Mapped[list[Any] | None]  # aligned with aggregate_digests; None: equal weights
    # committed in salvage after repeated failures: stages were skipped, so replay cannot re-derive it
    salvaged: Mapped[bool] = mapped_column(server_default=false())
    archive_pruned: Mapped[bool] = mapped_column(server_default=false())  # its blobs past retention went
    opened_at: Mapped[datetime]
    committed_at: Mapped[datetime | None]


class Submission(Base):
    __tablename__ = "submissions"
    # a peer's newest windows (its detail in the API) without reading every window's rows
    __table_args__ = (Index("ix_submissions_hotkey_window", "hotkey", "window"),)
    window: Mapped[int] = _window_fk()
    hotkey: Mapped[str] = _peer_fk()
    uid: Mapped[int]
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[str] = mapped_column(Text)
    object_key: Mapped[str | None] = mapped_column(Text)
    etag: Mapped[str | None] = mapped_column(String(256))
    version_id: Mapped[str | None] = mapped_column(String(256))
    size: Mapped[int | None] = mapped_column(BigInteger)
    payload_digest: Mapped[str | None] = mapped_column(DIGEST, index=True)
    content_digest: Mapped[str | None] = mapped_column(DIGEST, index=True)
    decoded_digest: Mapped[str | None] = mapped_column(DIGEST, index=True)
    storage_time: Mapped[datetime | None]
    fetched_time: Mapped[datetime | None]
    first_seen: Mapped[float | None]
    seen_resolution_s: Mapped[float | None]
    norm: Mapped[float | None]
    inflation: Mapped[float | None]


class Evaluation(Base):
    __tablename__ = "evaluations"
    window: Mapped[int] = _window_fk()
    hotkey: Mapped[str] = _peer_fk()
    loss_own_before: Mapped[float]
    loss_own_after: Mapped[float]
    loss_rand_before: Mapped[float]
    loss_rand_after: Mapped[float]
    score: Mapped[float]
    own_gain: Mapped[float]
    indicator: Mapped[int]
    timings: Mapped[dict[str, Any]]
    loss_rand_step: Mapped[float | None]
    pages: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))  # scoring/page_test.py


class Rating(Base):
    """The current rating per peer; `updated_window` is the last window that wrote it."""

    __tablename__ = "ratings"
    hotkey: Mapped[str] = _peer_fk()
    uid: Mapped[int]
    mu: Mapped[float]
    sigma: Mapped[float]
    bma: Mapped[float]
    final_score: Mapped[float] = mapped_column(index=True)
    penalty: Mapped[dict[str, Any]]
    last_evaluated_window: Mapped[int | None]
    updated_window: Mapped[int]
    state: Mapped[dict[str, Any]]


class RatingHistory(Base):
    """Append-only: one row per peer per window, keyed (hotkey, window) for per-peer history reads."""

    __tablename__ = "rating_history"
    hotkey: Mapped[str] = _peer_fk()
    window: Mapped[int] = _window_fk()
    uid: Mapped[int]
    mu: Mapped[float]
    sigma: Mapped[float]
    bma: Mapped[float]
    final_score: Mapped[float]
    penalty: Mapped[dict[str, Any]]
    last_evaluated_window: Mapped[int | None]
    state: Mapped[dict[str, Any]]

    __table_args__ = (Index(None, "window"),)


class Penalty(Base):
    __tablename__ = "penalties"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    window: Mapped[int] = mapped_column(ForeignKey(WINDOW_FK, ondelete="CASCADE"), index=True)
    hotkey: Mapped[str] = mapped_column(HOTKEY, ForeignKey(PEER_FK), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    multiplier: Mapped[float]
    detail: Mapped[str] = mapped_column(Text)
    until_window: Mapped[int | None]


class CopyPair(Base):
    __tablename__ = "copy_pairs"
    window: Mapped[int] = _window_fk()
    hotkey_a: Mapped[str] = mapped_column(HOTKEY, ForeignKey(PEER_FK), primary_key=True)
    hotkey_b: Mapped[str] = mapped_column(HOTKEY, ForeignKey(PEER_FK), primary_key=True)
    overlap: Mapped[float]
    sign_agreement: Mapped[float]
    offender: Mapped[str] = mapped_column(HOTKEY)
    # added later: rows written before carry the defaults (no similarity measured, order clear)
    similarity: Mapped[float] = mapped_column(server_default=text("1.0"))
    baseline: Mapped[float] = mapped_column(server_default=text("0.0"))
    clear: Mapped[bool] = mapped_column(server_default=true())
    # the page test on a's pages of b's update and on b's pages of a's (scoring/authorship.py);
    # None: one payload (each side's own test), not measured, or written before the readings
    authorship_a: Mapped[float | None]
    authorship_b: Mapped[float | None]


class Selection(Base):
    __tablename__ = "selections"
    __table_args__ = (CheckConstraint(_one_of("role", SELECTION_ROLES), name="role"),)
    window: Mapped[int] = _window_fk()
    hotkey: Mapped[str] = _peer_fk()
    uid: Mapped[int]
    role: Mapped[str] = mapped_column(String(16))
    rank: Mapped[int]


class WeightSet(Base):
    """Append-only log of weight-setting attempts (they can fail and be retried)."""

    __tablename__ = "weight_sets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    window: Mapped[int] = mapped_column(index=True)
    block: Mapped[int | None] = mapped_column(BigInteger)
    uids: Mapped[list[Any]]
    weights: Mapped[list[Any]]
    outcome: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    recorded_at: Mapped[datetime]


class Checkpoint(Base):
    """A stored global model: the model at the start of `window`, bytes in the blob store at `key`."""

    __tablename__ = "checkpoints"
    window: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    key: Mapped[str] = mapped_column(Text)
    digest: Mapped[str] = mapped_column(DIGEST)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime]


class LeaderLease(Base):
    """Who sets weights for a hotkey when no Redis holds the leader lock (storage/leases.py)."""

    __tablename__ = "leader_leases"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[float] = mapped_column(Double)  # POSIX seconds, the holder's wall clock


class ResidualSketch(Base):
    """A compared peer's residual sketch in a window (scoring/persistence.py), float16 bytes."""

    __tablename__ = "residual_sketches"
    window: Mapped[int] = _window_fk()
    hotkey: Mapped[str] = _peer_fk()
    seed: Mapped[int] = mapped_column(BigInteger)  # the hash seed, as a signed 64-bit value
    data: Mapped[bytes] = mapped_column(LargeBinary)
