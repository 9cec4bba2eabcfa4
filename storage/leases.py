"""A named lease with a time to live, held by one holder at a time: the leader lock when no Redis
is configured (validator/telemetry/events.py). A holder renews its own lease; another takes it only
once it has expired. Times are POSIX seconds on the callers' clocks: the TTL (three windows) dwarfs
any skew between hosts."""

from __future__ import annotations

from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from storage import models as m
from storage.dialect import upsert


def take_lease(*, session: Session, name: str, holder: str, now: float, ttl_s: float) -> bool:
    """Take or renew the lease; False while another holder's has not expired. Safe to repeat (a
    retried transaction whose first commit landed renews it again)."""
    lease = m.LeaderLease
    mine_or_free = (lease.holder == holder) | (lease.expires_at < now)
    renew = (
        update(lease).where(lease.name == name, mine_or_free).values(holder=holder, expires_at=now + ttl_s)
    )
    if session.execute(renew.returning(lease.name)).first() is not None:
        return True
    # RETURNING, not rowcount: psycopg reports -1 for an INSERT .. ON CONFLICT
    insert = upsert(session, lease).values(name=name, holder=holder, expires_at=now + ttl_s)
    taken = insert.on_conflict_do_nothing(index_elements=["name"]).returning(lease.name)
    return session.execute(taken).first() is not None


def drop_lease(*, session: Session, name: str, holder: str) -> None:
    """Give the lease up, if it is still ours."""
    lease = m.LeaderLease
    session.execute(delete(lease).where(lease.name == name, lease.holder == holder))
