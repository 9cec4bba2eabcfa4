"""Ratings from the window's outcomes, the aggregation set, and chain weights from the ratings.

(The weight *policy* is `scoring.weights.WeightPolicy`; this module's rules are the ranking's.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scoring.ranking import (
    PeerOutcome,
    RatingConfig,
    RatingState,
    Status,
    proven,
    ranked_by_uid,
    update_ratings,
)
from scoring.selection import Candidate, Selection, SelectionConfig, select_aggregation
from scoring.types import Reason
from scoring.weights import WeightPolicy
from validator.round.outcomes import PeerWindow


@dataclass(frozen=True, slots=True)
class RankingConfig:
    """How peers are rated and which of them are aggregated."""

    rating: RatingConfig = RatingConfig()
    selection: SelectionConfig = SelectionConfig()


def _status(p: PeerWindow) -> Status:
    """A peer the fetch never got to is `skipped`: the validator's budget ran out, not the peer."""
    return Status.SKIPPED if p.reason == Reason.NOT_ATTEMPTED else Status(p.status)


def outcomes_of(peers: Sequence[PeerWindow]) -> list[PeerOutcome]:
    """The rating input of each peer. A valid, evaluated submission is in sync by construction:
    its base matched and it was on time, or the checks would have rejected it."""
    out = []
    for p in peers:
        e = p.evaluation
        out.append(
            PeerOutcome(
                hotkey=p.hotkey,
                uid=p.uid,
                status=_status(p),
                score=e.score if e is not None and p.valid else None,
                indicator=e.indicator if e is not None and p.valid else None,
                sync=1.0,
                copy_tier=p.copy_tier,
                own_gain=e.own_gain if e is not None and p.valid else None,
            )
        )
    return out


def rate_window(
    state: RatingState, peers: Sequence[PeerWindow], window: int, cfg: RankingConfig
) -> RatingState:
    return update_ratings(state, window, outcomes_of(peers), cfg.rating)


def select_window(
    state: RatingState,
    peers: Sequence[PeerWindow],
    window: int,
    cfg: RankingConfig,
    twins: Sequence[tuple[str, str]] = (),
) -> Selection[str]:
    """Every peer that proved its training and contributes, ordered by final score
    (scoring/selection.py); `twins` are near-identical pairs whose upload order was unclear."""
    candidates = []
    for p in peers:
        rating, e = state.peers.get(p.hotkey), p.evaluation
        if not p.valid or rating is None:
            continue
        candidates.append(
            Candidate(
                key=p.hotkey,
                final=rating.final,
                proven=proven(rating, cfg.rating),
                gain=e.score if e is not None else None,
                indicator=e.indicator if e is not None else None,
                banned=rating.banned(window),
                neg_streak=rating.consecutive_negative,
            )
        )
    return select_aggregation(candidates, cfg.selection, twins)


def weights_for(state: RatingState, window: int, policy: WeightPolicy) -> dict[int, float]:
    """`{uid: weight}` from the final scores after `window` (banned peers get nothing)."""
    return policy.compute(ranked_by_uid(state, window))
