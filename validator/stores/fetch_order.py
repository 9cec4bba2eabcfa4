"""In what order a window's submissions are fetched, when the deadline cannot serve everyone.

The order is a permutation seeded with the window's secret, so that no peer can place itself (or
a staller) ahead of others. Two tiers move peers within it: those aggregated lately go first, and
those whose store failed in any of its recent attempts go last, fewest failures first
(`StallMemory`).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Collection, Iterable, Mapping

from scoring.types import Reason

# attempts a store's failures are remembered over: a store that fails once in this many attempts
# or more often is always behind the stores that did not fail
STALL_SPAN = 8


def fetch_order(
    count: int,
    seed: int | str | None,
    first: Collection[int] = (),
    last: Mapping[int, int] | None = None,
) -> list[int]:
    """Indices in the order to fetch: shuffled with the window's secret seed; request order without
    a seed. The indices in `first` (peers aggregated lately) go ahead, in the same shuffled order:
    a crowd of stores trickling just above the rate floor held every slot for its whole budget, and
    honest peers drawn after it were never fetched (64 such stores beside 8 peers: 2 to 8 of them
    fetched). Those in `last` (peers whose store failed lately, with their failure counts) and not in
    `first` go behind, fewer failures before more (ties in the shuffled order)."""
    order = list(range(count))
    if seed is not None:
        random.Random(f"gauntlet/fetch-order|{seed}").shuffle(order)
    ahead = set(first)
    behind = {i: n for i, n in (last or {}).items() if i not in ahead and n > 0}
    middle = [i for i in order if i not in ahead and i not in behind]
    tail = sorted((i for i in order if i in behind), key=lambda i: behind[i])  # stable: keeps the draw
    return [i for i in order if i in ahead] + middle + tail


class StallMemory:
    """Whose fetches failed among their last `STALL_SPAN` attempts, and how often. A crowd of
    stores trickling just above the rate floor held every slot for its whole budget, window after
    window, and a new peer (not yet aggregated, so not fetched first) drew its place among them
    every window, as if none had ever failed. Once a store has failed its peer goes last, so the
    crowd holds slots only when everyone else has been served. Remembering only the last attempt
    let a store that fails every other window back among the newcomers every other window: a
    failure now holds its peer back for the next `STALL_SPAN` attempts, and the stores failing most
    go last. A fetch the deadline never reached changes nothing."""

    def __init__(self, span: int = STALL_SPAN) -> None:
        if span < 1:
            raise ValueError("span must be >= 1")
        self._span = span
        self._history: dict[str, deque[bool]] = {}

    @property
    def failures(self) -> dict[str, int]:
        """Failed attempts among each peer's recent ones, for peers with at least one."""
        return {k: n for k, h in self._history.items() if (n := sum(h))}

    @property
    def stalled(self) -> frozenset[str]:
        return frozenset(self.failures)

    def note(self, outcomes: Iterable[tuple[str, str | None]]) -> None:
        """(hotkey, reason) of every peer of a fetch."""
        seen: set[str] = set()
        for hotkey, reason in outcomes:
            seen.add(hotkey)
            if reason == Reason.NOT_ATTEMPTED:
                continue
            history = self._history.setdefault(hotkey, deque(maxlen=self._span))
            history.append(reason == Reason.FETCH_FAILED)
        for gone in set(self._history) - seen:  # hotkeys that left take no memory
            del self._history[gone]
