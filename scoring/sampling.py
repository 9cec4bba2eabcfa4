"""Which peers to evaluate this window when the budget cannot cover all (DESIGN.md §3.4).

Candidates are ranked by rating and cut into `bins` equal bins; the budget is shared among bins in
proportion to their size, so every rating level is covered. Inside a bin peers are drawn without
replacement with weight 1 + (windows since last evaluated, capped), so nobody waits long. The draw
is a pure function of (seed, window): replay reproduces it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class SamplingConfig:
    bins: int = 3
    max_staleness: int = 10  # windows since last evaluation count up to this (never evaluated: max)

    def __post_init__(self) -> None:
        if self.bins < 1 or self.max_staleness < 0:
            raise ValueError("need bins >= 1 and max_staleness >= 0")


@dataclass(frozen=True, slots=True)
class History:
    """What the draw knows of the candidates, both read from their ratings: the rating that ranks
    them and the window each was last evaluated in (absent: never)."""

    ratings: Mapping[str, float] = field(default_factory=dict)
    last_evaluated: Mapping[str, int] = field(default_factory=dict)


def sample_for_evaluation(
    candidates: Sequence[str],
    budget: int,
    history: History,
    window: int,
    seed: int,
    cfg: SamplingConfig = SamplingConfig(),
) -> list[str]:
    """The hotkeys to evaluate, sorted; all of them when `budget` allows."""
    if budget < 0 or len(set(candidates)) != len(candidates):
        raise ValueError("need budget >= 0 and distinct candidates")
    if budget >= len(candidates):
        return sorted(candidates)
    ranked = sorted(candidates, key=lambda h: (-history.ratings.get(h, 0.0), h))
    bins = [list(b) for b in np.array_split(np.array(ranked, dtype=object), min(cfg.bins, len(ranked)))]
    quotas = _split_budget([len(b) for b in bins], budget)
    rng = np.random.default_rng([seed, window])
    chosen: list[str] = []
    for members, quota in zip(bins, quotas, strict=True):
        weights = np.array([_staleness(h, history, window, cfg) for h in members], dtype=np.float64)
        chosen.extend(_weighted_draw(members, weights, quota, rng))
    return sorted(chosen)


def _staleness(hotkey: str, history: History, window: int, cfg: SamplingConfig) -> float:
    last = history.last_evaluated.get(hotkey)
    waited = cfg.max_staleness if last is None else min(max(window - last, 0), cfg.max_staleness)
    return 1.0 + waited


def _split_budget(sizes: Sequence[int], budget: int) -> list[int]:
    """Largest-remainder shares of `budget` proportional to `sizes` (ties to earlier bins)."""
    total = sum(sizes)
    exact = [budget * s / total for s in sizes]
    quotas = [int(e) for e in exact]
    by_remainder = sorted(range(len(sizes)), key=lambda i: (-(exact[i] - quotas[i]), i))
    for i in by_remainder[: budget - sum(quotas)]:
        quotas[i] += 1
    return quotas


def _weighted_draw(members: list[str], weights: np.ndarray, k: int, rng: np.random.Generator) -> list[str]:
    # Efraimidis–Spirakis: the k largest u^(1/w) are a weighted draw without replacement.
    keys = rng.random(len(members)) ** (1.0 / weights)
    order = np.argsort(-keys, kind="stable")[:k]
    return [members[int(i)] for i in order]
