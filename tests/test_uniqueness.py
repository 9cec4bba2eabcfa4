import math

import numpy as np
import pytest
import torch

from scoring.types import Reason, SparseParam
from scoring.uniqueness import (
    CopyFinding,
    CopyTier,
    PeerPayload,
    UniquenessConfig,
    exact_overlap,
    find_copies,
    offences,
)
from tests.uniqueness_fixtures import copy_of, random_update

torch.set_num_threads(1)


def payload(
    hotkey: str,
    update: dict[str, SparseParam],
    t: float,
    digest: str | None = None,
    proven: bool | None = None,
) -> PeerPayload:
    """Copiers ("c…") have not proven training, everybody else has: the upload order names an
    offender only when the first uploader is proven and the later is not (scoring/copy_findings.py)."""
    known = not hotkey.startswith("c") if proven is None else proven
    return PeerPayload(hotkey, digest or f"d-{hotkey}", t, update, proven=known)


def test_exact_overlap_literal() -> None:
    a = {"w": SparseParam((8,), torch.tensor([0, 2, 5, 7]), torch.tensor([1.0, -1.0, 2.0, 3.0]))}
    b = {"w": SparseParam((8,), torch.tensor([0, 2, 6, 7]), torch.tensor([4.0, 1.0, 2.0, 5.0]))}
    # shared coordinates 0, 2, 7; signs agree on 0 and 7 only
    assert exact_overlap(a, b, UniquenessConfig(chunk=8, topk=4)) == 0.5


def test_random_peers_overlap_about_one_percent() -> None:
    rng = np.random.default_rng(0)
    a, b = random_update(rng), random_update(rng)
    assert 0.0 < exact_overlap(a, b) < 0.03


def test_tiers() -> None:
    cfg = UniquenessConfig()
    assert [cfg.tier(x) for x in (0.14, 0.15, 0.5, 0.6, 1.0)] == [
        CopyTier.NONE,
        CopyTier.HALVE,
        CopyTier.RESET,
        CopyTier.BAN,
        CopyTier.BAN,
    ]
    with pytest.raises(ValueError):
        UniquenessConfig(halve_at=0.6, reset_at=0.5)


def test_finds_planted_copies_and_later_uploader() -> None:
    rng = np.random.default_rng(1)
    honest = [random_update(rng) for _ in range(8)]
    peers = [payload(f"h{i}", u, 10.0 + i) for i, u in enumerate(honest)]
    peers.append(payload("c45", copy_of(honest[0], random_update(rng), 0.45, rng), 30.0))
    peers.append(payload("c70", copy_of(honest[1], random_update(rng), 0.70, rng), 5.0))  # earlier!
    found = find_copies(peers, seed=3)
    by_pair = {(f.offender, f.other): f for f in found}
    assert set(by_pair) == {("c45", "h0"), ("h1", "c70")}
    assert by_pair[("c45", "h0")].clear and not by_pair[("h1", "c70")].clear  # an unproven first upload
    assert by_pair[("c45", "h0")].tier is CopyTier.HALVE
    assert by_pair[("h1", "c70")].tier is CopyTier.BAN
    assert by_pair[("c45", "h0")].reason == Reason.COPY
    assert by_pair[("c45", "h0")].overlap == pytest.approx(0.45, abs=0.05)


def test_unclear_order_penalises_nobody() -> None:
    """Within the clock's resolution nobody can tell who copied whom: the pair is reported, unclear."""
    rng = np.random.default_rng(2)
    a, own = random_update(rng), random_update(rng)
    b = copy_of(a, own, 0.55, rng)
    others = [payload(f"h{i}", random_update(rng), 0.5) for i in range(4)]  # the window's honest pairs
    for tb, res in ((1.0, 0.0), (1.5, 1.0), (0.2, 1.0)):
        pair = [
            PeerPayload("a", "da", 1.0, a, res, proven=True),
            PeerPayload("b", "db", tb, b, res, proven=True),
        ]
        found = find_copies([*pair, *others])
        assert [(f.offender, f.other, f.clear) for f in found] == [("b", "a", False)], (tb, res)
        assert offences(found) == {}
    pair = [PeerPayload("a", "da", 1.0, a, 1.0, proven=True), PeerPayload("b", "db", 2.0, b, 1.0)]
    found = find_copies([*pair, *others])
    assert [(f.offender, f.clear) for f in found] == [("b", True)]
    assert {k: f.tier for k, f in offences(found).items()} == {"b": CopyTier.RESET}


def test_a_pair_alone_is_flagged_only_for_identical_payloads() -> None:
    """Two peers alone give no honest baseline and no consensus: the shared positions of two honest
    updates (0.74 after one inner step) would read as copying, and the pair's better-rated member
    alone was aggregated. Only an identical payload is evidence then."""
    rng = np.random.default_rng(2)
    a, own = random_update(rng), random_update(rng)
    b = copy_of(a, own, 0.7, rng)
    assert exact_overlap(a, b) > 0.6
    assert find_copies([payload("a", a, 1.0), payload("b", b, 2.0)]) == []
    found = find_copies([payload("a", a, 1.0, "same"), payload("b", a, 2.0, "same")])
    assert [(f.offender, f.reason) for f in found] == [("b", Reason.DUPLICATE_PAYLOAD)]
    raw = UniquenessConfig(calibrate=False)  # asked for: raw overlap tiers, as DESIGN.md's
    assert [f.offender for f in find_copies([payload("a", a, 1.0), payload("b", b, 2.0)], raw)] == ["b"]


