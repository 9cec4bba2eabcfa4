"""Whose update two tied senders sent, read over every window the pair was tied, not one.

A copy finding with an unclear upload order ties two senders (scoring/twins.py): of one update,
the pages of its author gain and the other sender's read t ~ N(0, 1). One window's claim
(scoring/authorship.py `claim_gap`) decides which of the two is kept. But an author's own pages
read 2.3 ± 1.4 a window (a full honest peer), so in some windows they read no better than the
copier's by chance: `frontrun_proven` under seed 1 (benchmarks/bench_fidelity.py), window 6, the
victim's own pages read t 0.41 and its frontrunner's, with the victim's update, 0.44, and the
frontrunner was aggregated in its victim's place. In the two windows before, the same pair read
1.44 and 0.32 t in the victim's favour.

So each tied pair keeps a running mean of its claim gap, in both directions (with readings of each
update on the other's pages the gap is not antisymmetric), stored on the sender's rating
(`PeerRating.claims`) and recorded with every window, so replay re-derives it:

    claim ← gap                            the first window the pair is tied, both evaluated
    claim ← claim + rate · (gap − claim)    every later one

At `rate` 0.5 the mean's spread is √(1/3) of one window's, and a pair's first window reads as it
did before. A window in which the pair is not tied, or either sender is not evaluated, leaves it
as it was. Ownership and the order of twins read the mean (scoring/twins.py `judge_twins`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from scoring.authorship import Readings, claim_gap

Pair = tuple[str, str]
Claims = Mapping[str, Mapping[str, float]]  # claims[x][p]: x's claim to the update it shares with p


@dataclass(frozen=True, slots=True)
class ClaimConfig:
    rate: float = 0.5  # the weight of this window's gap in the running mean
    max_partners: int = 16  # partners kept per sender, the latest tied first: stored every window

    def __post_init__(self) -> None:
        if not 0.0 < self.rate <= 1.0:
            raise ValueError("need 0 < rate <= 1")
        if self.max_partners < 1:
            raise ValueError("max_partners must be >= 1")


def update_claims(
    claims: Claims,
    tied: Sequence[Pair],
    page_t: Mapping[str, float],
    readings: Readings,
    cfg: ClaimConfig,
) -> dict[str, dict[str, float]]:
    """Every sender's claims after one window: `tied`, the window's pairs of which at most one is
    aggregated for a copy finding (unclear findings, one payload's senders); `page_t` and `readings`
    as `claim_gap` reads them. A pair's mean moves only in a window it is tied with both evaluated."""
    out = {x: dict(others) for x, others in claims.items()}
    fresh: dict[str, list[str]] = {}
    for a, b in sorted({(min(pair), max(pair)) for pair in tied if pair[0] != pair[1]}):
        for x, p in ((a, b), (b, a)):
            gap = claim_gap(x, p, page_t, readings)
            if gap is None:
                continue
            prior = out.get(x, {}).get(p)
            out.setdefault(x, {})[p] = gap if prior is None else prior + cfg.rate * (gap - prior)
            fresh.setdefault(x, []).append(p)
    for x, latest in fresh.items():
        if len(out[x]) > cfg.max_partners:  # this window's partners first, then the largest claims
            rest = sorted((p for p in out[x] if p not in latest), key=lambda p: (-abs(out[x][p]), p))
            keep = set((sorted(latest) + rest)[: cfg.max_partners])
            out[x] = {p: v for p, v in out[x].items() if p in keep}
    return {x: dict(sorted(others.items())) for x, others in sorted(out.items()) if others}


def claim_gaps(claims: Claims, tied: Sequence[Pair], evaluated: Collection[str]) -> dict[Pair, float]:
    """The running means of this window's tied pairs of evaluated senders, both directions: what
    scoring/twins.py reads in place of one window's `claim_gap`."""
    out = {}
    for a, b in tied:
        if a in evaluated and b in evaluated:
            for x, p in ((a, b), (b, a)):
                if (value := claims.get(x, {}).get(p)) is not None:
                    out[(x, p)] = value
    return out
