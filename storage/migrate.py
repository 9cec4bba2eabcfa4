"""Alembic driven from code, so `gauntlet db upgrade|current` works from an installed package."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

from storage.db import make_engine


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at the packaged `migrations/` folder; no alembic.ini needed."""
    config = Config()
    config.set_main_option("script_location", str(Path(str(files("migrations")))))
    # configparser interpolation would eat a '%' in a URL-encoded password.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@contextmanager
def _connected(url: str | Engine) -> Iterator[tuple[Config, Connection]]:
    engine = make_engine(url) if isinstance(url, str) else url
    try:
        with engine.begin() as connection:
            config = alembic_config(engine.url.render_as_string(hide_password=False))
            config.attributes["connection"] = connection
            yield config, connection
    finally:
        if isinstance(url, str):
            engine.dispose()


def upgrade(url: str | Engine, revision: str = "head") -> None:
    with _connected(url) as (config, _):
        command.upgrade(config, revision)


def downgrade(url: str | Engine, revision: str) -> None:
    with _connected(url) as (config, _):
        command.downgrade(config, revision)


def current(url: str | Engine) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    with _connected(url) as (_, connection):
        return MigrationContext.configure(connection).get_current_revision()


def head() -> str:
    """The newest revision shipped with this code."""
    heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"expected one migration head, found {heads}")
    return heads[0]
