"""GET /v1/peers, /v1/peers/{peer}, /v1/peers/{peer}/history. A peer is named by hotkey or uid."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from api.deps import StateDep, hot_read, rate_limit
from api.http import ERROR_RESPONSES
from api.peer_views import (
    PeerQuery,
    check_peer_ident,
    history_body,
    peer_detail,
    peer_list,
    resolve_peer,
)
from api.schemas import PeerDetail, PeerHistory, PeerList
from api.window_views import MAX_WINDOW

router = APIRouter(
    prefix="/v1", tags=["peers"], responses=ERROR_RESPONSES, dependencies=[Depends(rate_limit)]
)

PeerIdent = Annotated[
    str, Path(description="the peer's hotkey (ss58) or the uid it holds now (no leading zeros)")
]
WindowBound = Query(ge=0, le=MAX_WINDOW)


@router.get("/peers", response_model=PeerList, summary="Current ranking")
async def get_peers(request: Request, state: StateDep, query: Annotated[PeerQuery, Query()]) -> Response:
    labels = dict(state.config.peer_labels)

    def view(s: Session, latest: int | None) -> PeerList:
        return peer_list(s, state.memo, query, latest=latest, labels=labels)

    return await hot_read(request, state, query.cache_key(), view)


@router.get("/peers/{peer}", response_model=PeerDetail, summary="One peer and its newest windows")
async def get_peer(
    request: Request,
    state: StateDep,
    peer: PeerIdent,
    windows: Annotated[int, Query(ge=1, le=50, description="how many of its newest windows")] = 10,
) -> Response:
    check_peer_ident(peer)  # one cache entry per peer and window count: a uid has one spelling

    def view(s: Session, _latest: int | None) -> PeerDetail:
        return peer_detail(s, resolve_peer(s, peer), n_windows=windows)

    return await hot_read(request, state, f"peer:{peer}:{windows}", view)


@router.get("/peers/{peer}/history", response_model=PeerHistory, summary="Rating and score over windows")
async def get_peer_history(
    request: Request,
    state: StateDep,
    peer: PeerIdent,
    from_window: Annotated[int | None, WindowBound] = None,
    to_window: Annotated[int | None, WindowBound] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> Response:
    check_peer_ident(peer)

    def view(s: Session, _latest: int | None) -> PeerHistory:
        hotkey = resolve_peer(s, peer).hotkey
        return history_body(s, hotkey, from_window=from_window, to_window=to_window, limit=limit)

    return await hot_read(request, state, f"history:{peer}:{from_window}:{to_window}:{limit}", view)
