"""Sybils sending tiny non-zero updates cannot own the clip reference once peers have proven training."""

from __future__ import annotations

import pytest
import torch

from scoring.proof import proven
from scoring.ranking import PeerRating, RatingConfig, RatingState
from scoring.types import SparseParam, SparseUpdate, SubmissionMeta
from validator.round.check_config import CheckConfig
from validator.round.norms import clip_reference, proven_peers
from validator.round.outcomes import PeerTarget, PeerWindow


def _peer(hotkey: str, scale: float) -> PeerWindow:
    values = torch.full((4,), scale, dtype=torch.float32)
    param = SparseParam((4096,), torch.arange(4, dtype=torch.int64), values)
    meta = SubmissionMeta(window=1, uid=0, hotkey=hotkey, base="0" * 64, signature="")
    update = SparseUpdate(meta=meta, digest=hotkey, params={"w": param})
    return PeerWindow(PeerTarget(0, hotkey, None), "ok", update=update)


def _proven_rating(hotkey: str, cfg: RatingConfig) -> PeerRating:
    n = max(cfg.proof_min_evaluations, 1) * 4
    return PeerRating(hotkey, 0, 25.0, 8.0, evaluations=n, positives=n, margin_sum=float(n))


def test_tiny_sybil_majority_owns_the_reference_without_trust() -> None:
    peers = [_peer("h1", 1.0), _peer("h2", 1.0), *(_peer(f"s{i}", 1e-6) for i in range(3))]
    assert clip_reference(peers, CheckConfig(clip_quantile=0.5))["w"] < 1e-5  # DESIGN.md's median
    crowd = [_peer("h1", 1.0), _peer("h2", 1.0), *(_peer(f"s{i}", 1e-6) for i in range(8))]
    assert clip_reference(crowd, CheckConfig())["w"] < 1e-5  # what the trusted set defends against


def test_weak_honest_peers_do_not_shrink_full_updates() -> None:
    """Half the proven peers did a quarter of the work: the median clipped the full updates to
    1.25 of their 2.0; the upper quartile leaves them whole and still clips a larger one."""
    cfg = RatingConfig()
    keys = ("full1", "full2", "weak1", "weak2")
    trusted = proven_peers(RatingState({h: _proven_rating(h, cfg) for h in keys}, window=0), cfg)
    peers = [_peer("full1", 1.0), _peer("full2", 1.0), _peer("weak1", 0.25), _peer("weak2", 0.25)]
    assert clip_reference(peers, CheckConfig(clip_quantile=0.5), trusted)["w"] == 1.25
    assert clip_reference(peers, CheckConfig(), trusted)["w"] == 2.0
    assert clip_reference([*peers, _peer("big", 5.0)], CheckConfig(), trusted)["w"] == 2.0


def test_a_coalition_lifts_the_reference_by_at_most_the_cap() -> None:
    """Two of five proven peers send 4× the norm: the upper quartile is theirs (8.0), the cap holds
    the reference at 2 × the median (2.0), so their updates are still clipped to half."""
    cfg = RatingConfig()
    keys = ("h1", "h2", "h3", "big1", "big2")
    trusted = proven_peers(RatingState({h: _proven_rating(h, cfg) for h in keys}, window=0), cfg)
    peers = [*(_peer(h, 1.0) for h in keys[:3]), _peer("big1", 4.0), _peer("big2", 4.0)]
    assert clip_reference(peers, CheckConfig(clip_cap=10.0), trusted)["w"] == 8.0
    assert clip_reference(peers, CheckConfig(), trusted)["w"] == 4.0


@pytest.mark.parametrize("bad", [0.4, 1.0])  # below the median, or the largest update's own norm
def test_clip_quantile_is_bounded(bad: float) -> None:
    with pytest.raises(ValueError, match="clip_quantile"):
        CheckConfig(clip_quantile=bad)
    with pytest.raises(ValueError, match="clip_cap"):
        CheckConfig(clip_cap=0.9)


