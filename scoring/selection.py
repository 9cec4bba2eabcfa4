"""Which peers are aggregated this window (DESIGN.md §8): gather set and reserve backfill."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from scoring.ranking import RatingState

K = TypeVar("K", int, str)  # uid or hotkey


@dataclass(frozen=True, slots=True)
class SelectionConfig:
    gather_peers: int = 20
    reserve_peers: int = 10
    max_negative_streak: int = 3  # excluded at this many consecutive negative scores
    require_positive: bool = False  # False lets a cold start (all scores 0) still train

    def __post_init__(self) -> None:
        if self.gather_peers < 1 or self.reserve_peers < 0 or self.max_negative_streak < 1:
            raise ValueError("need gather_peers >= 1, reserve_peers >= 0, max_negative_streak >= 1")


@dataclass(frozen=True, slots=True)
class Selection(Generic[K]):
    gather: tuple[K, ...]
    reserve: tuple[K, ...]


def select_peers(
    final_scores: Mapping[K, float],
    valid: Collection[K],
    banned: Collection[K],
    neg_streaks: Mapping[K, int],
    cfg: SelectionConfig = SelectionConfig(),
) -> Selection[K]:
    """Top `gather_peers` by final score among eligible peers, then the next `reserve_peers`.

    Eligible: a valid submission this window, not banned, fewer than `max_negative_streak`
    consecutive negative scores. Ties break by key, ascending, so the order is total."""
    eligible = [
        k
        for k in valid
        if k not in banned
        and neg_streaks.get(k, 0) < cfg.max_negative_streak
        and (not cfg.require_positive or final_scores.get(k, 0.0) > 0.0)
    ]
    ranked = sorted(eligible, key=lambda k: (-final_scores.get(k, 0.0), k))
    gather = ranked[: cfg.gather_peers]
    reserve = ranked[cfg.gather_peers : cfg.gather_peers + cfg.reserve_peers]
    return Selection(tuple(gather), tuple(reserve))


def select_from_ratings(
    state: RatingState, valid: Collection[str], window: int, cfg: SelectionConfig = SelectionConfig()
) -> Selection[str]:
    """`select_peers` over hotkeys, with scores, bans and negative streaks read from `state`."""
    peers = state.peers
    return select_peers(
        {h: p.final for h, p in peers.items()},
        valid,
        {h for h, p in peers.items() if p.banned(window)},
        {h: p.consecutive_negative for h, p in peers.items()},
        cfg,
    )
