"""Operations: /healthz, /readyz, /metrics, the live event stream and the dashboard page."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session

from api.deps import AppState, StateDep, client_address, ops_rate_limit, rate_limit
from api.events import ReleasingStream, stream_events
from api.http import ERROR_RESPONSES, ApiError
from api.schemas import ErrorResponse
from api.schemas_ops import Health, Readiness
from api.window_views import below
from storage import migrate
from storage.queries import latest_committed_window, list_windows, schema_revision

METRICS_DATABASE_WAIT_S: Final = 1.0  # how long a scrape waits for the data version

STATIC_DIR: Final = Path(__file__).resolve().parent / "static"
# The dashboard loads nothing from elsewhere: the policy makes the browser enforce it.
DASHBOARD_CSP: Final = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
# Swagger UI sets inline styles on its elements; scripts still come only from this origin.
DOCS_CSP: Final = DASHBOARD_CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
STREAM_RETRY_S: Final = 30  # Retry-After for a refused event stream

_head = functools.cache(migrate.head)  # the revisions shipped with the code do not change
ReadyStatus = Literal["ready", "stale", "not_migrated", "no_windows"]

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    return Health(status="ok")


@dataclass(frozen=True, slots=True)
class _Facts:
    revision: str | None
    latest: int | None
    committed_at: datetime | None


def _facts(session: Session) -> _Facts:
    revision = schema_revision(session=session)
    if revision is None:
        return _Facts(None, None, None)
    latest = latest_committed_window(session=session)
    if latest is None:
        return _Facts(revision, None, None)
    headers = list_windows(session=session, limit=1, before=below(latest))
    return _Facts(revision, latest, headers[0].committed_at if headers else None)


def _verdict(facts: _Facts, age: float | None, max_age: float | None) -> tuple[ReadyStatus, str | None]:
    """Ready means: the schema is the one this code reads, at least one window is committed, and the
    newest commit is recent enough (when `max_age` is set). Anything else is a 503 with a reason."""
    if facts.revision != _head():
        return "not_migrated", f"database at revision {facts.revision}, this code reads {_head()}"
    if facts.latest is None:
        return "no_windows", "no window committed yet"
    if max_age is not None and age is not None and age > max_age:
        return "stale", f"newest commit is {age:.0f} s old (limit {max_age:.0f} s)"
    return "ready", None


async def _readiness(state: AppState) -> tuple[int, bytes]:
    redis: Literal["up", "down", "disabled"] = "disabled"
    if state.redis.configured:
        redis = "up" if await state.redis.call(lambda r: r.ping()) else "down"
    try:
        facts = await state.read(_facts)
    except DBAPIError:
        body = Readiness(
            status="unavailable",
            reason="the database cannot be reached",
            database=False,
            redis=redis,
            latest_committed_window=None,
            last_commit_age_s=None,
        )
        return 503, body.model_dump_json().encode()
    age = None if facts.committed_at is None else (datetime.now(UTC) - facts.committed_at).total_seconds()
    status, reason = _verdict(facts, age, state.config.max_commit_age_s)
    body = Readiness(
        status=status,
        reason=reason,
        database=True,
        redis=redis,
        latest_committed_window=facts.latest,
        last_commit_age_s=age,
    )
    return 200 if status == "ready" else 503, body.model_dump_json().encode()


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Database reachable and migrated, a window committed, the newest commit recent enough",
    responses={503: {"model": Readiness, "description": "not ready"}},
)
async def readyz(state: StateDep) -> Response:
    # Computed at most once per `readiness_ttl_s`: probes cannot turn into a database load.
    status, body = await state.readiness.get(lambda: _readiness(state))
    return Response(body, status_code=status, media_type="application/json")


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    summary="Prometheus metrics",
    responses={429: ERROR_RESPONSES[429]},
    dependencies=[Depends(ops_rate_limit)],
)
async def metrics(state: StateDep) -> Response:
    """The API's own metrics, served while the database is down too (`gauntlet_api_database_up` 0
    then, and the newest committed window as last seen)."""
    m = state.metrics
    m.redis_up.set(1 if state.redis.up else 0)
    m.sse_clients.set(state.broker.n_clients)
    # Waited for briefly: a database that takes connections and never answers held every scrape for
    # its connect timeout (10 s, a scraper's own timeout). The read goes on, one at a time.
    read = asyncio.ensure_future(state.commits.latest())
    read.add_done_callback(lambda task: task.cancelled() or task.exception())  # retrieved: no warning
    try:
        latest = await asyncio.wait_for(asyncio.shield(read), METRICS_DATABASE_WAIT_S)
    except (SQLAlchemyError, TimeoutError):
        m.database_up.set(0)
    else:
        m.database_up.set(1 if state.commits.up else 0)  # a read failed lately: the version as last seen
        if latest is not None:
            m.latest_committed.set(latest)
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/v1/events",
    summary="Live events (server-sent): window_opened, peer_scored, window_committed, weights_set",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "an event stream, closed after a while"},
        429: ERROR_RESPONSES[429],
        503: {"model": ErrorResponse, "description": "too many open streams (see Retry-After)"},
    },
    dependencies=[Depends(rate_limit)],
)
async def events(request: Request, state: StateDep) -> StreamingResponse:
    client = client_address(request)
    if not state.streams.acquire(client):
        state.metrics.streams_refused.inc()
        raise ApiError(
            503, "too_many_streams", "too many open event streams", {"Retry-After": str(STREAM_RETRY_S)}
        )
    return ReleasingStream(
        stream_events(state.broker, state.config.keepalive_s, state.config.stream_max_s),
        on_close=lambda: state.streams.release(client),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/", include_in_schema=False)
async def dashboard() -> FileResponse:
    return FileResponse(
        STATIC_DIR / "index.html",
        headers={"Content-Security-Policy": DASHBOARD_CSP, "Cache-Control": "no-cache"},
    )


@router.get("/docs", include_in_schema=False)
async def docs() -> FileResponse:
    """Swagger UI, served with its assets from this process (works offline, no CDN)."""
    return FileResponse(
        STATIC_DIR / "docs.html", headers={"Content-Security-Policy": DOCS_CSP, "Cache-Control": "no-cache"}
    )
