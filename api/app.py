"""The FastAPI application: `create_app(config)` wires it once; `serve` runs it under uvicorn.

The API only reads the database. On Postgres its transactions are READ ONLY, and it can (should)
connect as a role granted nothing but SELECT, e.g.:
    CREATE ROLE gauntlet_api LOGIN PASSWORD '...';
    GRANT CONNECT ON DATABASE gauntlet TO gauntlet_api;
    GRANT USAGE ON SCHEMA public TO gauntlet_api;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO gauntlet_api;
    ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO gauntlet_api;
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from pathlib import Path
from typing import Final

import uvicorn
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles

from api import routes_ops, routes_peers, routes_trends, routes_windows, routes_workers, server
from api.deps import AppState, build_state
from api.events import relay_events
from api.http import (
    HeadAsGetMiddleware,
    InternalErrorMiddleware,
    PolicyStaticFiles,
    SecurityHeadersMiddleware,
    install_error_handlers,
)
from api.metrics import MetricsMiddleware
from api.routes_ops import DASHBOARD_CSP, DOCS_CSP, STATIC_DIR
from api.settings import ApiConfig

# Swagger UI's JS and CSS as the fastapi-offline package ships them (MIT; Swagger UI is Apache-2.0).
SWAGGER_DIR: Final = Path(str(files("fastapi_offline") / "static"))


def _version() -> str:
    try:
        return version("gauntlet-validator")
    except PackageNotFoundError:
        return "0.0.0+local"


def _lifespan(state: AppState) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """Starts the event relay with the server and releases Redis and the pool when it stops."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        relay = None
        if state.config.redis_url is not None:
            relay = asyncio.create_task(
                relay_events(state.config.redis_url, state.config.events_channel, state.broker)
            )
        try:
            yield
        finally:
            if relay is not None:
                relay.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relay
            await state.redis.close()
            state.engine.dispose()

    return lifespan


def create_app(config: ApiConfig) -> FastAPI:
    """The read-only API, its live events and the dashboard, over the database in `config`."""
    state = build_state(config)
    app = FastAPI(
        title="Gauntlet validator API",
        version=_version(),
        description="Read-only view of the validator's decisions: peers, windows, selections, weights.",
        lifespan=_lifespan(state),
        # FastAPI's own pages load Swagger UI and ReDoc from a CDN: routes_ops serves /docs locally.
        docs_url=None,
        redoc_url=None,
        # a redirect to the slashless path took its host from the request's Host header
        redirect_slashes=False,
    )
    app.state.gauntlet = state
    install_error_handlers(app)
    app.include_router(routes_peers.router)
    app.include_router(routes_windows.router)
    app.include_router(routes_trends.router)
    app.include_router(routes_workers.router)
    app.include_router(routes_ops.router)
    # The dashboard's and docs' files carry the policies / and /docs send (docs.html is /docs).
    static = PolicyStaticFiles(directory=STATIC_DIR, default=DASHBOARD_CSP, policies={"docs.html": DOCS_CSP})
    app.mount("/static", static, name="static")
    app.mount("/docs-assets", StaticFiles(directory=SWAGGER_DIR), name="docs-assets")
    if config.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.cors_origins),
            allow_methods=["GET"],
            allow_headers=["If-None-Match"],
            expose_headers=["ETag", "Retry-After"],
        )
    app.add_middleware(InternalErrorMiddleware)  # innermost: its 500s are counted and carry the headers
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(HeadAsGetMiddleware, exclude=frozenset({"/v1/events"}))
    return app


def build_server(config: ApiConfig, host: str = "127.0.0.1", port: int = 8000) -> uvicorn.Server:
    """A uvicorn server for the app; set `.should_exit = True` to stop it (e.g. from the demo)."""
    return server.build_server(create_app(config), config, host, port)


def serve(config: ApiConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the API until interrupted (blocking). Works in a background thread too."""
    build_server(config, host, port).run()
