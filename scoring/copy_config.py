"""The copy check's tiers and settings (scoring/uniqueness.py), on their own so that the check's
module holds its logic."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class CopyTier(IntEnum):
    """Penalty tier of a copier, ordered by severity (DESIGN.md §7)."""

    NONE = 0
    HALVE = 1
    RESET = 2
    BAN = 3


@dataclass(frozen=True, slots=True)
class UniquenessConfig:
    chunk: int = 4096
    topk: int = 64
    halve_at: float = 0.15
    reset_at: float = 0.5
    ban_at: float = 0.6
    calibrate: bool = True  # tiers apply to the overlap's excess over the window's typical pair
    similarity_floor: float = 0.1  # a calibrated flag needs at least this residual similarity
    resemblance_floor: float = 0.03  # pairs reported for the links across windows (scoring/links.py)
    # Sampling error depends on the number of blocks, not their size: 128 one-chunk blocks give
    # std ≤ 0.5/√128 ≈ 0.044 even for all-or-nothing copying per block, 4.5 std below the first
    # tier at the default margin; honest pairs estimate ≈ 0.01 ± 0.008 (sketch noise 1/√2^14).
    sample_blocks: int = 128
    block_chunks: int = 1
    sketch_bits: int = 14
    candidate_margin: float = 0.1
    same_update: float = 0.9  # estimated overlap of one update sent twice (scoring/same_update.py)
    watch: int = 2  # the closest unflagged pairs offered to the readings (scoring/uniqueness.py `_closest`)

    def __post_init__(self) -> None:
        if self.chunk <= 0 or not 0 < self.topk <= self.chunk:
            raise ValueError("need 0 < topk <= chunk")
        if not 0.0 < self.halve_at <= self.reset_at <= self.ban_at <= 1.0:
            raise ValueError("need 0 < halve_at <= reset_at <= ban_at <= 1")
        if self.sample_blocks <= 0 or self.block_chunks <= 0:
            raise ValueError("sample_blocks and block_chunks must be positive")
        if not 8 <= self.sketch_bits <= 24:
            raise ValueError("sketch_bits must be in [8, 24]")
        if not 0.0 <= self.candidate_margin < self.halve_at:
            raise ValueError("need 0 <= candidate_margin < halve_at")
        if not 0.0 < self.same_update <= 1.0:
            raise ValueError("need 0 < same_update <= 1")
        if self.watch < 0:
            raise ValueError("watch must be >= 0")

    def tier(self, overlap: float) -> CopyTier:
        if overlap >= self.ban_at:
            return CopyTier.BAN
        if overlap >= self.reset_at:
            return CopyTier.RESET
        if overlap >= self.halve_at:
            return CopyTier.HALVE
        return CopyTier.NONE
