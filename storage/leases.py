"""A named lease with a time to live, held by one holder at a time: the leader lock when no Redis
is configured (validator/telemetry/events.py). A holder renews its own lease; another takes it only
once it has expired. Times are POSIX seconds on the callers' clocks: the TTL (three windows) dwarfs
any skew between hosts.

A holder is named `<id>.<incarnation>`: the id is the work folder's, the incarnation the process's.
A process with the same id but another incarnation (a restart after a crash, or a host started
from a copy of the work folder) takes the lease over only once it has gone unrenewed for half its
TTL: the holder renews it every third of it, so a live one keeps it and a dead one yields within
about one and a half windows, not three."""

from __future__ import annotations

from sqlalchemy import ColumnElement, delete, select, update
from sqlalchemy.orm import Session

from storage import models as m
from storage.dialect import upsert


def take_lease(
    *, session: Session, name: str, holder: str, now: float, ttl_s: float, kin: str | None = None
) -> bool:
    """Take or renew the lease; False while another holder's has not expired, or while one of the
    same id (`kin`, the id without the incarnation) renewed it within half its TTL. Safe to repeat
    (a retried transaction whose first commit landed renews it again)."""
    lease = m.LeaderLease
    mine_or_free = (lease.holder == holder) | (lease.expires_at < now)
    if kin is not None:
        mine_or_free |= kinship(kin) & (lease.expires_at < now + ttl_s / 2)
    renew = (
        update(lease).where(lease.name == name, mine_or_free).values(holder=holder, expires_at=now + ttl_s)
    )
    if session.execute(renew.returning(lease.name)).first() is not None:
        return True
    # RETURNING, not rowcount: psycopg reports -1 for an INSERT .. ON CONFLICT
    insert = upsert(session, lease).values(name=name, holder=holder, expires_at=now + ttl_s)
    taken = insert.on_conflict_do_nothing(index_elements=["name"]).returning(lease.name)
    return session.execute(taken).first() is not None


def kinship(kin: str) -> ColumnElement[bool]:
    """The holder is `kin` itself (a holder from before incarnations) or one of its incarnations."""
    holder = m.LeaderLease.holder
    return (holder == kin) | holder.startswith(f"{kin}.", autoescape=True)


def lease_holder(*, session: Session, name: str) -> str | None:
    lease = m.LeaderLease
    return session.execute(select(lease.holder).where(lease.name == name)).scalar_one_or_none()


def drop_lease(*, session: Session, name: str, holder: str) -> None:
    """Give the lease up, if it is still ours."""
    lease = m.LeaderLease
    session.execute(delete(lease).where(lease.name == name, lease.holder == holder))
