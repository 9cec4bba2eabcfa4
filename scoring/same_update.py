"""Peers that sent one update: equal payloads, or the same kept positions with jittered values.

Copies of one update in numbers set the window's calibration. The copy check measures each pair
against the window's typical overlap (the median pair) and the consensus of the others' updates;
with two thirds of a window sending one update with its values jittered (new digests, the same
positions: overlap 1), the median pair was a pair of copies and the consensus their update, and
no pair was flagged at all (16 copies beside 8 independent peers, and every larger crowd). Such
a group is one update: its members are tied to its first upload (scoring/copy_findings.py) and only
that one takes part in the calibration. Honest pairs share at most ≈ 0.76 of positions, at one
inner step from the same base (tests/test_copy_calibration.py); `same_update` is 0.9.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def same_update_groups(
    digests: list[str], estimates: npt.NDArray[np.float64], threshold: float, order: list[int]
) -> list[list[int]]:
    """Groups of peers (indices) that sent one update, each headed by its first peer in `order`
    (first upload): a peer joins the first head before it whose digest it shares or whose kept
    positions it shares by an estimated `threshold`. Only a head's own pairs count: taken
    transitively, a walk of sybils from one honest peer's positions to another's (7 % a step) put
    the two honest peers in one group, and the later one was banned as a copy of the earlier."""
    rank = {i: r for r, i in enumerate(order)}
    near = estimates >= threshold
    same_digest: dict[str, list[int]] = {}
    for i in order:
        same_digest.setdefault(digests[i], []).append(i)
    grouped: set[int] = set()
    groups = []
    for i in order:
        if i in grouped:
            continue
        members = {int(j) for j in np.flatnonzero(near[i])} | set(same_digest[digests[i]])
        group = [i, *sorted((j for j in members - grouped if j != i), key=rank.__getitem__)]
        grouped.update(group)
        groups.append(group)
    return groups
