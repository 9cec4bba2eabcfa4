"""Peers that sent one update: equal payloads, or the same kept positions with jittered values.

Copies of one update in numbers set the window's calibration. The copy check measures each pair
against the window's typical overlap (the median pair) and the consensus of the others' updates;
with two thirds of a window sending one update with its values jittered (new digests, the same
positions: overlap 1), the median pair was a pair of copies and the consensus their update, and
no pair was flagged at all (16 copies beside 8 independent peers, and every larger crowd). Such
a group is one update: its members are tied to its first upload (scoring/uniqueness.py) and only
that one takes part in the calibration. Honest pairs share at most ≈ 0.76 of positions, at one
inner step from the same base (tests/test_copy_calibration.py); `same_update` is 0.9.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def same_update_groups(
    digests: list[str], estimates: npt.NDArray[np.float64], threshold: float
) -> list[list[int]]:
    """The peers (indices) tied by an equal digest or an estimated overlap ≥ `threshold`, as
    connected groups in index order (every peer is in exactly one, alone or not)."""
    parent = list(range(len(digests)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    edges = [(first.setdefault(d, i), i) for i, d in enumerate(digests)]
    edges += [
        (int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(estimates >= threshold, k=1)), strict=True)
    ]
    for i, j in edges:
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for i in range(len(digests)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())
