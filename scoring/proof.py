"""What a peer's evaluations add up to across windows: proof of training and the retention average.

Proof of training (`proven`): after `proof_min_evaluations` evaluations,
- the page test's discounted Stouffer sum reaches `page_test.z` (scoring/page_test.py: the update
  lowers the loss on the peer's own pages by more than on held-out ones, against the pages' noise);
- the mean relative own-data margin `(own_gain − score) / |score|` (clipped to ±1) reaches
  `proof_margin`: on the demo honest peers scored +1 in only ~80 % of windows 3–6 while their mean
  margin stayed ≥ 0.045; a lazy peer (trained on pages that are not its own) is a coin flip with a
  margin around 0 (MEASURED.md);
- the Wilson lower bound (`proof_z`) of the +1 rate reaches `proof_rate`: it bars mostly −1 records
  (a mean carried by one strong window). A margin within `proof_tie` of 0 counts as +1 here: it is
  a tie, and two of them cost an honest peer its proof (`positive`).

Measured and not adopted: reading each margin against the window's median margin (the held-out pages
are shared, so one late window where every update gained 30–60 % more on its own pages lifted a lazy
peer's mean margin to 0.036). Three colluders whose margins sit above the honest ones lift that
median: two honest peers then lost their proof for two windows (`bench_fidelity`'s `collude`, seed
1), so the window's median is a lever for a coalition, not a reference.

`with_evidence` folds one evaluated window into a rating; `relative_margin` is one evaluation's margin.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from scoring.page_test import fold, stouffer

if TYPE_CHECKING:  # the ranking imports this module
    from scoring.ranking import PeerOutcome, PeerRating
    from scoring.rating_config import RatingConfig


def proven(peer: PeerRating, cfg: RatingConfig) -> bool:
    """Has the peer proven that it trains on its own data (module docstring)?"""
    if (n := peer.evaluations) < max(cfg.proof_min_evaluations, 1) or peer.margin_sum / n < cfg.proof_margin:
        return False
    # the page test once its evaluations weigh as much as the proof's minimum: a peer rated before
    # page losses were measured keeps the proof it had until then, judged by the other rules alone
    z = stouffer(peer.proof_sum, peer.proof_weight)
    if z is not None and peer.proof_weight >= _least_weight(cfg) and z < cfg.page_test.z:
        return False
    z2, rate = cfg.proof_z**2, peer.positives / n
    centre = rate + z2 / (2 * n)
    spread = cfg.proof_z * math.sqrt(rate * (1.0 - rate) / n + z2 / (4 * n * n))
    return (centre - spread) / (1.0 + z2 / n) >= cfg.proof_rate


def _least_weight(cfg: RatingConfig) -> float:
    """The page test's weight after `proof_min_evaluations` evaluations (the same folds, the same bits)."""
    weight = 0.0
    for _ in range(max(cfg.proof_min_evaluations, 1)):
        weight = cfg.page_test.decay * cfg.page_test.decay * weight + 1.0
    return weight


def positive(o: PeerOutcome, cfg: RatingConfig) -> bool:
    """Does this evaluation count towards the +1 rate? Its indicator, or a margin above −proof_tie
    (measured: an honest peer's margins 0.49, 0.16, −0.001, −0.001 were two −1s of four, under the
    rate's bound, in bench_fidelity's poison_strong run under seed 0)."""
    if o.score is None or o.own_gain is None:  # only the indicator is known
        return o.indicator is not None and o.indicator > 0
    # the indicator is +1 exactly when this margin is positive
    return relative_margin(o.score, o.own_gain) > -cfg.proof_tie


def relative_margin(score: float, own_gain: float | None) -> float:
    """The update's extra gain on the peer's own pages over held-out ones, relative, in [−1, 1]
    (1 without an own gain: callers that only know the indicator)."""
    return 1.0 if own_gain is None else max(-1.0, min(1.0, (own_gain - score) / max(abs(score), 1e-9)))


def with_evidence(peer: PeerRating, o: PeerOutcome, cfg: RatingConfig) -> PeerRating:
    """`peer` with one more evaluated window (`o.score` is set): its indicator and margin, and its
    retention when it was measured."""
    if o.score is None or o.indicator is None:
        return peer
    peer = replace(
        peer,
        evaluations=peer.evaluations + 1,
        positives=peer.positives + positive(o, cfg),
        margin_sum=peer.margin_sum + relative_margin(o.score, o.own_gain),
    )
    if o.own_t is not None:
        total, weight = fold(peer.proof_sum, peer.proof_weight, o.own_t, cfg.page_test)
        peer = replace(peer, proof_sum=total, proof_weight=weight)
    if o.retention is None:
        return peer
    # the plain mean of the first 1/alpha values (a first value alone would weigh as much as every
    # later one), then a moving average of weight alpha (a peer that starts overshooting later is
    # still caught)
    n = peer.retention_windows + 1
    weight = max(cfg.retention_alpha, 1.0 / n)
    value = min(max(o.retention, 1.0 - cfg.retention_clip), 1.0 + cfg.retention_clip)  # one window's say
    average = value if peer.retention is None else (1 - weight) * peer.retention + weight * value
    return replace(peer, retention=average, retention_windows=n)
