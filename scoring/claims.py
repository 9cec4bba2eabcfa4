"""Whose update two tied senders sent, read over every window the pair was tied, not one.

A copy finding with an unclear upload order ties two senders (scoring/twins.py): of one update,
the pages of its author gain and the other sender's read t ~ N(0, 1). One window's claim
(scoring/authorship.py `claim_gap`) decides which of the two is kept. But an author's own pages
read 2.3 ± 1.4 a window (a full honest peer), so in some windows they read no better than the
copier's by chance: `frontrun_proven` under seed 1 (benchmarks/bench_fidelity.py), window 6, the
victim's own pages read t 0.41 and its frontrunner's, with the victim's update, 0.44, and the
frontrunner was aggregated in its victim's place. In the two windows before, the same pair read
1.44 and 0.32 t in the victim's favour.

So each tied pair keeps the mean of its claim gap over the windows it was tied, in both directions
(with readings of each update on the other's pages the gap is not antisymmetric), and how many
windows that mean holds. Both are stored on the sender's rating (`PeerRating.claims`,
`PeerRating.claim_windows`) and recorded with every window, so replay re-derives them:

    n ← n + 1;  claim ← claim + max(1/n, 1/memory) · (gap − claim)

the plain mean of the pair's first `memory` windows, then an exponential mean that weighs this
window 1/memory. A pair's first window reads its gap; its second, the mean of two, as when every
later window weighed ½ (`memory` 2, this module before). The mean is the least noisy reading of a
steady claim: simulated (tests/test_claims.py, 200 runs of 8 windows), a full author copied by a
crowd of eight is left out in 107 of 1,600 windows at `memory` 8, 162 at `memory` 2 and 486 by
each window's tests alone; a ⅒-steps author copied once in 205, 308 and 468. A window in which
the pair is not tied, or either sender is not evaluated, leaves both as they were.
Ownership and the order of twins read the mean (scoring/twins.py `judge_twins`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from scoring.authorship import Readings, claim_gap

Pair = tuple[str, str]
Claims = Mapping[str, Mapping[str, float]]  # claims[x][p]: x's claim to the update it shares with p
Counts = Mapping[str, Mapping[str, int]]  # counts[x][p]: the windows claims[x][p] is the mean of


@dataclass(frozen=True, slots=True)
class ClaimConfig:
    memory: int = 8  # windows a claim is the plain mean of; later ones weigh 1/memory
    max_partners: int = 16  # partners kept per sender, the latest tied first: stored every window

    def __post_init__(self) -> None:
        if self.memory < 1:
            raise ValueError("memory must be >= 1")
        if self.max_partners < 1:
            raise ValueError("max_partners must be >= 1")


@dataclass(frozen=True, slots=True)
class ClaimBook:
    """Every sender's claims and the windows each one is the mean of."""

    mean: Claims = field(default_factory=dict)
    # a claim stored without its count (before counts were kept) counts one window: its next moves
    # it by ½, as every later window did then
    windows: Counts = field(default_factory=dict)


def update_claims(
    book: ClaimBook,
    tied: Sequence[Pair],
    page_t: Mapping[str, float],
    readings: Readings,
    cfg: ClaimConfig,
) -> ClaimBook:
    """Every sender's claims after one window: `tied`, the window's pairs of which at most one is
    aggregated for a copy finding (unclear findings, one payload's senders); `page_t` and `readings`
    as `claim_gap` reads them. A pair's mean moves only in a window it is tied with both evaluated."""
    out = {x: dict(others) for x, others in book.mean.items()}
    counts = {x: dict(others) for x, others in book.windows.items()}
    fresh: dict[str, list[str]] = {}
    for a, b in sorted({(min(pair), max(pair)) for pair in tied if pair[0] != pair[1]}):
        for x, p in ((a, b), (b, a)):
            gap = claim_gap(x, p, page_t, readings)
            if gap is None:
                continue
            prior, held = _held(book, x, p)
            n = held + 1
            out.setdefault(x, {})[p] = (
                gap if prior is None else prior + max(1 / n, 1 / cfg.memory) * (gap - prior)
            )
            counts.setdefault(x, {})[p] = n
            fresh.setdefault(x, []).append(p)
    for x, latest in fresh.items():
        if len(out[x]) > cfg.max_partners:  # this window's partners first, then the largest claims
            rest = sorted((p for p in out[x] if p not in latest), key=lambda p: (-abs(out[x][p]), p))
            keep = set((sorted(latest) + rest)[: cfg.max_partners])
            out[x] = {p: v for p, v in out[x].items() if p in keep}
    mean = {x: dict(sorted(others.items())) for x, others in sorted(out.items()) if others}
    kept = {x: {p: counts.get(x, {}).get(p, 1) for p in others} for x, others in mean.items()}
    return ClaimBook(mean, kept)


def _held(book: ClaimBook, x: str, p: str) -> tuple[float | None, int]:
    """x's claim over p before this window and how many windows it holds. A direction the book lacks
    while p's holds (x's record left the state and came back, and p kept its side) reads p's claim
    reversed: exactly x's for one payload, at least x's with readings (`claim_gap` takes the smaller
    of two gaps), so it leans against the sender that came back. A sender that left to shed its
    claims (a copier reset for copying, quiet for three windows) came back to one window's reading."""
    if (own := book.mean.get(x, {}).get(p)) is not None:
        return own, book.windows.get(x, {}).get(p, 1)
    if (theirs := book.mean.get(p, {}).get(x)) is not None:
        return -theirs, book.windows.get(p, {}).get(x, 1)
    return None, 0


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
