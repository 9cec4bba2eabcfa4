"""Operator commands: `gauntlet run`, `gauntlet db upgrade|current`, `gauntlet config show`."""

from __future__ import annotations

import contextlib
import json
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer
from alembic.util.exc import CommandError
from prometheus_client import start_http_server
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from scoring.model import LlamaModel
from storage import migrate
from validator.chain.protocol import WindowConfig
from validator.cli.common import (
    check_model_path,
    db_error,
    fail,
    invalid_configuration,
    log_startup,
    open_dataset,
    sqlite_file,
    store_of,
)
from validator.round.loop import Round, WindowState
from validator.service import install_sigterm, serve
from validator.settings import Settings
from validator.state.workdir_lock import WorkdirBusy, held_workdir
from validator.telemetry.logs import configure_logging
from validator.telemetry.metrics import Metrics
from validator.wiring import ChainLink, build_round, chain_for, load_model

db_app = typer.Typer(no_args_is_help=True, help="Database migrations (Alembic).")
config_app = typer.Typer(no_args_is_help=True, help="Configuration.")


def load_settings() -> Settings:
    """Settings from the environment and GAUNTLET_CONFIG; a bad value names its field and exits 1."""
    try:
        return Settings()
    except ValidationError as e:
        invalid_configuration(e)
    except ValueError as e:
        fail(f"invalid configuration: {e}")


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Apply migrations to GAUNTLET_DATABASE_URL."""
    s = load_settings()
    try:
        migrate.upgrade(s.database_url, revision)
    except SQLAlchemyError as e:
        fail(f"cannot migrate {s.masked()['database_url']}: {db_error(e)}")
    except CommandError as e:  # an unknown or ambiguous revision
        fail(f"cannot migrate to {revision!r}: {e} (this code's head is {migrate.head()})")
    typer.echo(
        json.dumps({"database": s.masked()["database_url"], "revision": migrate.current(s.database_url)})
    )


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision (one step back: `-- -1`)")],
) -> None:
    """Roll the schema back (take a backup first: a downgrade can drop columns)."""
    s = load_settings()
    require_database(s)
    try:
        migrate.downgrade(s.database_url, revision)
    except SQLAlchemyError as e:
        fail(f"cannot migrate {s.masked()['database_url']}: {db_error(e)}")
    except CommandError as e:
        fail(f"cannot downgrade to {revision!r}: {e}")
    typer.echo(
        json.dumps({"database": s.masked()["database_url"], "revision": migrate.current(s.database_url)})
    )


@db_app.command("current")
def db_current() -> None:
    """Print the database's current revision (null before the first upgrade)."""
    s = load_settings()
    require_database(s)
    try:
        revision = migrate.current(s.database_url)
    except SQLAlchemyError as e:
        fail(f"cannot reach the database {s.masked()['database_url']}: {db_error(e)}")
    typer.echo(json.dumps({"revision": revision, "head": migrate.head()}))


def require_database(s: Settings) -> None:
    """Reading a SQLite URL whose file is absent would create an empty database (by default
    `gauntlet.db` in whatever folder the command ran in): say where it looked instead."""
    path = sqlite_file(s.database_url)
    if path is not None and not path.exists():
        fail(
            f"no database at {path.resolve()}: set GAUNTLET_DATABASE_URL or GAUNTLET_CONFIG, "
            "or create it with `gauntlet db upgrade`"
        )


@config_app.command("show")
def config_show() -> None:
    """Print the effective configuration, secrets masked."""
    typer.echo(json.dumps(load_settings().masked(), indent=2, sort_keys=True))


def connect_chain(s: Settings) -> tuple[ChainLink, int]:
    """The chain and its head block, or one line: a wallet key that is not there, an endpoint
    that does not answer (the SDK raises its own error types, not OSError)."""
    errors: tuple[type[BaseException], ...] = (OSError,)
    if s.chain == "subtensor":
        from bittensor.result import BittensorError

        errors += (BittensorError,)
    link: ChainLink | None = None
    try:
        link = chain_for(s)
        return link, link.chain.block()
    except FileNotFoundError as e:  # before OSError: the wallet, not the network
        fail(f"cannot open the validator's hotkey: {e} (GAUNTLET_WALLET_NAME, _HOTKEY, _PATH)")
    except errors as e:
        # Closed here, not left to the SDK's finalizer at exit: collected after the interpreter
        # began tearing down, its event loop printed a traceback under our one-line error.
        close = getattr(link.chain, "close", None) if link is not None else None
        if callable(close):
            with contextlib.suppress(Exception):
                close()
        fail(f"cannot reach the chain {s.network}: {type(e).__name__}: {e}")


def run(
    windows: Annotated[
        int | None, typer.Option(help="Stop after this many windows (default: run forever)")
    ] = None,
) -> None:
    """Run the validator beside a subnet (GAUNTLET_CHAIN=subtensor) or a local chain."""
    s = load_settings()
    configure_logging()
    with ExitStack() as held:
        try:  # released when the run returns, or by the kernel however the process ends
            held.enter_context(held_workdir(Path(s.workdir)))
        except WorkdirBusy as e:
            fail(f"{e}: one validator per work folder (stop the other, or give this one its own)")
        _run(s, windows)


def _run(s: Settings, windows: int | None) -> None:
    dataset = open_dataset(s)
    check_model_path(s)
    link, head = connect_chain(s)
    metrics = Metrics()
    start = max(WindowConfig(s.blocks_per_window).window_of(head) - 1, 0)

    def connect(model: LlamaModel) -> tuple[Round, WindowState]:
        return build_round(s, link, dataset=dataset, model=model, start_window=start, metrics=metrics)

    stop = threading.Event()
    install_sigterm(stop)  # before the first connect: a stop asked for while it runs is honoured
    try:
        first, state = connect(load_model(s, dataset))
    except KeyError as e:  # a checkpoint the database names is not in the store (deploy/README.md §5)
        fail(f"checkpoint {e.args[0]} is missing from {store_of(s)}: restore it from the database's backup")
    except LookupError as e:  # a database newer than its work folder
        fail(f"{e}: restore {Path(s.workdir).resolve()} from the same backup as the database")
    except SQLAlchemyError as e:
        fail(f"cannot reach the database {s.masked()['database_url']}: {db_error(e)}")
    device = next(state.model.model.parameters()).device
    log_startup("run", s, hotkey=link.hotkey, device=str(device), model=state.model.base, window=start)
    if s.metrics_port is not None:
        start_http_server(s.metrics_port, addr=s.api_host, registry=metrics.registry)
    # a rebuild restores the model into the old one's memory
    serve(first, state, stop=stop, reconnect=lambda rnd, old: connect(old.model.model), max_windows=windows)
