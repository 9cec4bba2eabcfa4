"""GET /v1/workers: the evaluation workers of the newest committed window (what the dashboard lists).

The validator records them with each window (validator/workers/stats.py); a window's own list is in
GET /v1/windows/{window} as `workers`."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from api.deps import StateDep, hot_read, rate_limit
from api.http import ERROR_RESPONSES
from api.schemas import WorkersNow
from api.window_views import workers_now

router = APIRouter(
    prefix="/v1", tags=["windows"], responses=ERROR_RESPONSES, dependencies=[Depends(rate_limit)]
)


@router.get("/workers", response_model=WorkersNow, summary="Who evaluated the newest committed window")
async def get_workers(request: Request, state: StateDep) -> Response:
    return await hot_read(request, state, "workers", lambda s, latest: workers_now(s, state.memo, latest))
