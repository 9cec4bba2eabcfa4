"""`gauntlet run`: the long-running validator beside a subnet.

Each window is scored once its put window has closed. A round that raises is logged, counted and
retried from storage (the model and ratings are rebuilt from what was committed), never fatal.
After `salvage_after` failed attempts at one window the next attempt is salvaged: stages that raise
are skipped and the window is committed with what could be scored (`window_salvaged` in the log,
`gauntlet_windows_salvaged_total`), so no input can hold the validator on one window. Only a
failure to commit at all (storage down) is retried for as long as it lasts.
SIGTERM lets the current window finish, then releases the leader lock and exits.
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Callable

import structlog

from validator.chain.protocol import BLOCK_SECONDS
from validator.round.loop import Round, run_window

log = structlog.get_logger(__name__)


def ready_block(r: Round, window: int, put_window_s: float, grace_s: float) -> int:
    """The first block at which every on-time submission for `window` must be visible."""
    return r.cfg.window.first_block(window + 1) + math.ceil((put_window_s + grace_s) / BLOCK_SECONDS) + 1


def install_sigterm(stop: threading.Event) -> None:
    def handler(signum: int, frame: object) -> None:
        log.info("stopping", signal=signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def serve(
    r: Round,
    *,
    stop: threading.Event,
    reconnect: Callable[[Round], Round],
    put_window_s: float,
    grace_s: float,
    max_windows: int | None = None,
    retry_s: float = 5.0,
    salvage_after: int = 3,
) -> int:
    """Score windows until stopped; returns how many windows were committed.

    `reconnect(old)` rebuilds a Round from storage, reusing the old one's model memory."""
    if salvage_after < 1:
        raise ValueError("salvage_after must be >= 1")
    committed, failures, failing = 0, 0, None
    try:
        while not stop.is_set() and (max_windows is None or committed < max_windows):
            window = r.model.window
            failures = failures if window == failing else 0
            salvage = failures >= salvage_after
            try:
                r.chain.wait_for_block(ready_block(r, window, put_window_s, grace_s), timeout=5.0)
                if salvage:
                    log.warning("window_salvaged", window=window, failed_attempts=failures)
                report = run_window(r, window, salvage=salvage)
            except TimeoutError:
                continue
            except Exception:  # the round boundary: record, rebuild from storage, try the window again
                failures, failing = failures + 1, window
                log.exception("round_failed", window=window, failures_in_a_row=failures, salvaged=salvage)
                r.metrics.failures.inc()
                r.metrics.failing_streak.set(failures)
                stop.wait(retry_s)
                r = _reconnect(r, reconnect, stop, retry_s)
                continue
            committed, failures = committed + 1, 0
            r.metrics.failing_streak.set(0)
            if salvage:
                r.metrics.salvaged.inc()
            log.info(
                "window_committed", window=window, selected=len(report.selection.gather), salvaged=salvage,
                **report.timings,
            )  # fmt: skip
    finally:
        r.weigher.lock.release()
    return committed


def _reconnect(
    old: Round, reconnect: Callable[[Round], Round], stop: threading.Event, retry_s: float
) -> Round:
    while not stop.is_set():
        try:
            new = reconnect(old)
        except Exception:  # storage may still be down: keep trying with a pause
            log.exception("reconnect_failed")
            stop.wait(retry_s)
            continue
        if new.ledger is not old.ledger:
            old.ledger.engine.dispose()
        return new
    return old
