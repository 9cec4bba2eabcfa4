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

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from storage.db import DatabaseConfig, run_in_transaction
from storage.leases import drop_lease, take_lease

log = structlog.get_logger(__name__)


class LeaseLock:
    def __init__(
        self,
        engine: Engine,
        hotkey: str,
        *,
        ttl_s: float,
        token: str,
        db: DatabaseConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`token` names the holder; a stable one (host and work folder) lets a restarted process
        take its own lease back at once instead of waiting out the TTL."""
        self.engine, self.name, self.ttl_s, self.token = engine, f"leader:{hotkey}", ttl_s, token
        self.db, self.clock = db, clock

    def acquire(self) -> bool:
        """Take or renew the lease; False while another process holds it or the database fails."""
        try:
            return run_in_transaction(
                self.engine,
                lambda s: take_lease(
                    session=s, name=self.name, holder=self.token, now=self.clock(), ttl_s=self.ttl_s
                ),
                config=self.db,
            )
        except SQLAlchemyError as e:
            log.warning("leader_lease_unavailable", error=str(e))
            return False

    def release(self) -> None:
        try:
            run_in_transaction(
                self.engine,
                lambda s: drop_lease(session=s, name=self.name, holder=self.token),
                config=self.db,
            )
        except SQLAlchemyError as e:
            log.warning("leader_lease_release_failed", error=str(e))
