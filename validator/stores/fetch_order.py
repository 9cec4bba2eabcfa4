"""In what order a window's submissions are fetched, when the deadline cannot serve everyone.

The order is a permutation seeded with the window's secret, so that no peer can place itself (or
a staller) ahead of others. Two tiers move peers within it: those aggregated lately go first, and
those whose store failed at its last attempt go last (`StallMemory`).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable

from scoring.types import Reason


def fetch_order(
    count: int, seed: int | str | None, first: Collection[int] = (), last: Collection[int] = ()
) -> list[int]:
    """Indices in the order to fetch: shuffled with the window's secret seed; request order without
    a seed. The indices in `first` (peers aggregated lately) go ahead, in the same shuffled order:
    a crowd of stores trickling just above the rate floor held every slot for its whole budget, and
    honest peers drawn after it were never fetched (64 such stores beside 8 peers: 2 to 8 of them
    fetched). Those in `last` and not in `first` (peers whose store failed last time) go behind."""
    order = list(range(count))
    if seed is not None:
        random.Random(f"gauntlet/fetch-order|{seed}").shuffle(order)
    ahead, behind = set(first), set(last) - set(first)
    middle = [i for i in order if i not in ahead and i not in behind]
    return [i for i in order if i in ahead] + middle + [i for i in order if i in behind]


class StallMemory:
    """Whose fetch failed at its last attempt. A crowd of stores trickling just above the rate
    floor held every slot for its whole budget, window after window, and a new peer (not yet
    aggregated, so not fetched first) drew its place among them every window, as if none had ever
    failed. Once a store has failed its peer goes last, so the crowd holds slots only when everyone
    else has been served, until a fetch of theirs ends otherwise; a fetch the deadline never
    reached changes nothing."""

    def __init__(self) -> None:
        self._stalled: set[str] = set()

    @property
    def stalled(self) -> frozenset[str]:
        return frozenset(self._stalled)

    def note(self, outcomes: Iterable[tuple[str, str | None]]) -> None:
        """(hotkey, reason) of every peer of a fetch."""
        seen: set[str] = set()
        for hotkey, reason in outcomes:
            seen.add(hotkey)
            if reason == Reason.FETCH_FAILED:
                self._stalled.add(hotkey)
            elif reason != Reason.NOT_ATTEMPTED:
                self._stalled.discard(hotkey)
        self._stalled &= seen  # hotkeys that left take no memory