def test_proven_peers_set_the_reference() -> None:
    cfg = RatingConfig()
    state = RatingState({h: _proven_rating(h, cfg) for h in ("h1", "h2")}, window=0)
    assert all(proven(r, cfg) for r in state.peers.values())
    trusted = proven_peers(state, cfg)
    assert trusted == {"h1", "h2"}
    peers = [_peer("h1", 1.0), _peer("h2", 1.0), *(_peer(f"s{i}", 1e-6) for i in range(3))]
    assert clip_reference(peers, CheckConfig(), trusted)["w"] == 2.0  # norm of four 1.0 values


def test_without_proven_peers_every_valid_update_counts() -> None:
    peers = [_peer("a", 1.0), _peer("b", 3.0), _peer("c", 2.0)]
    assert clip_reference(peers, CheckConfig(clip_quantile=0.5), frozenset({"gone"}))["w"] == 4.0
    assert clip_reference(peers, CheckConfig(), frozenset({"gone"}))["w"] == 5.0  # between 4 and 6


def _two_params(hotkey: str, w: float, b: float) -> PeerWindow:
    peer = _peer(hotkey, w)
    assert peer.update is not None
    bias = SparseParam((64,), torch.arange(2, dtype=torch.int64), torch.full((2,), b, dtype=torch.float32))
    params = {**peer.update.params, "b": bias}
    return PeerWindow(peer.target, "ok", update=SparseUpdate(peer.update.meta, hotkey, params))


@pytest.mark.parametrize("tiny", [0.0, 3e-12, 1e-9])
def test_one_proven_peer_cannot_set_a_parameter_near_zero(tiny: float) -> None:
    """The only proven peer sends one parameter empty, or at a trace: counted, the reference was ~0
    there and every honest update's share of it was clipped to nothing (an audit found it)."""
    cfg = RatingConfig()
    trusted = proven_peers(RatingState({"p": _proven_rating("p", cfg)}, window=0), cfg)
    honest = [_two_params(f"h{i}", 1.0, 0.5) for i in range(4)]
    reference = clip_reference([*honest, _two_params("p", 1.0, tiny)], CheckConfig(), trusted)
    assert reference["w"] == 2.0  # the proven peer's own scale, as before
    assert reference["b"] == pytest.approx(0.5 * 2**0.5)  # judged over every valid update
    # a proven peer of an honest scale still sets the reference alone (the sybil defence above)
    sybils = [_two_params(f"s{i}", 1e-6, 1e-6) for i in range(8)]
    assert clip_reference([*sybils, _two_params("p", 1.0, 0.5)], CheckConfig(), trusted) == pytest.approx(
        {"w": 2.0, "b": 0.5 * 2**0.5}
    )


def test_unproven_giants_cannot_make_proven_norms_read_as_empty() -> None:
    """An audit's attack: unproven sybils send the largest values the decoder allows, and a proven
    attacker 30× the honest norm. Judged against every valid update's median, the honest proven
    norms read as empty and the reference was the attacker's own norm, which it never clipped."""
    cfg = RatingConfig()
    keys = ("h1", "h2", "h3", "h4", "attacker")
    trusted = proven_peers(RatingState({h: _proven_rating(h, cfg) for h in keys}, window=0), cfg)
    peers = [*(_peer(h, 1.0) for h in keys[:4]), _peer("attacker", 30.0)]
    peers += [_peer(f"s{i}", 1e5) for i in range(6)]
    reference = clip_reference(peers, CheckConfig(), trusted)["w"]
    assert reference <= 2.0 * CheckConfig().clip_cap  # the honest norm is 2.0 (four values of 1.0)
    # one proven peer sending the parameter at 1e-12 still does not count, among few proven peers
    few = frozenset({"h1", "tiny"})
    tiny = [_peer("h1", 1.0), _peer("tiny", 1e-12), _peer("u1", 1.0), _peer("u2", 1.0)]
    assert clip_reference(tiny, CheckConfig(), few)["w"] == 2.0
