"""What every `gauntlet` sub-command shares: one-line failures, the start-up line, port checks."""

from __future__ import annotations

import errno
import json
import socket
from pathlib import Path
from typing import Any, NoReturn

import structlog
import typer
from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from scoring.checkpoint import config_from_hf, weight_map
from scoring.data import Dataset
from storage import queries
from storage.db import make_engine
from validator import wiring
from validator.settings import Settings
from validator.wiring import code_version

log = structlog.get_logger(__name__)


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr naming the problem (and what to do), then exit: never a traceback."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    raise typer.Exit(code)


def invalid_configuration(e: ValidationError) -> NoReturn:
    """A settings error as one line: each problem names its field; the values (maybe secrets) stay out."""
    problems = "; ".join(f"{'.'.join(map(str, p['loc'])) or 'settings'}: {p['msg']}" for p in e.errors())
    fail(f"invalid configuration: {problems}")


def db_error(e: SQLAlchemyError) -> str:
    """The driver's own first line ("connection refused", "database does not exist"), not
    SQLAlchemy's wrapper with its statement and background link."""
    inner = getattr(e, "orig", None) or e
    lines = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {lines[0] if lines else ''}"


def open_dataset(s: Settings) -> Dataset:
    """The token shards the validator draws pages from (wiring), or one line saying what is missing."""
    try:
        return wiring.open_dataset(s)
    except ValueError as e:
        fail(str(e))


def check_model_path(s: Settings) -> None:
    """A configured checkpoint that is absent or not a LLaMA layout we implement fails at start,
    in one line, not after the chain and database are connected."""
    if s.model_path is None:
        return
    root = Path(s.model_path)
    if not (root / "config.json").is_file():
        fail(f"no checkpoint at {root.resolve()}: config.json is missing (GAUNTLET_MODEL_PATH)")
    try:
        config_from_hf(json.loads((root / "config.json").read_text()))
        weight_map(root)
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"cannot load the checkpoint at {root.resolve()}: {type(e).__name__}: {e}")


def port_in_use(host: str, port: int) -> bool:
    """Whether binding `host:port` fails now, checked before minutes of work depend on it.

    SO_REUSEADDR as uvicorn sets it, so a socket in TIME_WAIT from our last run does not count."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def sqlite_file(url: str) -> Path | None:
    """The file behind a sqlite URL (None for Postgres and in-memory SQLite)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def store_of(s: Settings) -> str:
    """Where archived submissions and checkpoints go, as the start-up line names it."""
    return s.masked()["archive_url"] or str((Path(s.workdir) / "blobs").resolve())


def log_startup(command: str, s: Settings, **extra: Any) -> None:
    """One line an operator can check at a glance: which code, which subnet, which key, which data."""
    fields: dict[str, Any] = {
        "command": command, "version": code_version(), "chain": s.chain, "network": s.network,
        "netuid": s.netuid, "wallet": f"{s.wallet_name}/{s.wallet_hotkey}", "hotkey": None,
        "database": s.masked()["database_url"], "store": store_of(s), "device": s.device, "model": None,
    }  # fmt: skip
    log.info("startup", **(fields | extra))


def latest_base(s: Settings) -> tuple[int | None, str | None]:
    """The last committed window and its model fingerprint, as the API will serve them (None, None
    when nothing is committed or the database is unreachable: the API starts anyway and says so)."""
    path = sqlite_file(s.database_url)
    if path is not None and not path.exists():
        return None, None
    engine = make_engine(s.database_url)
    try:
        with Session(engine) as session:
            window = queries.latest_committed_window(session=session)
            detail = None if window is None else queries.window_detail(session=session, window=window)
    except SQLAlchemyError:
        return None, None
    finally:
        engine.dispose()
    return window, None if detail is None else detail.base_fingerprint
