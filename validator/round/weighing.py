"""Weights on chain every `windows_per_weights` windows, by the leader only, always recorded.

A failed attempt (chain unreachable, extrinsic refused) is recorded and retried at the next window,
never raised: the scoring of the next window must not depend on the chain accepting weights.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from scoring.ranking import RatingState
from scoring.weights import WeightPolicy
from storage.records import NOT_LEADER, WeightSetRecord
from validator.chain.protocol import Chain, Neuron, WeightLimits, WeightOutcome
from validator.chain.weight_rules import accepted, quantized
from validator.round.rating import weights_for
from validator.round.weight_limits import conformed
from validator.telemetry.events import Lock
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
        if self.paid_since is None:
            return window + 1
        return max(window - self.paid_since, 0)  # 0: set through `window` already (another leader)


class Weigher:
    """Sets weights when they are due and records every attempt; the round publishes the event."""

    def __init__(
        self,
        chain: Chain,
        policy: WeightPolicy,
        lock: Lock,
        record: Callable[[WeightSetRecord], None],
        schedule: WeightSchedule,
        metrics: Metrics,
    ) -> None:
        self.chain, self.policy, self.lock, self.record = chain, policy, lock, record
        self.schedule, self.metrics = schedule, metrics
        # when this process last took or renewed the lock as its leader (time.monotonic), else None
        # (a follower): what the service's LockKeeper renews it from while a long window runs
        self.led_at: float | None = None

    def maybe_set(self, window: int, ratings: RatingState) -> WeightSetRecord | None:
        leader = self.lock.acquire()  # every window: the holder keeps its lock alive between weight sets
        if leader and self.led_at is None:  # the lead (back) in this process: what the last leader set
            self.schedule.reload()
        self.led_at = time.monotonic() if leader else None
        if not self.schedule.due(window):
            return None
        covered = self.schedule.paid_windows(window)
        if not leader:  # a follower never sets weights; it records what they would be
            weights = weights_for(ratings, window, self.policy, covered)
            return self._done(_record(window, None, weights, "skipped", NOT_LEADER))
        if covered == 0:  # a lagging process that took the lead: nothing
            # new to pay, and a set now would replace the newer leader's vector with an older view
            return self._done(
                _record(window, None, {}, "skipped", f"set through window {self.schedule.paid_since}")
            )
        try:
            neurons, limits = self.chain.neurons(), self.chain.weight_limits()
        except Exception as e:  # the metagraph unread: nothing is paid blind, the next window retries
            log.exception("weights_metagraph_unread")
            self.schedule.retry_pending = True
            return self._done(_record(window, None, {}, "failed", f"metagraph: {e}"[:500]))
        paid = weights_for(registered(ratings, neurons), window, self.policy, covered)
        own = next((n.uid for n in neurons if n.hotkey == self.chain.hotkey), None)
        weights = conformed(paid, own, [n.uid for n in neurons], limits)
        stray = sorted(set(weights) - {n.uid for n in neurons})
        if stray:  # only a configured burn uid can be: peers and pads are read from the metagraph
            # The chain refuses a set naming a uid it does not hold, every window, and the last
            # vector stays in force; said plainly, without sending a set bound to fail.
            self.schedule.retry_pending = True
            refused = f"uid {stray} not on the subnet ({len(neurons)} uids; burn_uid?): the chain refuses it"
            return self._done(_record(window, None, weights, "failed", refused))
        if not weights:
            return self._done(
                _record(window, None, {}, "skipped", "nobody is paid and the validator holds no uid")
            )
        if not accepted(weights, limits, own):  # the chain would refuse it, every window
            return self._withhold(window, own, weights, limits)
        outcome = self._set(weights)
        self.schedule.retry_pending = not outcome.ok
        if outcome.ok:
            self.schedule.paid_since = window
        if not paid:
            log.info("weights_self", window=window, ok=outcome.ok)  # withdraws the last vector
        result, error = ("ok", None) if outcome.ok else ("failed", outcome.message)
        return self._done(_record(window, outcome.block, weights, result, error))

    def _withhold(
        self, window: int, own: int | None, weights: dict[int, float], limits: WeightLimits
    ) -> WeightSetRecord:
        """A set the chain would refuse: too few paid uids to carry the subnet's largest share
        (MaxWeightsLimit: the SDK named each at 1/n, over it), or to reach its minimum with the uids
        there are. Sent anyway it was refused every window, leaving the last vector in force; spread
        over pads or the burn uid, the excess would pay them for real. A self-weight (exempt)
        withdraws the last vector instead, and the schedule does not move: the work stays owed, to
        a later set whose period, longer, pays enough peers to carry it."""
        named = len(quantized(weights))
        reason = (
            f"{named} uids cannot carry all the pay at {limits.max_share:.4g} a uid (MaxWeightsLimit) "
            f"or reach {limits.min_weights} (MinAllowedWeights)"
        )
        log.warning("weights_withheld", window=window, named=named, max_share=limits.max_share)
        if own is None:
            return self._done(_record(window, None, {}, "skipped", f"{reason}; the validator holds no uid"))
        outcome = self._set({own: 1.0})
        self.schedule.retry_pending = not outcome.ok
        if outcome.ok:
            return self._done(_record(window, outcome.block, {own: 1.0}, "withheld", reason))
        return self._done(_record(window, outcome.block, {own: 1.0}, "failed", outcome.message))

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


def _record(
    window: int, block: int | None, weights: dict[int, float], result: str, error: str | None
) -> WeightSetRecord:
    uids = sorted(weights)
    return WeightSetRecord(window, block, uids, [weights[u] for u in uids], result, error)


def registered(ratings: RatingState, neurons: Sequence[Neuron]) -> RatingState:
    """The peers whose uid still belongs to their hotkey, read from the metagraph right before the
    set: the round read it at its fetch, minutes before, and a uid freed since (deregistered) and
    taken by a newcomer, or by the validator itself, would have paid them the old holder's work."""
    holder: dict[int, str] = {}
    for n in neurons:  # a uid listed twice is its first holder's, as the fetch scored it (fetching.py)
        holder.setdefault(n.uid, n.hotkey)
    kept = {hotkey: p for hotkey, p in ratings.peers.items() if holder.get(p.uid) == hotkey}
    if len(kept) < len(ratings.peers):
        log.info("weights_unregistered_left_out", peers=len(ratings.peers) - len(kept))
    return RatingState(kept, ratings.window)
