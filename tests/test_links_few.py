"""Links in a window with few unlinked peers (scoring/uniqueness.py): the linked ones are still read.

With fewer than three unlinked peers the copy check compared nobody, so no link moved: a proven
identity that sent the mean of two honest updates for three windows was linked to both authors, the
three left the consensus, two honest peers stayed in it, and the blender stayed out (a star's hub)
for as long as that lasted, long after it went back to honest work (a demo run, windows 7-10).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from scoring.links import LinkConfig, linked_pairs, update_links
from scoring.types import SparseParam
from scoring.uniqueness import PeerPayload, UniquenessConfig, examine_copies
from tests.uniqueness_fixtures import random_update

EVERY_PAIR = UniquenessConfig(resemblance_floor=-1.0)  # every compared pair reported


def _window(rng: np.random.Generator, names: list[str], hidden_share: float) -> list[PeerPayload]:
    """Honest updates around one consensus; names starting with `c` add one shared hidden direction."""
    layout = random_update(rng)
    consensus = {n: rng.standard_normal(p.values.numel()) for n, p in layout.items()}
    hidden = {n: rng.standard_normal(p.values.numel()) for n, p in layout.items()}
    peers = []
    for i, name in enumerate(names):
        update = {}
        for n, p in layout.items():
            values = consensus[n] + 1.2 * rng.standard_normal(p.values.numel())
            values += hidden_share * hidden[n] if name.startswith("c") else 0.0
            update[n] = SparseParam(p.shape, p.indices, torch.from_numpy(values.astype(np.float32)))
        peers.append(PeerPayload(name, f"d{i}", float(i), update, math.inf, proven=True))
    return peers


def _linking(peers: list[PeerPayload], linked: set[str]) -> list[PeerPayload]:
    return [replace(p, linked=p.hotkey in linked) for p in peers]


def test_a_hub_back_to_honest_work_is_compared_and_its_links_fade() -> None:
    """The demo run's links: the blender (hub) tied to both authors, frozen at 0.105 and 0.088."""
    star = {"hub", "a", "b"}
    links = {"hub": {"a": 0.105, "b": 0.088}, "a": {"hub": 0.105}, "b": {"hub": 0.088}}
    cfg = LinkConfig()
    for seed in range(4):  # honest work again: within four windows no pair is even a near tie
        peers = _linking(_window(np.random.default_rng(seed), ["hub", "a", "b", "h1", "h2"], 0.0), star)
        check = examine_copies(peers, EVERY_PAIR, seed=seed)
        assert set(check.compared) == star | {"h1", "h2"} and not check.resemblances
        links = update_links(links, check.compared, check.resemblances, cfg)
    assert linked_pairs(links, cfg, share=0.5) == []


def test_a_pair_fades_only_while_both_of_its_peers_are_compared() -> None:
    """A peer that sent nothing (or was caught copying) is not compared: its links keep their value."""
    peers = _window(np.random.default_rng(5), ["hub", "a", "b", "h1"], 0.0)
    star = {"hub", "a", "b"}
    check = examine_copies(_linking(peers[1:], star), EVERY_PAIR, seed=5)  # the hub sent nothing
    links = {"hub": {"a": 0.2}, "a": {"hub": 0.2, "b": 0.2}, "b": {"a": 0.2}}
    after = update_links(links, check.compared, check.resemblances, LinkConfig())
    assert after["hub"]["a"] == 0.2 and math.isclose(after["a"]["b"], 0.2 - LinkConfig().reference)


def test_three_unlinked_peers_still_measure_the_linked_ones() -> None:
    """Read against three unlinked peers, colluders' shared direction is all theirs, as before."""
    names = ["c0", "c1", "c2", "h1", "h2", "h3"]
    trio = {"c0", "c1", "c2"}
    check = examine_copies(_linking(_window(np.random.default_rng(2), names, 0.6), trio), EVERY_PAIR, seed=2)
    assert set(check.compared) == set(names)
    assert (
        min(v for (a, b), v in check.resemblances.items() if {a, b} <= trio) > LinkConfig().reference + 0.03
    )


def test_honest_peers_outside_the_consensus_do_not_resemble_each_other() -> None:
    """Read against the consensus alone, two peers outside it share what it misses of the common
    direction: honest pairs there read +0.20 in this fixture (+0.08 among ten honest demo peers), every
    window above the links' reference, so a linked honest peer stayed linked for good, and linked
    with every other peer outside. Each pair is read as two peers inside are."""
    names = [f"h{i}" for i in range(10)]
    out = {"h0", "h1", "h2"}
    for seed in range(3):
        check = examine_copies(
            _linking(_window(np.random.default_rng(seed), names, 0.0), out), EVERY_PAIR, seed=seed
        )
        outside = [v for (a, b), v in check.resemblances.items() if {a, b} <= out]
        inside = [v for (a, b), v in check.resemblances.items() if not {a, b} & out]
        assert len(outside) == 3 and max(outside) < LinkConfig().reference
        assert abs(np.mean(outside) - np.mean(inside)) < 0.1


def test_the_closed_form_reads_each_outside_pair_as_the_consensus_plus_its_partner() -> None:
    """`as_inside_pairs` against the residuals built one pair at a time."""
    from scoring.similarity import as_inside_pairs

    gen = torch.Generator().manual_seed(4)
    unit = torch.randn(5, 64, generator=gen, dtype=torch.float64)
    unit /= torch.linalg.vector_norm(unit, dim=1, keepdim=True)
    weight = torch.rand(5, generator=gen, dtype=torch.float64)
    total = torch.randn(64, generator=gen, dtype=torch.float64) * 3.0
    got = as_inside_pairs(unit, weight, total)
    for i in range(5):
        for j in range(5):
            if i == j:
                continue
            a = total + weight[j] * unit[j]  # i's consensus, its partner j in it
            b = total + weight[i] * unit[i]
            a, b = a / torch.linalg.vector_norm(a), b / torch.linalg.vector_norm(b)
            ri, rj = unit[i] - (unit[i] @ a) * a, unit[j] - (unit[j] @ b) * b
            want = (ri @ rj) / (torch.linalg.vector_norm(ri) * torch.linalg.vector_norm(rj))
            assert math.isclose(float(got[i, j]), float(want), abs_tol=1e-12)
    assert torch.equal(got, got.T)


def test_a_window_that_measures_nothing_fades_the_links_among_its_distinct_updates() -> None:
    """Most of a window sent one update (two distinct ones in all), or only two peers sent anything:
    the check measures no resemblance, and the links among the peers it saw froze there."""
    base = _window(np.random.default_rng(7), ["a", "b", "h1"], 0.0)
    crowd = [replace(base[0], hotkey=f"s{i}", timestamp=9.0 + i) for i in range(3)]  # a's bytes, unsighted
    links = {"a": {"b": 0.2}, "b": {"a": 0.2}}
    cfg = LinkConfig()
    for peers in ([base[0], base[1], *crowd], base[:2]):
        check = examine_copies(peers, EVERY_PAIR, seed=7)
        assert check.compared == ("a", "b") and not check.resemblances  # the crowd is a's group
        after = update_links(links, check.compared, check.resemblances, cfg)
        assert math.isclose(after["a"]["b"], 0.2 - cfg.reference)
