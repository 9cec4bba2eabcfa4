"""The leader lock kept alive while a long window runs.

The round renews its lock once a window, when it reaches the weight step. A window that ran past
half the lock's TTL (1.5 windows: many peers, slow evaluation) left it unrenewed that long, and a
live copy of the work folder, which takes its kin's lock over once unrenewed for half the TTL
(validator/telemetry/holder.py), took the lead from a process that was only busy. The service runs
a `LockKeeper` beside its rounds: it renews the lock of the round's weigher every `every_s` while
that weigher leads, and only for `keep_s` after the weigher's own last renewal, so a process whose
round hangs still yields the lead (`keep_s` plus the TTL later) instead of holding it while it
sets nothing. A renewal refused (another holder took the lock) stops it until the weigher renews.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from validator.round.weighing import Weigher

log = structlog.get_logger(__name__)

LOCK_TTL_WINDOWS = 3  # the leader lock's TTL (validator/wiring.py): outlives a missed window or two


class LockKeeper:
    def __init__(
        self, weigher: Weigher, *, every_s: float, keep_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if every_s <= 0 or keep_s < every_s:
            raise ValueError("need every_s > 0 and keep_s >= every_s")
        self.weigher, self.every_s, self.keep_s, self.clock = weigher, every_s, keep_s, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-lock-keeper", daemon=True)

    @staticmethod
    def for_windows(weigher: Weigher, window_s: float) -> LockKeeper:
        """Renewals every half window (a sixth of the TTL), for half the TTL after the weigher's own:
        a window may run up to 3 windows before a live copy can take the lead; a hung round yields
        it to another host 4.5 windows after its last renewal (3 before the keeper)."""
        ttl = LOCK_TTL_WINDOWS * window_s
        return LockKeeper(weigher, every_s=ttl / 6, keep_s=ttl / 2)

    def start(self) -> LockKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Before the lock's release: a renewal after it would take the lock back."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30.0)

    def _run(self) -> None:
        refused: float | None = None  # the renewal time whose lock another holder took
        while not self._stop.wait(self.every_s):
            weigher = self.weigher  # the service swaps in a rebuilt round's weigher
            led_at = weigher.led_at
            if led_at is None or led_at == refused or self.clock() - led_at > self.keep_s:
                continue
            try:
                kept = weigher.lock.acquire()
            except Exception:  # the keeper must never die or stop the service; the round renews too
                log.exception("leader_lock_keep_failed")
                continue
            if not kept:
                refused = led_at
                log.warning("leader_lock_lost_between_windows")
