"""The leader lock in the database, for a validator without Redis.

Without Redis the lock used to be held by declaration, so two validators sharing one database (two
hosts on one Postgres, each with its own work folder, which the work folder's lock cannot see) both
set weights for the same hotkey. The lease row (storage/leases.py) decides instead: the holder
renews it every window, another process takes it once it has expired. Like the Redis lock it fails
closed: a database it cannot reach makes this process a follower for that window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from storage.db import DatabaseConfig, run_in_transaction
from storage.leases import drop_lease, lease_holder, take_lease
from validator.telemetry.holder import SHARED, Holder, is_kin

log = structlog.get_logger(__name__)


class LeaseLock:
    def __init__(
        self,
        engine: Engine,
        hotkey: str,
        *,
        ttl_s: float,
        holder: Holder,
        db: DatabaseConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`holder` is the work folder's id and this process's incarnation: a restarted process
        takes over its own lease once it has gone unrenewed for half the TTL, not the whole of it,
        while a live copy of the work folder keeps it (validator/telemetry/holder.py). One attempt a
        call: a lease that cannot be read is a follower's window, and retrying held each window (and
        the release at shutdown) for about 8 s with the database refusing connections."""
        self.engine, self.name, self.ttl_s = engine, f"leader:{hotkey}", ttl_s
        self.holder, self.token = holder.id, holder.token
        self.db, self.clock = replace(db or DatabaseConfig(), retry_attempts=1), clock

    def acquire(self) -> bool:
        """Take or renew the lease; False while another process holds it or the database fails."""

        def attempt(s: Session) -> str | None:
            """None when taken, else the holder who keeps it (to tell a copy of this work folder)."""
            now, name = self.clock(), self.name
            if take_lease(
                session=s, name=name, holder=self.token, now=now, ttl_s=self.ttl_s, kin=self.holder
            ):
                return None
            return lease_holder(session=s, name=name) or ""

        try:
            other = run_in_transaction(self.engine, attempt, config=self.db)
        except SQLAlchemyError as e:
            log.warning("leader_lease_unavailable", error=str(e))
            return False
        if other is not None and is_kin(other, self.holder):
            log.warning("leader_id_shared", holder=self.holder, detail=SHARED)
        return other is None

    def release(self) -> None:
        try:
            run_in_transaction(
                self.engine,
                lambda s: drop_lease(session=s, name=self.name, holder=self.token),
                config=self.db,
            )
        except SQLAlchemyError as e:
            log.warning("leader_lease_release_failed", error=str(e))
