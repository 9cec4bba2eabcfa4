"""Stages 5–6 and 8: ratings from the window's outcomes, the aggregation set, and chain weights."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scoring.ranking import PeerOutcome, RatingConfig, RatingState, Status, ranked_by_uid, update_ratings
from scoring.selection import Selection, SelectionConfig, select_peers
from scoring.weights import WeightPolicy
from validator.outcomes import PeerWindow


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    rating: RatingConfig = RatingConfig()
    selection: SelectionConfig = SelectionConfig()


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
                status=Status(p.status),
                score=e.score if e is not None and p.valid else None,
                indicator=e.indicator if e is not None and p.valid else None,
                sync=1.0,
                copy_tier=p.copy_tier,
            )
        )
    return out


def rate_window(
    state: RatingState, peers: Sequence[PeerWindow], window: int, cfg: PolicyConfig
) -> RatingState:
    return update_ratings(state, window, outcomes_of(peers), cfg.rating)


def select_window(
    state: RatingState, peers: Sequence[PeerWindow], window: int, cfg: PolicyConfig
) -> Selection[str]:
    """Top peers by final score among this window's valid submissions (bans, losing streaks out)."""
    ratings = state.peers
    return select_peers(
        final_scores={h: r.final for h, r in ratings.items()},
        valid=[p.hotkey for p in peers if p.valid],
        banned={h for h, r in ratings.items() if r.banned(window)},
        neg_streaks={h: r.consecutive_negative for h, r in ratings.items()},
        cfg=cfg.selection,
    )


def weights_for(state: RatingState, window: int, policy: WeightPolicy) -> dict[int, float]:
    """`{uid: weight}` from the final scores after `window` (banned peers get nothing)."""
    return policy.compute(ranked_by_uid(state, window))
