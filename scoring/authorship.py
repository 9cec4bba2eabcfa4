"""Whose assigned pages an update two identities sent was trained on, read pair by pair.

A copy finding ties two senders of (nearly) one update. Each sender's page test on its own pages
(scoring/page_test.py) says whose pages the update gains on only when both sent *the same* update:
a sender can add a little training on its own public pages to a copy of another peer's update and
so raise its own t while its victim's stays, and every rule that compared own tests then trusted
the copier (a red-team run, on the pure functions: a proven victim disowned, a newcomer convicted
on a frontrunner's word, the copier's proof growing). So for a flagged pair whose payloads differ
the validator also evaluates each update on the other sender's pages (validator/round/cross.py):
the reading (x, p) is the page test on x's pages of the update p sent, how much of x's training it
holds. A copy holds its victim's training; the victim's update holds none of the copier's.

The readings can be moved too: the sender of a copy decides how much of its victim's training the
copy keeps, and a blend keeps half of each of two peers' (`bench_fidelity`'s `blend`, seed 0: one
author's training read −0.17 on its own pages through the blend, the blend's pages 1.22 through
the author's update by chance, and the author was left out of a window when the readings alone
decided). So a rule against a sender needs both to agree: the gap in the pair's own page tests and
the gap in their readings (`claim_gap`). For one payload the two are the same and the rules read
exactly as they did before the readings.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from itertools import combinations
from statistics import NormalDist

Pair = tuple[str, str]
# (x, p): the page test t on x's assigned pages of the update p sent (measured for flagged pairs
# whose payloads differ; absent otherwise)
Readings = Mapping[Pair, float]
NO_READINGS: Readings = {}


def claim_gap(x: str, p: str, page_t: Mapping[str, float], readings: Readings) -> float | None:
    """How far x's claim to the update it shares with p reads under p's: the smaller of p's own page
    test less x's, and the reading of x's update on p's pages less that of p's update on x's (the
    same gap for one payload). None when either was not evaluated."""
    mine, theirs = page_t.get(x), page_t.get(p)
    if mine is None or theirs is None:
        return None
    held_by_p, held_by_x = readings.get((x, p)), readings.get((p, x))
    if held_by_p is None or held_by_x is None:
        return theirs - mine
    return min(theirs - mine, held_by_x - held_by_p)


def orders_agree(group: Collection[str], page_t: Mapping[str, float], readings: Readings) -> bool:
    """Do the own page tests order every read pair of `group` as the readings do? Where they do not,
    neither may decide which of the two is kept (`claim_gap`'s rule for a ranking)."""
    for x, p in combinations(sorted(group), 2):
        read = (x, p) in readings and (p, x) in readings and x in page_t and p in page_t
        if read and (page_t[x] - page_t[p]) * (readings[(x, p)] - readings[(p, x)]) < 0.0:
            return False
    return True


def crowd_lead(others: int) -> float:
    """The expected best of `others` independent N(0, 1) page tests, over that of one (Blom's
    approximation of the largest normal order statistic; 0 for one, 1.49 for 9, 2.50 for 99).

    Pages an update never saw read t ~ N(0, 1), so the best of a crowd of identities sending copies
    of one update reads higher the more there are: against the group's best alone, eight copies of
    a proven peer's update (`copy_crowd`, benchmarks/bench_fidelity.py) left their victim out
    whenever its own t read under the luckiest copier's by the margin. With the lead, a pair is
    judged as before and a crowd buys no more than one copier does."""
    if others <= 1:
        return 0.0
    return NormalDist().inv_cdf((others - 0.375) / (others + 0.25))
