"""Operator commands: `gauntlet run`, `gauntlet db upgrade|current`, `gauntlet config show`."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Annotated

import typer
from prometheus_client import start_http_server
from sqlalchemy.exc import SQLAlchemyError

from scoring.data import Dataset
from scoring.signing import Signer, dev_keypair
from storage import migrate
from validator.chain import Chain, WindowConfig
from validator.commitments import LocationPolicy
from validator.logs import configure_logging
from validator.metrics import Metrics
from validator.round import Round
from validator.service import install_sigterm, serve
from validator.settings import Settings
from validator.wiring import build_round, load_model

db_app = typer.Typer(no_args_is_help=True, help="Database migrations (Alembic).")
config_app = typer.Typer(no_args_is_help=True, help="Configuration.")


def load_settings() -> Settings:
    """Settings from the environment and GAUNTLET_CONFIG; a bad value names its field and exits 1."""
    try:
        return Settings()
    except ValueError as e:  # pydantic's ValidationError included: it names the field
        typer.echo(f"invalid configuration:\n{e}", err=True)
        raise typer.Exit(1) from None


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Apply migrations to GAUNTLET_DATABASE_URL."""
    s = load_settings()
    try:
        migrate.upgrade(s.database_url, revision)
    except SQLAlchemyError as e:
        typer.echo(f"cannot migrate {s.masked()['database_url']}: {type(e).__name__}: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(
        json.dumps({"database": s.masked()["database_url"], "revision": migrate.current(s.database_url)})
    )


@db_app.command("current")
def db_current() -> None:
    """Print the database's current revision (null before the first upgrade)."""
    s = load_settings()
    typer.echo(json.dumps({"revision": migrate.current(s.database_url), "head": migrate.head()}))


@config_app.command("show")
def config_show() -> None:
    """Print the effective configuration, secrets masked."""
    typer.echo(json.dumps(load_settings().masked(), indent=2, sort_keys=True))


def _chain(s: Settings) -> tuple[Chain, str | None, LocationPolicy, Signer]:
    if s.chain == "subtensor":
        from validator.subtensor_chain import SubtensorChain, SubtensorChainConfig

        sub = SubtensorChain(
            SubtensorChainConfig(
                network=s.network, netuid=s.netuid, wallet_name=s.wallet_name, hotkey_name=s.wallet_hotkey,
                wallet_path=str(s.wallet_path) if s.wallet_path else None,
            )
        )  # fmt: skip
        policy = LocationPolicy(allowed_host_suffixes=tuple(s.storage_host_suffixes))
        return sub, sub.hotkey, policy, sub.signer
    from validator.local_chain import LocalChain, LocalChainConfig

    signer = dev_keypair(s.local_validator_uri)  # the demo registers this key as uid 0
    path = Path(s.workdir) / "chain.sqlite"
    local = LocalChain(LocalChainConfig(path, validator_hotkey=signer.ss58_address, auto_advance=False))
    return local, signer.ss58_address, LocationPolicy.local(), signer


def run(
    windows: Annotated[
        int | None, typer.Option(help="Stop after this many windows (default: run forever)")
    ] = None,
) -> None:
    """Run the validator beside a subnet (GAUNTLET_CHAIN=subtensor) or a local chain."""
    s = load_settings()
    configure_logging()
    if s.dataset_path is None:
        typer.echo(
            "GAUNTLET_DATASET_PATH is required (a folder of token shards with manifest.json)", err=True
        )
        raise typer.Exit(1)
    dataset = Dataset.open(s.dataset_path, seq_len=s.seq_len)
    chain, hotkey, locations, signer = _chain(s)
    metrics = Metrics()
    if s.metrics_port is not None:
        start_http_server(s.metrics_port, addr=s.api_host, registry=metrics.registry)
    start = max(WindowConfig(s.blocks_per_window).window_of(chain.block()) - 1, 0)

    def connect(old: Round | None = None) -> Round:
        model = old.model.model if old is not None else load_model(s, dataset)  # restore loads in place
        return build_round(
            s, chain, dataset=dataset, model=model, start_window=start,
            validator_hotkey=hotkey, locations=locations, metrics=metrics, signer=signer,
        )  # fmt: skip

    stop = threading.Event()
    install_sigterm(stop)
    serve(
        connect(),
        stop=stop,
        reconnect=connect,
        put_window_s=s.put_window_s,
        grace_s=s.put_grace_s,
        max_windows=windows,
    )
