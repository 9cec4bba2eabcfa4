"""Weight policies: final scores to normalized weights per uid (DESIGN.md §8).

The u16 conversion and the chain call belong to the bittensor SDK, not here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class WeightPolicy(Protocol):
    def compute(self, ranked: Sequence[tuple[int, float]]) -> dict[int, float]:
        """`{uid: weight}`, summing to 1 (or empty when nobody and no burn uid qualifies)."""
        ...


def _check_burn(uid: int | None, share: float) -> None:
    if not 0.0 <= share <= 1.0 or (share > 0.0 and uid is None):
        raise ValueError("burn_share must be in [0, 1] and needs a burn_uid")


@dataclass(frozen=True, slots=True)
class RankWeightsConfig:
    top_peers: int = 20
    top_share: float = 0.75
    ramp_high: float = 2.0
    ramp_low: float = 1.0
    tail_peers: int = 10
    tail_share: float = 0.25
    tail_decay: float = 0.5
    # The tail's 0.5^i at a 25 % share gives its first peer 12.5 %, more than any top peer (5 %):
    # rank 21 would pay more than rank 1. Monotone caps the tail at the last top weight.
    monotone: bool = True
    burn_uid: int | None = None
    burn_share: float = 0.0

    def __post_init__(self) -> None:
        if self.top_peers < 1 or self.tail_peers < 0:
            raise ValueError("need top_peers >= 1 and tail_peers >= 0")
        if not self.ramp_high >= self.ramp_low > 0 or not 0 < self.tail_decay <= 1:
            raise ValueError("need ramp_high >= ramp_low > 0 and 0 < tail_decay <= 1")
        if self.top_share <= 0 or self.tail_share < 0:
            raise ValueError("need top_share > 0 and tail_share >= 0")
        _check_burn(self.burn_uid, self.burn_share)


@dataclass(frozen=True, slots=True)
class PowerWeightsConfig:
    power: float = 2.0
    max_peers: int | None = None
    burn_uid: int | None = None
    burn_share: float = 0.0

    def __post_init__(self) -> None:
        if self.power <= 0 or (self.max_peers is not None and self.max_peers < 1):
            raise ValueError("need power > 0 and max_peers >= 1")
        _check_burn(self.burn_uid, self.burn_share)


class RankWeights:
    """Top peers on a linear ramp, the next ones on a geometric tail; positive scores only."""

    def __init__(self, cfg: RankWeightsConfig = RankWeightsConfig()) -> None:
        self.cfg = cfg

    def compute(self, ranked: Sequence[tuple[int, float]]) -> dict[int, float]:
        cfg = self.cfg
        order, scores = _positive_in_rank_order(ranked), dict(ranked)
        cut = cfg.top_peers + cfg.tail_peers
        while 0 < cut < len(order) and scores[order[cut]] == scores[order[cut - 1]]:
            cut += 1  # a tie at the cut is paid whole, not by uid
        top, tail = order[: cfg.top_peers], order[cfg.top_peers : cut]
        n = len(top)
        ramp = [cfg.ramp_high - (cfg.ramp_high - cfg.ramp_low) * i / max(n - 1, 1) for i in range(n)]
        top_w = _scaled(ramp, cfg.top_share)
        tail_w = _scaled([cfg.tail_decay**i for i in range(len(tail))], cfg.tail_share)
        if cfg.monotone and tail_w and tail_w[0] > top_w[-1]:
            tail_w = [w * top_w[-1] / tail_w[0] for w in tail_w]
        raw = _ties_alike(dict(zip(top + tail, top_w + tail_w, strict=True)), scores)
        return _with_burn(raw, cfg.burn_uid, cfg.burn_share)


def _ties_alike(weights: dict[int, float], scores: Mapping[int, float]) -> dict[int, float]:
    """Peers of equal score share their places' weights equally: the rank order breaks ties by uid,
    which would pay one of two equal peers more for its number."""
    by_score: dict[float, list[int]] = {}
    for uid in weights:
        by_score.setdefault(scores[uid], []).append(uid)
    out = dict(weights)
    for uids in by_score.values():
        if len(uids) > 1:
            mean = sum(weights[u] for u in uids) / len(uids)
            out.update(dict.fromkeys(uids, mean))
    return out


class PowerWeights:
    """Weight ∝ score^power over positive scores (optionally only the best `max_peers`)."""

    def __init__(self, cfg: PowerWeightsConfig = PowerWeightsConfig()) -> None:
        self.cfg = cfg

    def compute(self, ranked: Sequence[tuple[int, float]]) -> dict[int, float]:
        scores = dict(ranked)
        order = _positive_in_rank_order(ranked)[: self.cfg.max_peers]
        # relative to the best score: a tiny best score to the power underflows to a subnormal,
        # and normalising by a subnormal total lost 1.5 % of the weight (1.3e-161 squared)
        best = scores[order[0]] if order else 1.0
        raw = {uid: (scores[uid] / best) ** self.cfg.power for uid in order}
        return _with_burn(raw, self.cfg.burn_uid, self.cfg.burn_share)


def _positive_in_rank_order(ranked: Sequence[tuple[int, float]]) -> list[int]:
    if len({uid for uid, _ in ranked}) != len(ranked):
        raise ValueError("one score per uid")
    return [uid for uid, score in sorted(ranked, key=lambda r: (-r[1], r[0])) if score > 0.0]


def _scaled(values: list[float], total: float) -> list[float]:
    s = sum(values)
    return [v * total / s for v in values] if s > 0 else []


def _with_burn(raw: dict[int, float], burn_uid: int | None, burn_share: float) -> dict[int, float]:
    """Normalize to 1 − burn_share and give the burn uid the rest (all of it when `raw` is empty)."""
    total = sum(raw.values())
    if total <= 0.0:
        return {burn_uid: 1.0} if burn_uid is not None else {}
    out = {uid: w * (1.0 - burn_share) / total for uid, w in raw.items()}
    if burn_uid is not None:
        out[burn_uid] = out.get(burn_uid, 0.0) + burn_share
    return out
