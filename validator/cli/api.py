"""`gauntlet api`, and the API thread the demo runs beside its windows."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Annotated

import typer
import uvicorn

from api.app import build_server, serve
from api.settings import ApiConfig
from validator.settings import Settings
from validator.telemetry.logs import configure_logging


def api_config(s: Settings, labels: Mapping[str, str] | None = None) -> ApiConfig:
    """The API's config from the settings; `labels` names peers' behaviours (the demo knows them)."""
    return ApiConfig(
        database_url=s.database_url,
        redis_url=s.redis_url,
        cors_origins=tuple(s.cors_origins),
        rate_limit_per_minute=s.rate_limit_per_minute,
        max_commit_age_s=s.api_max_commit_age_s,
        trusted_proxies=tuple(s.api_trusted_proxies),
        peer_labels=tuple(sorted((labels or {}).items())),
    )


def api(
    host: Annotated[str | None, typer.Option(help="Bind address (default GAUNTLET_API_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default GAUNTLET_API_PORT)")] = None,
) -> None:
    """Serve the read-only REST API, live events, metrics and the dashboard."""
    from validator.cli.common import fail, latest_base, log_startup, port_in_use
    from validator.cli.ops import load_settings

    s = load_settings()
    host, port = host or s.api_host, port or s.api_port
    if port_in_use(host, port):
        fail(f"port {port} on {host} is in use: pass another --port (or GAUNTLET_API_PORT)")
    configure_logging()
    window, base = latest_base(s)
    log_startup("api", s, host=host, port=port, window=window, model=base)
    serve(api_config(s), host, port)


def serve_in_thread(
    s: Settings, host: str, port: int, labels: Mapping[str, str] | None = None
) -> tuple[uvicorn.Server, threading.Thread]:
    """The API in a daemon thread; set `server.should_exit = True` to stop it."""
    server = build_server(api_config(s, labels), host, port)
    thread = threading.Thread(target=server.run, name="gauntlet-api", daemon=True)
    thread.start()
    return server, thread
