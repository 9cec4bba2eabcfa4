"""The few dialect-specific pieces: INSERT .. ON CONFLICT exists on Postgres and SQLite alike."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from storage import models as m


def table_of(model: type[m.Base]) -> Table:
    return cast(Table, model.__table__)


def upsert(session: Session, model: type[m.Base]) -> Any:
    """An INSERT that supports `on_conflict_do_nothing/do_update` and `.excluded` on this dialect."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table_of(model))
    if dialect == "sqlite":
        return sqlite.insert(table_of(model))
    # Postgres and SQLite are the two databases the project supports (DESIGN.md §9).
    raise ValueError(f"unsupported database dialect {dialect!r}: use postgresql or sqlite")
