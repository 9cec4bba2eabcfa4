"""GET /v1/windows, /v1/windows/{window}, /v1/windows/{window}/selection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel
from sqlalchemy.orm import Session

from api.cache import WindowMemo
from api.deps import AppState, StateDep, hot_read, rate_limit
from api.http import COMMITTED, ERROR_RESPONSES, IMMUTABLE, LIVE, ApiError, dump, json_response
from api.schemas import WindowDetail, WindowList, WindowSelection
from api.window_views import MAX_WINDOW, selection_body, window_body, window_list
from storage.records import COMMITTED as COMMITTED_STATE

router = APIRouter(
    prefix="/v1", tags=["windows"], responses=ERROR_RESPONSES, dependencies=[Depends(rate_limit)]
)

WindowNumber = Annotated[int, Path(ge=0, le=MAX_WINDOW, description="the window number")]
# Cached window bodies carry their state in a first byte, so a cache hit knows its Cache-Control.
COMMITTED_TAG, LIVE_TAG = b"c", b"-"


@router.get("/windows", response_model=WindowList, summary="Windows, newest first")
async def get_windows(
    request: Request,
    state: StateDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[int | None, Query(ge=0, le=MAX_WINDOW, description="only windows below this")] = None,
) -> Response:
    return await hot_read(
        request, state, f"windows:{limit}:{before}", lambda s, _: window_list(s, limit=limit, before=before)
    )


async def _window_response(
    request: Request,
    state: AppState,
    name: str,
    window: int,
    view: Callable[[Session, WindowMemo, int], tuple[BaseModel, str] | None],
    committed_cache: str,
) -> Response:
    key = state.cache.key(await state.commits.version(), f"{name}:{window}")

    def build() -> bytes:
        found = state.read_sync(lambda s: view(s, state.memo, window))
        if found is None:
            raise ApiError(404, "not_found", f"unknown window {window}")
        body, window_state = found
        return (COMMITTED_TAG if window_state == COMMITTED_STATE else LIVE_TAG) + dump(body)

    tagged = await state.cache.fetch(key, build)
    cache_control = committed_cache if tagged[:1] == COMMITTED_TAG else LIVE
    return json_response(request, tagged[1:], cache_control=cache_control)


@router.get("/windows/{window}", response_model=WindowDetail, summary="Everything decided in one window")
async def get_window(request: Request, state: StateDep, window: WindowNumber) -> Response:
    def view(s: Session, memo: WindowMemo, w: int) -> tuple[BaseModel, str] | None:
        body = window_body(s, memo, w)
        return None if body is None else (body, body.summary.state)

    return await _window_response(request, state, "window", window, view, COMMITTED)


@router.get(
    "/windows/{window}/selection",
    response_model=WindowSelection,
    summary="The aggregation set peers must apply for this window",
)
async def get_selection(request: Request, state: StateDep, window: WindowNumber) -> Response:
    def view(s: Session, memo: WindowMemo, w: int) -> tuple[BaseModel, str] | None:
        body = selection_body(s, memo, w)
        return None if body is None else (body, body.state)

    return await _window_response(request, state, "selection", window, view, IMMUTABLE)
