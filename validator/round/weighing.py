"""Weights on chain every `windows_per_weights` windows, by the leader only, always recorded.

A failed attempt (chain unreachable, extrinsic refused) is recorded and retried at the next window,
never raised: the scoring of the next window must not depend on the chain accepting weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from scoring.ranking import RatingState
from scoring.weights import WeightPolicy
from storage.records import NOT_LEADER, WeightSetRecord
from validator.chain.protocol import Chain, WeightOutcome
from validator.round.rating import weights_for
from validator.telemetry.events import LeaderLock
from validator.telemetry.metrics import Metrics

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class WeightSchedule:
    """Weights are due every `every` windows, and at every window after a failed attempt. A set pays
    the work aggregated since the last successful one (`paid_since`; scoring/earnings.py), so a
    failed, retried or missed set (a crash on its window) leaves no aggregated window unpaid."""

    every: int
    retry_pending: bool = False  # restored from storage after a restart
    paid_since: int | None = None  # the window of the last successful set, restored from storage
    # (paid_since, retry_pending) read from storage again: a follower kept what it read at its start,
    # and on taking the lead over it would have paid again everything aggregated since then
    stored: Callable[[], tuple[int | None, bool]] | None = None

    def reload(self) -> None:
        if self.stored is None:
            return
        try:
            self.paid_since, self.retry_pending = self.stored()
        except Exception:  # storage down: what this process knows stands until the next change of lead
            log.exception("weight_schedule_not_reloaded")

    def due(self, window: int) -> bool:
        return self.retry_pending or window % self.every == 0

    def paid_windows(self, window: int) -> int:
        """How many windows up to `window` this set pays for: those since the last successful set,
        every one before it when there was none (a retry of the first set included)."""
        if self.paid_since is None or self.paid_since >= window:
            return window + 1
        return window - self.paid_since


class Weigher:
    """Sets weights when they are due and records every attempt; the round publishes the event."""

    def __init__(
        self,
        chain: Chain,
        policy: WeightPolicy,
        lock: LeaderLock,
        record: Callable[[WeightSetRecord], None],
        schedule: WeightSchedule,
        metrics: Metrics,
    ) -> None:
        self.chain, self.policy, self.lock, self.record = chain, policy, lock, record
        self.schedule, self.metrics = schedule, metrics
        self._leading = False

    def maybe_set(self, window: int, ratings: RatingState) -> WeightSetRecord | None:
        leader = self.lock.acquire()  # every window: the holder keeps its lock alive between weight sets
        if leader and not self._leading:  # the lead (back) in this process: what the last leader set
            self.schedule.reload()
        self._leading = leader
        if not self.schedule.due(window):
            return None
        if leader:
            try:
                ratings = self._registered(ratings)
            except Exception as e:  # the metagraph unread: nothing is paid blind, the next window retries
                log.exception("weights_metagraph_unread")
                self.schedule.retry_pending = True
                return self._done(WeightSetRecord(window, None, [], [], "failed", f"metagraph: {e}"[:500]))
        weights = weights_for(ratings, window, self.policy, self.schedule.paid_windows(window))
        uids = sorted(weights)
        values = [weights[u] for u in uids]
        if not leader:  # first: a follower never sets weights, whatever they would be
            return self._done(WeightSetRecord(window, None, uids, values, "skipped", NOT_LEADER))
        if not weights:
            return self._done(
                WeightSetRecord(window, None, [], [], "skipped", "no peer aggregated lately scores")
            )
        outcome = self._set(weights)
        self.schedule.retry_pending = not outcome.ok
        if outcome.ok:
            self.schedule.paid_since = window
        result = "ok" if outcome.ok else "failed"
        return self._done(
            WeightSetRecord(
                window, outcome.block, uids, values, result, None if outcome.ok else outcome.message
            )
        )

    def _registered(self, ratings: RatingState) -> RatingState:
        """The peers whose uid still belongs to their hotkey, read from the metagraph right before the
        set: the round read it at its fetch, minutes before, and a uid freed since (deregistered) and
        taken by a newcomer, or by the validator itself, would have paid them the old holder's work."""
        holder = {n.uid: n.hotkey for n in self.chain.neurons()}
        kept = {hotkey: p for hotkey, p in ratings.peers.items() if holder.get(p.uid) == hotkey}
        if len(kept) < len(ratings.peers):
            log.info("weights_unregistered_left_out", peers=len(ratings.peers) - len(kept))
        return RatingState(kept, ratings.window)

    def _set(self, weights: dict[int, float]) -> WeightOutcome:
        try:
            return self.chain.set_weights(weights)
        except Exception as e:  # the chain is an external system: any failure becomes a recorded outcome
            log.exception("set_weights_raised")  # with the traceback: it may be our bug, not the chain's
            return WeightOutcome(False, f"{type(e).__name__}: {e}"[:500], -1)

    def _done(self, rec: WeightSetRecord) -> WeightSetRecord:
        self.metrics.weights.labels(outcome=rec.outcome).inc()
        try:
            self.record(rec)
        except Exception as e:  # recording is best effort here; the window itself is committed
            log.error("weight_set_not_recorded", window=rec.window, error=str(e))
        log.info("weights", window=rec.window, outcome=rec.outcome, error=rec.error, peers=len(rec.uids))
        return rec
