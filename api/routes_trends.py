"""GET /v1/weights (weight-setting attempts and their on-chain outcome) and /v1/trends (per-window
series the dashboard charts: held-out loss, peers by status, stage timings, weights)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from api.deps import StateDep, hot_read, rate_limit
from api.http import ERROR_RESPONSES
from api.schemas import Trends, WeightList, WeightSetOut, WindowTrendOut
from api.window_views import MAX_WINDOW, public
from storage.queries import weight_sets
from storage.trends import window_trends

router = APIRouter(
    prefix="/v1", tags=["windows"], responses=ERROR_RESPONSES, dependencies=[Depends(rate_limit)]
)


MAX_ATTEMPTS = 10_000  # per window; far above any retry schedule


def weight_list(session: Session, *, limit: int, before: int | None) -> WeightList:
    """A page of attempts. Pages are cut between windows: a full page leaves its oldest window's
    attempts to the next page (whose `before` includes it); a window that fills the page alone is
    shown whole, however many attempts it had, so no attempt is ever skipped by paging."""
    rows = weight_sets(session=session, limit=limit, before=before)
    next_before = None
    if len(rows) == limit:
        oldest = rows[-1].window
        newer = [ws for ws in rows if ws.window != oldest]
        if newer:
            rows, next_before = newer, oldest + 1
        else:  # attempts in one window are retries of one weight set: few, and bounded here
            rows, next_before = weight_sets(session=session, window=oldest, limit=MAX_ATTEMPTS), oldest
    return WeightList(
        weight_sets=[public(WeightSetOut, ws, uids=list(ws.uids), weights=list(ws.weights)) for ws in rows],
        next_before=next_before or None,  # 0: nothing is below window 0
    )


@router.get("/weights", response_model=WeightList, summary="Weights set on chain, newest first")
async def get_weights(
    request: Request,
    state: StateDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[int | None, Query(ge=0, le=MAX_WINDOW, description="only windows below this")] = None,
) -> Response:
    return await hot_read(
        request, state, f"weights:{limit}:{before}", lambda s, _: weight_list(s, limit=limit, before=before)
    )


@router.get("/trends", response_model=Trends, summary="Per-window series for charts, oldest first")
async def get_trends(
    request: Request,
    state: StateDep,
    windows: Annotated[int, Query(ge=1, le=1000, description="how many of the newest windows")] = 100,
) -> Response:
    def view(s: Session, _latest: int | None) -> Trends:
        return Trends(windows=[public(WindowTrendOut, t) for t in window_trends(session=s, limit=windows)])

    return await hot_read(request, state, f"trends:{windows}", view)
