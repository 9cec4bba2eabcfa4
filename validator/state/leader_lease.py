"""The leader lock in the database, for a validator without Redis.

Without Redis the lock used to be held by declaration, so two validators sharing one database (two
hosts on one Postgres, each with its own work folder, which the work folder's lock cannot see) both
set weights for the same hotkey. The lease row (storage/leases.py) decides instead: the holder
renews it every window, another process takes it once it has expired. Like the Redis lock it fails
closed: a database it cannot reach makes this process a follower for that window.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

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
        """`token` names the holder; a stable one (`holder_id`) lets a restarted process take its
        own lease back at once instead of waiting out the TTL. One attempt a call: a lease that
        cannot be read is a follower's window, and retrying held each window (and the release at
        shutdown) for about 8 s with the database refusing connections."""
        self.engine, self.name, self.ttl_s, self.token = engine, f"leader:{hotkey}", ttl_s, token
        self.db, self.clock = replace(db or DatabaseConfig(), retry_attempts=1), clock

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


HOLDER_FILE = "leader-id"


def holder_id(workdir: Path) -> str:
    """This work folder's name as a leader: random, written once. A hash of the host name and the
    folder's path named two hosts with the same name (a cloud image's default, a container's fixed
    `hostname:`) and the documented folder alike, and both led; and a container re-created under a
    new host name stayed a follower of its own earlier lease for three windows."""
    path = Path(workdir) / HOLDER_FILE
    try:
        return uuid.UUID(hex=path.read_text().strip()).hex  # damaged (ValueError): a new id
    except (FileNotFoundError, ValueError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    tmp = path.with_name(f".{HOLDER_FILE}.{token}")
    tmp.write_text(token + "\n")
    tmp.replace(path)  # the work folder's lock keeps a second process out; a rename is whole or absent
    return token
