"""Which of a window's resembling peers may be aggregated (scoring/selection.py).

Two kinds of evidence tie peers together. A copy finding whose upload order was unclear
(scoring/uniqueness.py) names a pair of which at most one is aggregated: nobody is penalised, and
the one kept is the one the validator saw upload (a peer whose store hid from its polls made itself
unobservable, and a well-rated thief re-signing a victim's bytes that way took the victim's place),
then the better rated, then the earlier seen (the hotkey only breaks equal times). Links
(scoring/links.py) tie peers whose updates kept resembling each other across windows: a group of
three or more linked peers (colluders sharing a hidden direction) is left out entirely, whether or
not each of them would have been aggregated.

A group tied by copy findings is judged by who in it would be aggregated, and identical payloads
count as one update: otherwise two identities re-signing a victim's bytes from stores the polls never
reached (an unclear order) made a group of three with the victim and sank it, for nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

Pair = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Twins:
    copies: Sequence[Pair] = ()  # copy findings of this window whose upload order was unclear
    same: Sequence[Pair] = ()  # those of them that sent the same payload (equal digests)
    linked: Sequence[Pair] = ()  # pairs linked across windows whose order this window is unclear
    seen: Mapping[str, float] = field(default_factory=dict)  # upload times the validator saw (inf: none)


NO_TWINS = Twins()


@dataclass(frozen=True, slots=True)
class Verdict:
    grouped: frozenset[str]  # left out with their whole group (a colluding cluster)
    lesser: frozenset[str]  # left out for a better-rated twin


def judge_twins(
    present: Collection[str], kept: Collection[str], final: Callable[[str], float], twins: Twins
) -> Verdict:
    """`present`: the window's candidates; `kept`: those the selection would aggregate otherwise;
    `final`: a kept peer's final score."""

    def rank(k: str) -> tuple[bool, float, float, str]:  # best first (module docstring)
        seen = twins.seen.get(k, math.inf)
        return math.isinf(seen), -final(k), seen, k

    linked = [(a, b) for a, b in twins.linked if a in present and b in present]
    grouped = {k for group in clusters(linked) if len(group) > 2 for k in group}
    alive = set(kept) - grouped
    # one update's senders are tied among themselves too, not only through the one each was matched
    # with: that one left out (unproven, rated low), every other sender was aggregated
    one_update = [
        sorted(g & alive) for g in clusters([p for p in twins.same if p[0] in present and p[1] in present])
    ]
    same_pairs = [*twins.same, *((g[0], k) for g in one_update for k in g[1:])]
    pairs = [(a, b) for a, b in [*twins.copies, *twins.linked, *same_pairs] if a in alive and b in alive]
    lesser: set[str] = set()
    for group in clusters(pairs):
        same = [(a, b) for a, b in same_pairs if a in group and b in group]
        updates = len(clusters(same)) + len(group - {k for pair in same for k in pair})
        if updates > 2:  # three or more distinct updates tied together: none of them steers the model
            grouped |= group
        else:
            lesser |= set(sorted(group, key=rank)[1:])
    return Verdict(frozenset(grouped), frozenset(lesser))


def clusters(pairs: Sequence[Pair]) -> list[set[str]]:
    """Connected groups of keys linked by `pairs`, in a deterministic order."""
    groups: list[set[str]] = []
    for a, b in sorted(tuple(sorted(p)) for p in pairs):
        touching = [g for g in groups if a in g or b in g]
        merged = {a, b}.union(*touching)
        groups = [g for g in groups if g not in touching] + [merged]
    return sorted(groups, key=min)
