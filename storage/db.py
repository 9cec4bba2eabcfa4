"""Engines and sessions for a long-running process: pre-ping, statement timeouts, bounded retries."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

DEFAULT_DATABASE_URL = "sqlite:///gauntlet.db"
DATABASE_URL_ENV = "GAUNTLET_DATABASE_URL"

log = logging.getLogger(__name__)
T = TypeVar("T")


def database_url(environ: Mapping[str, str] | None = None) -> str:
    """The database URL from `GAUNTLET_DATABASE_URL`, else a SQLite file in the working folder."""
    env = os.environ if environ is None else environ
    return env.get(DATABASE_URL_ENV) or DEFAULT_DATABASE_URL


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    """How to connect and how hard to retry when the connection is lost."""

    url: str = DEFAULT_DATABASE_URL
    statement_timeout_ms: int = 30_000
    connect_timeout_s: int = 10
    pool_size: int = 5
    retry_attempts: int = 6
    retry_backoff_s: float = 0.25
    retry_max_backoff_s: float = 4.0
    sqlite_busy_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        make_url(self.url)  # raises on a malformed URL, before anything connects
        if self.statement_timeout_ms <= 0 or self.connect_timeout_s <= 0 or self.pool_size <= 0:
            raise ValueError("timeouts and pool size must be positive")
        if self.retry_attempts < 1:
            raise ValueError("retry_attempts must be >= 1")
        if not 0 < self.retry_backoff_s <= self.retry_max_backoff_s:
            raise ValueError("need 0 < retry_backoff_s <= retry_max_backoff_s")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets API readers run beside the writer; foreign keys are off by default in SQLite.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(url: str | DatabaseConfig) -> Engine:
    """An engine with pre-ping; on Postgres a server-side statement timeout and a bounded pool."""
    config = url if isinstance(url, DatabaseConfig) else DatabaseConfig(url=url)
    parsed = make_url(config.url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(
            parsed,
            pool_pre_ping=True,
            connect_args={"timeout": config.sqlite_busy_timeout_s, "check_same_thread": False},
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    connect_args: dict[str, Any] = {"connect_timeout": config.connect_timeout_s}
    if parsed.get_backend_name() == "postgresql":
        # TimeZone: timestamps are rendered in UTC whatever the server's default. A peer's store
        # may claim a Last-Modified of 9999-12-31; east of UTC that renders as year 10000, which
        # psycopg cannot read, and every read of the window would fail.
        connect_args["options"] = f"-c statement_timeout={config.statement_timeout_ms} -c TimeZone=UTC"
    return create_engine(
        parsed,
        pool_pre_ping=True,
        pool_size=config.pool_size,
        max_overflow=config.pool_size,
        pool_recycle=3600,
        connect_args=connect_args,
    )


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: commits when the block ends, rolls back if it raises."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        yield session


# A statement timeout (57014) would only time out again; everything else operational is transient:
# a dropped connection, an unreachable server, a deadlock, or SQLite's "database is locked".
_NOT_RETRIED_SQLSTATES = frozenset({"57014"})


def is_connection_error(exc: BaseException) -> bool:
    """True for errors worth retrying: the connection dropped or the server was unreachable."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if getattr(getattr(exc, "orig", None), "sqlstate", None) in _NOT_RETRIED_SQLSTATES:
        return False
    return isinstance(exc, OperationalError)


def run_in_transaction(
    engine: Engine, work: Callable[[Session], T], *, config: DatabaseConfig | None = None
) -> T:
    """Run `work` in its own transaction, retrying with exponential backoff on connection loss.

    `work` must be safe to repeat (every repository writer is idempotent), because a commit whose
    acknowledgement was lost is indistinguishable from one that never happened.
    """
    policy = config or DatabaseConfig()
    delay = policy.retry_backoff_s
    for attempt in range(1, policy.retry_attempts + 1):
        try:
            with session_scope(engine) as session:
                return work(session)
        except (OperationalError, DBAPIError) as exc:
            if attempt == policy.retry_attempts or not is_connection_error(exc):
                raise
            log.warning("database connection lost (attempt %d): %s", attempt, exc.orig)
            time.sleep(delay)
            delay = min(delay * 2, policy.retry_max_backoff_s)
    raise AssertionError("unreachable")  # the loop returns or raises
