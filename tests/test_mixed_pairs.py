"""A pair of a proven peer (inside the copy check's consensus) and an unproven one (outside it) is
read as two proven peers are (scoring/similarity.py `mixed_pairs`).

Read plainly, the unproven peer's consensus held the proven one's update while the proven peer's
consensus left the unproven one's out, and honest pairs across the split read higher than honest
pairs inside: in `bench_fidelity`'s `weak_half` and mixed under seed 1, a full honest peer in its
warm-up and a proven one read 0.148 and 0.127 in window 4, over the copy floor (0.1), and one of
the two was left out of the window's aggregate.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from scoring.similarity import mixed_pairs
from scoring.types import SparseParam
from scoring.uniqueness import PeerPayload, UniquenessConfig, examine_copies
from tests.uniqueness_fixtures import random_update

EVERY_PAIR = UniquenessConfig(resemblance_floor=-1.0)  # every compared pair reported


def test_the_closed_form_reads_each_mixed_pair_as_two_peers_inside() -> None:
    """`mixed_pairs` against the residuals built one pair at a time."""
    gen = torch.Generator().manual_seed(5)
    unit = torch.randn(6, 64, generator=gen, dtype=torch.float64)
    unit /= torch.linalg.vector_norm(unit, dim=1, keepdim=True)
    weight = torch.rand(6, generator=gen, dtype=torch.float64)
    inside, out = torch.tensor([0, 2, 3, 5]), torch.tensor([1, 4])
    total = (weight[inside, None] * unit[inside]).sum(0)
    got = mixed_pairs(unit, weight, total, inside, out)
    for a, i in enumerate(inside.tolist()):
        for b, j in enumerate(out.tolist()):
            ci = total - weight[i] * unit[i] + weight[j] * unit[j]  # i's consensus, j in it
            cj = total  # j's consensus: every peer inside, i among them
            ci, cj = ci / torch.linalg.vector_norm(ci), cj / torch.linalg.vector_norm(cj)
            ri, rj = unit[i] - (unit[i] @ ci) * ci, unit[j] - (unit[j] @ cj) * cj
            want = (ri @ rj) / (torch.linalg.vector_norm(ri) * torch.linalg.vector_norm(rj))
            assert math.isclose(float(got[a, b]), float(want), abs_tol=1e-12)


def _window(rng: np.random.Generator, n: int, copy_of: int | None = None) -> list[PeerPayload]:
    """`n` honest updates around one consensus, h0 unproven; with `copy_of`, h0 sends a noisy copy of
    that peer's update instead (noise at half its spread)."""
    layout = random_update(rng)
    consensus = {k: rng.standard_normal(p.values.numel()) for k, p in layout.items()}
    own = [{k: 1.5 * rng.standard_normal(p.values.numel()) for k, p in layout.items()} for _ in range(n)]
    peers = []
    for i in range(n):
        update = {}
        for k, p in layout.items():
            values = consensus[k] + own[i][k]
            if i == 0 and copy_of is not None:
                values = consensus[k] + own[copy_of][k] + 0.75 * rng.standard_normal(p.values.numel())
            update[k] = SparseParam(p.shape, p.indices, torch.from_numpy(values.astype(np.float32)))
        peers.append(PeerPayload(f"h{i}", f"d{i}", float(i), update, math.inf, proven=i > 0))
    return peers


def test_an_unproven_honest_peer_reads_against_proven_ones_as_once_proven() -> None:
    """Four honest peers, one in its warm-up: its pairs with the three proven ones read as they read
    once it has proven its training too (every peer inside). Read plainly they read +0.19 higher
    here (−0.00 against −0.19), and with its partner in the proven peer's consensus but at the weight
    its update has outside the mean, +0.06."""
    gaps = []
    for seed in range(6):
        peers = _window(np.random.default_rng(seed), 4)
        split = examine_copies(peers, EVERY_PAIR, seed=seed)
        proven = examine_copies([replace(p, proven=True) for p in peers], EVERY_PAIR, seed=seed)
        assert not split.findings and not proven.findings
        pairs = [k for k in split.resemblances if "h0" in k]
        assert len(pairs) == 3
        gaps += [split.resemblances[k] - proven.resemblances[k] for k in pairs]
    assert abs(float(np.mean(gaps))) < 0.02 and max(gaps) < 0.05, gaps


def test_an_unproven_copy_of_a_proven_peer_is_still_flagged() -> None:
    """The same window with h0 sending a noisy copy of h1's update: flagged, its pair over the floor."""
    for seed in range(6):
        check = examine_copies(_window(np.random.default_rng(seed), 4, copy_of=1), EVERY_PAIR, seed=seed)
        assert [(f.offender, f.other) for f in check.findings] == [("h1", "h0")], check.findings
        assert next(f for f in check.findings).similarity > EVERY_PAIR.similarity_floor
