"""What the window's fetch deadline does to a peer's GET: the peer's fault only when its request had
its whole time budget, or was too slow to finish within it anyway."""

from __future__ import annotations

import time

from scoring.types import Reason
from validator.stores.fetch_types import FetchRequest, FetchResult
from validator.stores.peer_fetch import failed

# A GET cut by the deadline ends this much before it, on its own timeout: so that what it had
# received decides (peer_fetch.get_step), not which of the two timers the event loop ran first.
MARGIN_S = 0.25


def get_budget(peer_budget_s: float, deadline: float) -> float | None:
    """A GET's time: its whole budget, or what the deadline leaves (less the margin); None when
    nothing is left (the peer is not reached: not penalised)."""
    left = deadline - time.monotonic() - MARGIN_S
    return min(peer_budget_s, left) if left > 0 else None


def not_reached(request: FetchRequest) -> FetchResult:
    return failed(request.hotkey, Reason.NOT_ATTEMPTED, "the validator did not reach this peer in time")


def unfinished(request: FetchRequest, stage: str | None) -> FetchResult:
    """No result by the deadline: the store's fault when a request to it was in flight, nobody's
    when the validator never sent it one (not penalised, DESIGN.md §7)."""
    if stage in ("head", "get"):
        return failed(request.hotkey, Reason.FETCH_FAILED, "the window's fetch deadline passed")
    return not_reached(request)
