"""`gauntlet run`: the long-running validator beside a subnet.

Each window is scored once its put window has closed. A round that raises is logged, counted and
retried from storage (the model and ratings are rebuilt from what was committed), never fatal.
After `salvage_after` failed attempts at one window the next attempt is salvaged: stages that raise
are skipped and the window is committed with what could be scored (`window_salvaged` in the log,
`gauntlet_windows_salvaged_total`), so no input can hold the validator on one window. Only a
failure to commit at all (storage down) is retried for as long as it lasts.
SIGTERM lets the current window finish, then releases the leader lock and exits. While a window
runs, a `LockKeeper` keeps the lead's lock renewed (validator/round/lock_keeper.py).
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog

from validator.chain.protocol import BLOCK_SECONDS
from validator.round.config import RoundConfig
from validator.round.lock_keeper import LockKeeper
from validator.round.loop import Round, WindowState, run_window

log = structlog.get_logger(__name__)


Reconnect = Callable[[Round, WindowState], tuple[Round, WindowState]]


@dataclass(frozen=True, slots=True)
class Retry:
    """After a failed round: wait `pause_s`, rebuild from storage and try again; from the
    `salvage_after`-th failed attempt at one window on, run it salvaged."""

    pause_s: float = 5.0
    salvage_after: int = 3

    def __post_init__(self) -> None:
        if self.salvage_after < 1:
            raise ValueError("salvage_after must be >= 1")


def ready_block(cfg: RoundConfig, window: int) -> int:
    """The first block at which every on-time submission for `window` must be visible."""
    wait_s = cfg.put_window_s + cfg.put_grace_s
    return cfg.window.first_block(window + 1) + math.ceil(wait_s / BLOCK_SECONDS) + 1


def install_sigterm(stop: threading.Event) -> None:
    def handler(signum: int, frame: object) -> None:
        log.info("stopping", signal=signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def serve(
    rnd: Round,
    state: WindowState,
    *,
    stop: threading.Event,
    reconnect: Reconnect,
    max_windows: int | None = None,
    retry: Retry = Retry(),
) -> int:
    """Score windows until stopped; returns how many windows were committed.

    `reconnect(rnd, state)` rebuilds both from storage, reusing the old model's memory."""
    committed, failures, failing = 0, 0, None
    window_s = rnd.cfg.window.blocks_per_window * BLOCK_SECONDS
    keeper = LockKeeper.for_windows(rnd.weigher, window_s).start()
    try:
        while not stop.is_set() and (max_windows is None or committed < max_windows):
            window = state.model.window
            failures = failures if window == failing else 0
            salvage = failures >= retry.salvage_after
            if not _chain_ready(rnd, window, stop, retry.pause_s):
                continue
            try:
                if salvage:
                    log.warning("window_salvaged", window=window, failed_attempts=failures)
                report = run_window(rnd, state, window, salvage=salvage)
            except Exception:  # the round boundary: record, rebuild from storage, try the window again
                failures, failing = failures + 1, window
                log.exception("round_failed", window=window, failures_in_a_row=failures, salvaged=salvage)
                rnd.metrics.failures.inc()
                rnd.metrics.failing_streak.set(failures)
                stop.wait(retry.pause_s)
                rnd, state = _reconnect(rnd, state, reconnect, stop, retry.pause_s)
                keeper.weigher = rnd.weigher
                continue
            committed, failures, state = committed + 1, 0, report.state
            rnd.metrics.failing_streak.set(0)
            if salvage:
                rnd.metrics.salvaged.inc()
            log.info(
                "window_committed",
                window=window,
                selected=len(report.selection.gather),
                salvaged=salvage,
                **report.timings,
            )
    finally:
        keeper.stop()  # first: a renewal after the release would take the lock back
        rnd.weigher.lock.release()
        _close_remote(rnd)
    return committed


def _chain_ready(rnd: Round, window: int, stop: threading.Event, pause_s: float) -> bool:
    """Whether the chain has reached the window's ready block. A chain error while waiting (a
    dropped websocket, a node restarting) is not an attempt at the window: counted as one, a few
    such blips would run the window salvaged and give up a stage's work on one transient error."""
    try:
        rnd.chain.wait_for_block(ready_block(rnd.cfg, window), timeout=5.0)
    except TimeoutError:
        return False
    except Exception as error:  # the chain's boundary: logged and waited out, never a round failure
        log.warning("chain_wait_failed", window=window, error=f"{type(error).__name__}: {error}"[:300])
        rnd.metrics.chain_errors.inc()
        stop.wait(pause_s)
        return False
    return True


def _reconnect(
    rnd: Round, state: WindowState, reconnect: Reconnect, stop: threading.Event, pause_s: float
) -> tuple[Round, WindowState]:
    while not stop.is_set():
        try:
            new, restored = reconnect(rnd, state)
        except Exception:  # storage may still be down: keep trying with a pause
            log.exception("reconnect_failed")
            stop.wait(pause_s)
            continue
        # the old fetcher goes on: its polls hold the validator's own sightings of the next uploads
        # (and of the window being retried), which a new one would not have
        if new.fetcher is not rnd.fetcher:
            new = replace(new, fetcher=rnd.fetcher)
        if new.ledger is not rnd.ledger:
            rnd.ledger.engine.dispose()
        if new.judging.remote is not rnd.judging.remote:
            _close_remote(rnd)  # the rebuilt round started its own workers: the old pool would leak
        return new, restored
    return rnd, state


def _close_remote(rnd: Round) -> None:
    """Shut down `rnd`'s evaluation workers (a Ray pool holds actors and their devices)."""
    if rnd.judging.remote is None:
        return
    try:
        rnd.judging.remote.close()
    except Exception:  # a pool that cannot close cleanly must not stop the service or its retry
        log.exception("remote_close_failed")
