"""Who is paid: chain weights follow the work the validator used, not the rating alone.

The final score rates every proven peer by its held-out gains at the evaluation step
(scoring/ranking.py). The aggregation (scoring/selection.py) then leaves some proven peers out: an
update inflated far above the honest band (`sandbag`), one that overshoots at a larger step
(`sandbag_matched`), a colluding cluster, a drifting peer. Their gains at the small step are
among the best, so they held the top of the ranking: measured with bench_fidelity (seed 0), `sandbag`
beside four honest peers held 53 % of the chain weights after warm-up and `sandbag_matched` 40 %,
and the mixed run's adversaries 76 %, while of them only poison was ever aggregated (README,
*Scoring fidelity*). A weight set therefore pays a peer only when one of the windows it covers (the
last `paid_windows`: those since the last successful set, validator/round/weighing.py) aggregated
its update; the rating keeps that window (`PeerRating.last_aggregated`), so a restart, a replica and
replay agree.

And it pays for each window it covers that aggregated the update, not once for any of them
(`worked`): a weight set every three windows paid a peer aggregated in one of them as much as one
aggregated in all three, so an entity's nine identities each training one window in three took
0.67 of the weights beside four honest peers, three identities training every window 0.48, for
the same work (a red-team run through `rate_and_select` and `weights_for`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from scoring.ranking import PeerRating, RatingState

# how many windows back `PeerRating.aggregated_mask` remembers: a set paying for more (weights failed
# for that long) reads the share over the last this many
MEMORY = 32


def with_aggregated(state: RatingState, gathered: Collection[str], window: int) -> RatingState:
    """`state` with `window` recorded as the last aggregated one of every gathered peer."""
    peers = {h: _aggregated(p, window) if h in gathered else p for h, p in state.peers.items()}
    return RatingState(peers, state.window)


def _aggregated(peer: PeerRating, window: int) -> PeerRating:
    last = peer.last_aggregated
    shift = window - last if last is not None and last <= window else MEMORY
    mask = ((peer.aggregated_mask << min(shift, MEMORY)) | 1) & ((1 << MEMORY) - 1)
    return replace(peer, last_aggregated=window, aggregated_mask=mask)


def worked(peer: PeerRating, window: int, paid_windows: int) -> float:
    """The share of the `paid_windows` windows up to `window` (at most `MEMORY`) that aggregated
    the peer's update. A rating stored before the mask existed reads its last aggregated window."""
    span = min(paid_windows, MEMORY)
    last = peer.last_aggregated
    if span < 1 or last is None or not window - span < last <= window:
        return 0.0
    mask = peer.aggregated_mask or 1
    inside = last - (window - span)  # the windows from the period's first to `last`
    return bin(mask & ((1 << inside) - 1)).count("1") / span


def by_work(weights: Mapping[int, float], shares: Mapping[int, float]) -> dict[int, float]:
    """`weights` with each peer's scaled by its share (`worked`), the peers' total kept: what one
    peer's idle windows give up goes to the others. A uid without a share (a burn uid) keeps its own."""
    scaled = {u: w * shares[u] if u in shares else w for u, w in weights.items()}
    before = sum(w for u, w in weights.items() if u in shares)
    after = sum(w for u, w in scaled.items() if u in shares)
    if after <= 0.0:
        return dict(weights)
    return {u: w * before / after if u in shares else w for u, w in scaled.items()}


def paid(peer: PeerRating, window: int, paid_windows: int) -> bool:
    """Was the peer aggregated in one of the `paid_windows` windows up to `window`, and is it not banned?"""
    last = peer.last_aggregated
    return not peer.banned(window) and last is not None and window - paid_windows < last <= window


def ranked_by_uid(state: RatingState, window: int, paid_windows: int) -> list[tuple[int, float]]:
    """(uid, score) for weight policies, best first; a peer that is not `paid` scores 0.

    A paid peer scores its final score. At a final score of 0 *because its ordinal is ≤ 0* (its σ is
    still wide, or the match ranked it under its equals, or under colluders before their links
    formed) or because its BMA is under the design's threshold (a run of −1 indicators; the
    selection aggregates proven peers whatever their BMA, and such a peer was paid nothing for an
    update the model used) it still scores: under half the lowest positive final, higher ordinals
    higher, equal ones alike, while its latest window is no miss and it is active (a miss scales a
    positive final down, to 0 by the third in a row; this pay kept its value through any number). A final
    score set to 0 by a gate or a penalty (`PeerRating.gated`: unproven, an invalid submission, a
    ban, a window out of the match: validator/round/rating.py `outside_match`) stays 0, whatever its
    ordinal (the ordinal alone once let a gated peer at an ordinal ≤ 0 be paid and one above 0
    not). Measured with bench_fidelity (seed 0, 8 windows): 9 of 20 honest aggregations after
    warm-up in the honest-only run, and 19 of 20 beside three colluders, were paid nothing by
    `max(ordinal, 0)` alone (README, *Scoring fidelity*). Under the power policy such a peer's
    weight is small; the rank policy (the default) pays it by rank."""
    peers = [p for p in state.peers.values() if paid(p, window, paid_windows)]
    positive = [p.final for p in peers if p.final > 0.0]
    floor = min(positive) / 2 if positive else 1.0
    held = [p for p in peers if p.final <= 0.0 and not p.gated and not _missed_since(p)]
    unrated = sorted({p.ordinal for p in held}, reverse=True)
    step = {o: floor * (len(unrated) - i) / (len(unrated) + 1) for i, o in enumerate(unrated)}
    scores = {p.uid: step[p.ordinal] for p in held} | {p.uid: p.final for p in peers if p.final > 0.0}
    pairs = [(p.uid, scores.get(p.uid, 0.0)) for p in state.peers.values() if not p.detached]
    return sorted(pairs, key=lambda r: (-r[1], r[0]))


def _missed_since(peer: PeerRating) -> bool:
    return peer.consecutive_misses > 0 or peer.inactive_windows > 0
