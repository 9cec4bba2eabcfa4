"""Proof of training: has a peer shown that it trains on the pages it was assigned?

`proven` reads the evidence `scoring/ranking.py` accumulates per evaluation (its module docstring
gives the rule and the measurements behind it); `relative_margin` is one evaluation's share of it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the ranking imports this module's margin
    from scoring.ranking import PeerRating, RatingConfig


def proven(peer: PeerRating, cfg: RatingConfig) -> bool:
    """Has the peer proven that it trains on its own data (scoring/ranking.py's docstring)?"""
    if (n := peer.evaluations) < max(cfg.proof_min_evaluations, 1) or peer.margin_sum / n < cfg.proof_margin:
        return False
    z2, rate = cfg.proof_z**2, peer.positives / n
    centre = rate + z2 / (2 * n)
    spread = cfg.proof_z * math.sqrt(rate * (1.0 - rate) / n + z2 / (4 * n * n))
    return (centre - spread) / (1.0 + z2 / n) >= cfg.proof_rate


def relative_margin(score: float, own_gain: float | None) -> float:
    """The update's extra gain on the peer's own pages over held-out ones, relative, in [−1, 1]
    (1 without an own gain: callers that only know the indicator)."""
    return 1.0 if own_gain is None else max(-1.0, min(1.0, (own_gain - score) / max(abs(score), 1e-9)))
