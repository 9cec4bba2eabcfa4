"""How faithfully the ranking follows true contribution (issue 12): Spearman over honest peers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from validator.demo.sim.behaviours import HONEST_CONTRIBUTION


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation; None when either side is constant or too short."""
    if len(xs) != len(ys) or len(xs) < 2:
        return None
    rx, ry = average_ranks(xs), average_ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return None if sxx == 0 or syy == 0 else sxy / (sxx * syy) ** 0.5


def honest_spearman(peers: Sequence[Mapping[str, Any]]) -> float | None:
    """Spearman between leaderboard position (rank 1 best) and true contribution, honest peers only."""
    honest = [p for p in peers if p["behaviour"] in HONEST_CONTRIBUTION]
    return spearman(
        [-float(p["rank"]) for p in honest], [HONEST_CONTRIBUTION[p["behaviour"]] for p in honest]
    )
