"""Alembic owns the schema: upgrade/downgrade/upgrade on Postgres and SQLite, and no drift from the models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from storage.db import database_url, make_engine
from storage.migrate import current, downgrade, head, upgrade
from storage.models import Base


def _schema_diff(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade_matches_models(db_url: str) -> None:
    assert current(db_url) is None
    upgrade(db_url)
    assert current(db_url) == head()
    assert _schema_diff(db_url) == []
    downgrade(db_url, "base")
    assert current(db_url) is None
    assert _tables(db_url) <= {"alembic_version"}
    assert _schema_diff(db_url) != []  # the comparison does see a schema that differs
    upgrade(db_url)
    assert current(db_url) == head()
    assert _schema_diff(db_url) == []
    assert {"windows", "rating_history", "weight_sets", "checkpoints"} <= _tables(db_url)


def test_revision_ids_are_dated() -> None:
    assert head().startswith("2026")


def test_database_url_comes_from_the_environment() -> None:
    assert database_url({}) == "sqlite:///gauntlet.db"
    url = "postgresql+psycopg://postgres@127.0.0.1:5432/x"
    assert database_url({"GAUNTLET_DATABASE_URL": url}) == url
