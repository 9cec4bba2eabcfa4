"""The per-app state every route reads, and how a route reads the database (never writes it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, HTTPException, Request
from fastapi.responses import Response
from pydantic import BaseModel
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.cache import CommitTracker, DataVersion, ResponseCache, TimedMemo, WindowMemo
from api.clients import client_key
from api.events import EventBroker, StreamSlots
from api.http import LIVE, dump, json_response
from api.metrics import ApiMetrics
from api.ratelimit import RateLimiter
from api.redis_gate import RedisGate
from api.settings import ApiConfig
from storage.db import DatabaseConfig, make_engine
from storage.queries import latest_committed_window, latest_weight_set

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AppState:
    config: ApiConfig
    engine: Engine
    sessions: sessionmaker[Session]
    redis: RedisGate
    cache: ResponseCache
    limiter: RateLimiter
    ops_limiter: RateLimiter
    commits: CommitTracker
    memo: WindowMemo
    broker: EventBroker
    metrics: ApiMetrics
    streams: StreamSlots
    readiness: TimedMemo[tuple[int, bytes]]  # (status code, body) of /readyz

    def read_sync(self, work: Callable[[Session], T]) -> T:
        """Run `work` in one session that is rolled back, never committed."""
        with self.sessions() as session:
            return work(session)

    async def read(self, work: Callable[[Session], T]) -> T:
        """`read_sync` in the threadpool: database calls never block the event loop."""
        return await run_in_threadpool(self.read_sync, work)


def read_only_engine(config: ApiConfig) -> Engine:
    """An engine whose Postgres transactions are READ ONLY: a write fails even under a writer role."""
    engine = make_engine(
        DatabaseConfig(
            url=config.database_url,
            statement_timeout_ms=config.statement_timeout_ms,
            pool_size=config.pool_size,
        )
    )
    if make_url(config.database_url).get_backend_name() == "postgresql":
        return engine.execution_options(postgresql_readonly=True)
    return engine


def data_version(session: Session) -> DataVersion:
    """The newest committed window and the newest weight-setting attempt's id (the primary key's
    maximum: one index lookup)."""
    return DataVersion(latest_committed_window(session=session), latest_weight_set(session=session))


def build_state(config: ApiConfig) -> AppState:
    engine = read_only_engine(config)
    sessions = sessionmaker(engine, expire_on_commit=False)
    metrics = ApiMetrics()
    gate = RedisGate(config.redis_url, timeout_s=config.redis_timeout_s, retry_s=config.redis_retry_s)

    def read_version() -> DataVersion:
        with sessions() as session:
            return data_version(session)

    commits = CommitTracker(read_version, config.commit_refresh_s)

    def on_event(event: dict[str, object]) -> None:
        metrics.events.labels(str(event["type"])).inc()
        commits.note_event(event)

    return AppState(
        config=config,
        engine=engine,
        sessions=sessions,
        redis=gate,
        cache=ResponseCache(gate, prefix=config.redis_prefix, ttl_s=config.cache_ttl_s, metrics=metrics),
        limiter=RateLimiter(gate, prefix=config.redis_prefix, per_minute=config.rate_limit_per_minute),
        ops_limiter=RateLimiter(
            gate, prefix=f"{config.redis_prefix}ops:", per_minute=config.ops_rate_limit_per_minute
        ),
        commits=commits,
        memo=WindowMemo(config.window_memo_size),
        broker=EventBroker(on_event),
        metrics=metrics,
        streams=StreamSlots(config.max_streams, config.max_streams_per_client),
        readiness=TimedMemo(config.readiness_ttl_s),
    )


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.gauntlet
    return state


StateDep = Annotated[AppState, Depends(get_state)]


def client_address(request: Request) -> str:
    """The client's budget key (api/clients.py): the socket peer, or what a trusted proxy forwarded
    (uvicorn's proxy header middleware rewrites it only for `ApiConfig.trusted_proxies`)."""
    return client_key(request.client.host) if request.client else "unknown"


async def _limit(limiter: RateLimiter, request: Request, state: AppState) -> None:
    wait = await limiter.check(client_address(request))
    if wait is not None:
        state.metrics.rate_limited.inc()
        raise HTTPException(429, "too many requests", headers={"Retry-After": str(wait)})


async def rate_limit(request: Request, state: StateDep) -> None:
    """Refuses a client over its per-minute budget with 429 and Retry-After."""
    await _limit(state.limiter, request, state)


async def ops_rate_limit(request: Request, state: StateDep) -> None:
    """The same for operations endpoints, on a budget of their own: a scraper and a dashboard from
    one address do not starve each other."""
    await _limit(state.ops_limiter, request, state)


async def hot_read(
    request: Request, state: AppState, name: str, view: Callable[[Session, int | None], BaseModel]
) -> Response:
    """A read that changes only when a window is committed or a weight-setting attempt is recorded:
    the body is cached under the data version (so either invalidates it) and `view(session,
    latest)` runs on a miss, `latest` being the newest committed window."""
    version = await state.commits.version()

    def build() -> bytes:
        return dump(state.read_sync(lambda s: view(s, version.window)))

    body = await state.cache.fetch(state.cache.key(version, name), build)
    return json_response(request, body, cache_control=LIVE)