def test_identical_payloads_seen_together_are_unclear() -> None:
    rng = np.random.default_rng(5)
    u = random_update(rng)
    found = find_copies([payload("thief", u, 1.0, "same"), payload("victim", u, 1.0, "same")])
    assert [(f.offender, f.other, f.clear) for f in found] == [("victim", "thief", False)]
    assert offences(found) == {}


def test_duplicate_payloads() -> None:
    rng = np.random.default_rng(3)
    u = random_update(rng)
    peers = [
        payload("x", u, 2.0, "same", False),
        payload("y", u, 1.0, "same"),
        payload("z", u, 3.0, "same", False),
    ]
    found = find_copies(peers)
    assert found == [
        CopyFinding("x", "y", 1.0, CopyTier.BAN, Reason.DUPLICATE_PAYLOAD),
        CopyFinding("z", "y", 1.0, CopyTier.BAN, Reason.DUPLICATE_PAYLOAD),
    ]


def test_single_peer_and_empty() -> None:
    rng = np.random.default_rng(4)
    assert find_copies([payload("a", random_update(rng), 0.0)]) == []
    assert find_copies([]) == []


def test_whole_chunk_copier_found_from_a_small_sample() -> None:
    rng = np.random.default_rng(5)
    victim, own = random_update(rng), random_update(rng)
    w = own["w"]
    chunks = torch.from_numpy(rng.random(31) < 0.7).repeat_interleave(64)[: w.indices.numel()]
    copied = {
        "w": SparseParam(w.shape, torch.where(chunks, victim["w"].indices, w.indices), w.values.clone()),
        "b": own["b"],
    }
    copied["w"].values[chunks] = victim["w"].values[chunks]
    peers = [payload("v", victim, 1.0), payload("c", copied, 2.0), payload("o", random_update(rng), 3.0)]
    cfg = UniquenessConfig(sample_blocks=12)
    found = find_copies(peers, cfg, seed=11)
    assert [(f.offender, f.other, f.tier) for f in found] == [("c", "v", CopyTier.BAN)]
    assert found[0].overlap == pytest.approx(exact_overlap(victim, copied))


def test_offences_keep_each_offenders_most_severe_clear_finding() -> None:
    """What the round rejects a copier for: its worst finding, the first of equals; unclear ones none."""
    halve = CopyFinding("c", "a", 0.2, CopyTier.HALVE, Reason.COPY)
    ban = CopyFinding("c", "b", 0.7, CopyTier.BAN, Reason.COPY)
    ban_again = CopyFinding("c", "d", 0.9, CopyTier.BAN, Reason.COPY)
    unclear = CopyFinding("e", "a", 0.9, CopyTier.BAN, Reason.COPY, clear=False)
    assert offences([halve, ban, ban_again, unclear]) == {"c": ban}
    assert offences([ban_again, halve, ban]) == {"c": ban_again}


def test_exact_walks_do_not_grow_with_a_crowd_of_flagged_sybils(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sybils sending one update with jittered values (distinct digests) make every pair among them
    a candidate, and each candidate was walked exactly, over both whole updates: quadratic in the
    sybils (the audit counted 105 walks for 15 of them, and timed 1,000 s a window for 128 at 100M
    parameters). The tiers read the sample; only the finding an offender is rejected for is walked."""
    import scoring.uniqueness as uniqueness

    rng = np.random.default_rng(0)
    layout = random_update(rng)
    honest = [payload(f"h{i}", random_update(rng), 5.0 + i) for i in range(40)]

    def jittered() -> dict[str, SparseParam]:
        scale = {
            n: torch.from_numpy(rng.uniform(0.5, 1.5, p.values.numel())).float() for n, p in layout.items()
        }
        return {n: SparseParam(p.shape, p.indices, p.values * scale[n].float()) for n, p in layout.items()}

    sybils = [PeerPayload(f"s{k:02d}", f"ds{k}", 20.0, jittered(), math.inf) for k in range(15)]
    planted = payload("c70", copy_of(honest[1].update, random_update(rng), 0.70, rng), 30.0)
    walks = []
    real = uniqueness.exact_overlap

    def counted(a: dict[str, SparseParam], b: dict[str, SparseParam], cfg: UniquenessConfig) -> float:
        walks.append(1)
        return real(a, b, cfg)

    monkeypatch.setattr(uniqueness, "exact_overlap", counted)
    found = find_copies([*honest, *sybils, planted], seed=1)
    worst = offences(found)
    assert set(worst) == {"c70"} and worst["c70"].overlap == pytest.approx(0.70, abs=0.05)
    assert len(walks) == 1  # the planted copier's finding, which it is rejected for
