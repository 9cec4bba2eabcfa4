"""What a fetch that the window's deadline ended comes to: the peer's fault only when its request
had its whole time budget."""

from __future__ import annotations

from dataclasses import replace

from scoring.types import Reason
from validator.stores.fetch_types import FetchRequest, FetchResult
from validator.stores.peer_fetch import TIMED_OUT, failed

CUT = "get, cut"  # a GET given less than its budget: the window's deadline came first
CUT_DETAIL = "the window's fetch deadline cut its time"


def excused(result: FetchResult) -> FetchResult:
    """A GET whose time the window's deadline cut short (peers before it held the slots) that then
    ran out of time: the validator's shortfall, not the peer's (not penalised, as NOT_ATTEMPTED)."""
    if result.reason == Reason.FETCH_FAILED and result.detail == TIMED_OUT:
        return replace(result, reason=Reason.NOT_ATTEMPTED, detail=CUT_DETAIL)
    return result


def unfinished(request: FetchRequest, stage: str | None) -> FetchResult:
    """No result by the deadline: the store's fault when a request to it was in flight with its
    whole budget, nobody's when the validator never sent it one or cut its time (not penalised,
    DESIGN.md §7)."""
    if stage in ("head", "get"):
        return failed(request.hotkey, Reason.FETCH_FAILED, "the window's fetch deadline passed")
    if stage == CUT:
        return failed(request.hotkey, Reason.NOT_ATTEMPTED, CUT_DETAIL)
    return failed(request.hotkey, Reason.NOT_ATTEMPTED, "the validator did not reach this peer in time")
