"""Penalty multipliers on the final score (DESIGN.md §7): misses, inactivity, copying.

Multipliers apply to positive values only: scaling a negative value by 0.75 would *raise* it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PenaltyConfig:
    # Consecutive misses: the k-th miss in a row multiplies by miss_multipliers[min(k, len) - 1].
    miss_multipliers: tuple[float, ...] = (0.75, 0.5, 0.0)
    copy_multiplier: float = 0.5
    ban_windows: int = 20
    inactive_multiplier: float = 0.75
    inactive_reset_windows: int = 3

    def __post_init__(self) -> None:
        factors = (*self.miss_multipliers, self.copy_multiplier, self.inactive_multiplier)
        if not self.miss_multipliers or not all(0.0 <= m <= 1.0 for m in factors):
            raise ValueError("multipliers must be in [0, 1] and miss_multipliers non-empty")
        if self.ban_windows < 1 or self.inactive_reset_windows < 1:
            raise ValueError("ban_windows and inactive_reset_windows must be >= 1")


def scale_positive(value: float, multiplier: float) -> float:
    """`value × multiplier` for positive values; other values are left as they are."""
    return value * multiplier if value > 0.0 else value


def miss_multiplier(consecutive_misses: int, cfg: PenaltyConfig) -> float:
    """Multiplier for a peer that has now missed `consecutive_misses` (≥ 1) windows in a row."""
    if consecutive_misses < 1:
        raise ValueError("consecutive_misses must be >= 1")
    table = cfg.miss_multipliers
    return table[min(consecutive_misses, len(table)) - 1]
