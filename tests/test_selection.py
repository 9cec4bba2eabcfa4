"""Which peers are aggregated: `select_aggregation` on its own, and `select_window`, which builds its
candidates from the round's peers and the rating state exactly as the live round and replay do."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from scoring.clipping import inflation
from scoring.earnings import ranked_by_uid, with_aggregated
from scoring.loss_score import PeerEval, Timings
from scoring.page_test import PageLosses, page_t
from scoring.ranking import PeerRating, RatingConfig, RatingState
from scoring.selection import Candidate, SelectionConfig, left_out_for_cause, select_aggregation
from scoring.twins import Twins
from scoring.types import SparseParam, SparseUpdate, SubmissionMeta
from scoring.uniqueness import CopyCheck
from validator.round.check_config import CheckConfig
from validator.round.norms import clip_reference, proven_peers
from validator.round.outcomes import PeerTarget, PeerWindow
from validator.round.rating import (
    RankingConfig,
    outcomes_of,
    rate_window,
    relative_retentions,
    select_window,
)

NO_TIME = Timings(0.0, 0.0, 0.0, 0.0, 0.0)
# three evaluations, all +1, each with a clear own-data margin: proven under the default RatingConfig
PROVEN = {"evaluations": 3, "positives": 3, "margin_sum": 3.0}


def rating(hotkey: str, uid: int, final: float, **kw: object) -> PeerRating:
    return PeerRating(hotkey, uid, 25.0, 8.0, final=final, **{**PROVEN, **kw})  # type: ignore[arg-type]


def peer(hotkey: str, uid: int, gain: float | None = 0.01, status: str = "ok") -> PeerWindow:
    """A peer as the round has it after evaluation: `gain` None when it was not evaluated."""
    update = SparseUpdate(SubmissionMeta(5, uid, hotkey, "base", "sig"), f"digest-{hotkey}")
    losses = (5.0, 4.9, 5.0, 5.0 * (1 - (gain or 0.0)))
    evaluation = None if gain is None else PeerEval(uid, *losses, gain, 0.02, 1, NO_TIME)
    return PeerWindow(
        PeerTarget(uid, hotkey, None),
        status,
        reason=None if status == "ok" else "bad_signature",
        update=update if status == "ok" else None,
        evaluation=evaluation,
    )


def stepped(hotkeys: tuple[str, ...], steps: dict[str, float]) -> list[PeerWindow]:
    """One window of `peer`s, each with held-out gain 0.05 at β and steps[h] × that at 5 β (its
    retention, scoring/loss_score.py)."""
    out = []
    for u, h in enumerate(hotkeys):
        p = peer(h, u)
        assert p.evaluation is not None
        e = replace(p.evaluation, loss_rand_step=p.evaluation.loss_rand_before - steps[h] * 0.05)
        out.append(replace(p, evaluation=e))
    return out


def test_select_window_reads_bans_streaks_and_proof_from_the_ratings() -> None:
    state = RatingState(
        {
            "a": rating("a", 0, 3.0),
            "b": rating("b", 1, 9.0, ban_until=10),
            "c": rating("c", 2, 5.0, consecutive_negative=3),
            "d": rating("d", 3, 1.0),
            "e": rating("e", 4, 8.0, evaluations=0, positives=0, margin_sum=0.0),  # not proven yet
            "f": rating("f", 5, 7.0),
        },
        4,
    )
    peers = [peer(h, u) for u, h in enumerate("abcde")] + [peer("f", 5, status="invalid"), peer("g", 6)]
    cfg = RankingConfig(RatingConfig(), SelectionConfig(gather_peers=1, reserve_peers=1))
    sel = select_window(state, peers, 5, cfg)
    # b banned, c on a losing streak, e unproven, f invalid, g unrated: a and d remain, by final score
    assert (sel.gather, sel.reserve) == (("a",), ("d",))
    assert select_window(state, [peer("b", 1)], 10, cfg).gather == ("b",)  # the ban is over
    # the weights read the same state, for peers aggregated lately: banned peers count 0 until the
    # ban ends, and the gathered peer is paid from this window on
    assert ranked_by_uid(state, 5, 3) == [(0, 0.0), (1, 0.0), (2, 0.0), (3, 0.0), (4, 0.0), (5, 0.0)]
    paid = with_aggregated(state, set("abcdef"), 4)
    assert ranked_by_uid(paid, 5, 3) == [(4, 8.0), (5, 7.0), (2, 5.0), (0, 3.0), (3, 1.0), (1, 0.0)]
    assert ranked_by_uid(paid, 6, 3)[0] == (4, 8.0)
    assert ranked_by_uid(paid, 7, 3)[0] == (0, 0.0)  # aggregated three windows before: the set is past it
    assert ranked_by_uid(with_aggregated(state, sel.gather, 5), 5, 1)[0] == (0, 3.0)  # a, the gathered one


def test_select_window_takes_the_gain_from_the_evaluation() -> None:
    state = RatingState({h: rating(h, u, 1.0) for u, h in enumerate("abc")}, 4)
    peers = [peer("a", 0, gain=0.01), peer("b", 1, gain=None), peer("c", 2, gain=-0.01)]
    assert select_window(state, peers, 5, RankingConfig()).gather == ("a",)  # unevaluated, harmful: out


def test_select_window_aggregates_one_of_twins() -> None:
    state = RatingState({"a": rating("a", 0, 1.0), "b": rating("b", 1, 2.0)}, 4)
    peers = [peer("a", 0), peer("b", 1)]
    assert select_window(state, peers, 5, RankingConfig(), Twins(copies=[("a", "b")])).gather == ("b",)


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        SelectionConfig(gather_peers=0)
    with pytest.raises(ValueError):
        SelectionConfig(gain_floor=1.5)
    with pytest.raises(ValueError):
        SelectionConfig(max_inflation=0.9)


def cand(key: str, gain: float | None = 0.01, **kw: object) -> Candidate:
    fields: dict[str, object] = {"final": 0.0, "proven": True, "indicator": 1, **kw}
    return Candidate(key, gain=gain, **fields)  # type: ignore[arg-type]


def test_every_proven_contributor_is_aggregated_even_at_final_zero() -> None:
    """Among equals about half sit at ordinal <= 0: their proven work must still count."""
    peers = [cand("a", final=2.0), cand("b"), cand("c"), cand("d", final=1.0, gain=0.012)]
    assert select_aggregation(peers).gather == ("a", "d", "b", "c")


def test_unproven_unevaluated_and_failing_peers_are_left_out() -> None:
    peers = [
        cand("honest"),
        cand("warming_up", final=9.0, proven=False),  # positive final, no proof yet: the warm-up leak
        cand("not_evaluated", gain=None, indicator=None),
        cand("harmful", gain=-0.001),
        cand("banned", banned=True),
        cand("losing", neg_streak=3),
    ]
    assert select_aggregation(peers).gather == ("honest",)
    minus_one = [cand("a"), cand("b", indicator=-1)]  # proven, but no proof this window
    assert select_aggregation(minus_one).gather == ("a", "b")
    assert select_aggregation(minus_one, SelectionConfig(require_indicator=True)).gather == ("a",)


def test_weak_positive_peers_below_the_floor_do_not_dilute() -> None:
    peers = [cand(k, 0.010 + i * 1e-4) for i, k in enumerate("abcd")] + [cand("weak", 0.002)]
    assert "weak" not in select_aggregation(peers).gather  # below a quarter of the median gain
    assert select_aggregation(peers, SelectionConfig(gain_floor=0.15)).gather[-1] == "weak"


def test_only_one_of_twins_is_aggregated() -> None:
    peers = [cand("a"), cand("b", final=1.0), cand("c")]
    assert select_aggregation(peers, twins=Twins(copies=[("b", "a")])).gather == ("b", "c")
    assert select_aggregation(peers, twins=Twins(copies=[("c", "a")])).gather == (
        "b",
        "a",
    )  # tie: smaller key


def test_a_ring_of_three_similar_peers_is_left_out_and_a_star_loses_its_hub() -> None:
    """Colluders sharing one hidden direction resemble each other pairwise: a ring, left out whole.
    A star is not one: a hub tied to two peers that do not resemble each other (a blend of two
    honest updates) left both authors out with it; now the hub goes, the authors stay."""
    peers = [cand(k) for k in "abcdh"]
    ring = [("a", "b"), ("c", "b"), ("a", "c"), ("d", "e")]  # a-b-c one ring; d's twin is not admissible
    assert select_aggregation(peers, twins=Twins(linked=ring)).gather == ("d", "h")
    # three distinct updates tied by unclear copy findings alone are left out too
    assert select_aggregation(peers, twins=Twins(copies=ring)).gather == ("d", "h")
    # linked across windows, a ring is left out even where some of it would not be aggregated
    assert select_aggregation([*peers[:2], cand("c", gain=None)], twins=Twins(linked=ring)).gather == ()
    star = [("a", "b"), ("c", "b")]  # b blends a's and c's updates
    for twins in (Twins(linked=star), Twins(copies=star)):
        assert set(select_aggregation(peers, twins=twins).gather) == {"a", "c", "d", "h"}
        assert not left_out_for_cause(peers, twins=twins)  # nobody out of the match for a star
    # colluders whose third pair is still short of the alarm (half of it) close the ring
    forming = Twins(linked=star, near=[("a", "c")])
    assert set(select_aggregation(peers, twins=forming).gather) == {"d", "h"}
    # the hub kept when its own pages gained most: an author copied by two peers
    pages = Twins(copies=star, page_t={"a": 0.1, "b": 2.5, "c": -0.3})
    assert set(select_aggregation(peers, twins=pages).gather) == {"b", "d", "h"}


def test_copiers_cannot_sink_the_peer_they_copy() -> None:
    """Two identities re-sign a victim's bytes from stores the polls never reached: the order of each
    pair is unclear, and the three used to form a "cluster" that none of was aggregated. Identical
    payloads are one update, and a copier that would not be aggregated itself counts for nothing."""
    peers = [cand("victim", final=10.0), cand("syb1", final=5.0), cand("syb2", final=5.0), cand("h")]
    copies = [("syb1", "victim"), ("syb2", "victim"), ("syb1", "syb2")]
    same = Twins(copies=copies, same=copies)
    assert select_aggregation(peers, twins=same).gather == ("victim", "h")
    assert not left_out_for_cause(peers, twins=same)
    unproven = [peers[0], replace(peers[1], proven=False), replace(peers[2], proven=False), peers[3]]
    distinct = Twins(copies=copies)  # noisy copies: distinct payloads, but the copiers are not proven
    assert select_aggregation(unproven, twins=distinct).gather == ("victim", "h")
    assert not left_out_for_cause(unproven, twins=distinct)


def test_gather_cap_spills_into_reserve() -> None:
    peers = [cand(k, final=float(i)) for i, k in enumerate("abc")]
    sel = select_aggregation(peers, SelectionConfig(gather_peers=2, reserve_peers=5))
    assert (sel.gather, sel.reserve) == (("c", "b"), ("a",))


def test_an_update_inflated_above_the_honest_band_is_not_aggregated() -> None:
    """Four peers at the band's top, two weak ones, one that scaled its update ×1.7 and one ×1.2:
    the clip reference is the proven peers' upper quartile, so the honest ones sit at about 1.0,
    the ×1.2 update is within `max_inflation`, and the ×1.7 one is evaluated (clipped) but left out."""
    scales = {"h1": 1.0, "h2": 0.98, "h3": 1.0, "h4": 0.97, "w1": 0.4, "w2": 0.2, "big": 1.7, "edge": 1.2}
    peers = [sized(h, u, s) for u, (h, s) in enumerate(scales.items())]
    state = RatingState({h: rating(h, u, 1.0) for u, h in enumerate(scales)}, 4)
    trusted = proven_peers(state, RatingConfig())
    reference = clip_reference(peers, CheckConfig(), trusted)
    assert reference["w"] == pytest.approx(1.05 * 64**0.5)  # the two large ones lift it a little
    chosen = select_window(state, peers, 5, RankingConfig(), reference=reference).gather
    assert set(chosen) == set(scales) - {"big"}
    # without a reference (nothing to compare against) nobody is left out for its norm
    assert set(select_window(state, peers, 5, RankingConfig()).gather) == set(scales)


def test_a_reference_held_by_a_crowd_of_tiny_updates_does_not_shut_out_full_ones() -> None:
    """The first aggregated window's reference counts every valid update: with tiny ones holding
    its upper quartile, full updates sit 50× above it. The band follows the admissible updates
    (their upper quartile), so the full ones are aggregated and one scaled ×1.7 beside them still
    is not; among three, one inflated update cannot lift the band (capped at twice the median)."""
    full = [cand(f"h{i}", inflation=50.0 + i / 10) for i in range(4)]
    sel = select_aggregation([*full, cand("big", inflation=85.0), cand("junk", gain=-0.01, inflation=1.0)])
    assert set(sel.gather) == {"h0", "h1", "h2", "h3"}
    few = [cand("h0", inflation=1.0), cand("h1", inflation=1.0), cand("big", inflation=4.0)]
    assert set(select_aggregation(few).gather) == {"h0", "h1"}


def test_a_majority_of_weak_proven_updates_does_not_shut_out_full_ones() -> None:
    """A red-team run: five identities proving their training with a tenth of the steps (or honest
    work sent at 0.3×) beside four honest peers own the proven median, so the clip reference (at
    most twice it) sat under every full update, which read 1.6-2.2 and was left out of every window
    (honest coverage 0). The band is the admissible updates' upper quartile, uncapped from four of
    them: the full updates are aggregated. A coalition holding that quartile with inflated updates
    is admitted too, clipped to the reference (its cost: it counts as twice the proven median)."""
    weak = [cand(f"w{i}", inflation=0.5) for i in range(5)]
    full = [cand(f"h{i}", inflation=1.8 + i / 10) for i in range(4)]
    assert {f"h{i}" for i in range(4)} <= set(select_aggregation([*weak, *full]).gather)
    honest = [cand(f"h{i}", inflation=1.0) for i in range(5)]
    inflated = [cand(f"s{i}", inflation=4.0) for i in range(3)]
    assert set(select_aggregation([*honest, *inflated]).gather) == {
        *(f"h{i}" for i in range(5)),
        "s0",
        "s1",
        "s2",
    }
    one = [*honest, cand("big", inflation=4.0)]  # one of six: the quartile stays honest
    assert set(select_aggregation(one).gather) == {f"h{i}" for i in range(5)}


def test_a_crowd_of_weak_proven_updates_holding_the_quartile_does_not_shut_out_full_ones() -> None:
    """A red-team run through `rate_and_select`: eleven proven identities at 0.3 of a full update's
    norm (0.4 of its gain) beside four honest peers held the upper quartile as well as the clip
    reference; every full update read 1.67, and all four were left out, out of the match and
    unpaid. The band is also read over the half of the updates that gains most (where the full
    ones are until they are under a quarter of it); an inflated update with the best gain cannot
    widen it past its own norm among few."""
    full = [cand(f"h{i}", gain=0.01, inflation=1.67) for i in range(4)]
    for crowd in (11, 16, 24):  # up to 86 % of the updates
        weak = [cand(f"w{i:02d}", gain=0.004, inflation=1.0) for i in range(crowd)]
        assert {c.key for c in full} <= set(select_aggregation([*weak, *full]).gather)
        assert not left_out_for_cause([*weak, *full]) & {c.key for c in full}
    swamped = [cand(f"w{i:02d}", gain=0.004, inflation=1.0) for i in range(40)]
    assert not {c.key for c in full} & set(select_aggregation([*swamped, *full]).gather)  # still open
    honest = [cand(f"h{i}", gain=0.01, inflation=1.0) for i in range(4)]
    for size in (4.0, 2.0):  # rescaled, the best gain: still out (limit 2.5, then 1.875)
        sandbag = cand("sandbag", gain=0.015, inflation=size)
        assert set(select_aggregation([*honest, sandbag]).gather) == {c.key for c in honest}
        assert "sandbag" in left_out_for_cause([*honest, sandbag])


def test_inflation_is_the_median_parameter_ratio() -> None:
    """One parameter far above its reference (rows only this peer's data touched) does not make the
    update inflated; every parameter scaled up does. Parameters without a reference are skipped."""
    reference = {"a": 1.0, "b": 2.0, "c": 4.0}
    assert inflation({"a": 1.0, "b": 2.0, "c": 40.0, "extra": 9.0}, reference) == 1.0
    assert inflation({"a": 1.5, "b": 3.0, "c": 6.0}, reference) == pytest.approx(1.5)
    assert inflation({"a": 1.0}, {"a": 0.0}) == 0.0


def sized(hotkey: str, uid: int, scale: float) -> PeerWindow:
    """A valid, evaluated peer whose one parameter holds 64 values of `scale`."""
    param = SparseParam((4096,), torch.arange(64, dtype=torch.int64), torch.full((64,), scale))
    base = peer(hotkey, uid)
    assert base.update is not None
    return replace(base, update=replace(base.update, params={"w": param}))


def test_a_peer_whose_updates_overshoot_at_the_probe_step_is_not_aggregated() -> None:
    """Retention is read as the peer's average over windows of (gain at 5 β ÷ gain at β) ÷ the
    window's median: under `min_retention` the update is left out whatever its gain at β. A peer
    never measured is not judged by it."""
    honest = [cand(f"h{i}", retention=r) for i, r in enumerate((1.02, 0.97, 1.0, 0.96))]
    steep = cand("steep", gain=0.02, retention=0.91)  # the best gain at β
    sel = select_aggregation([*honest, steep, cand("edge", retention=0.95), cand("unmeasured")])
    assert set(sel.gather) == {"h0", "h1", "h2", "h3", "edge", "unmeasured"}
    assert "steep" in select_aggregation([*honest, steep], SelectionConfig(min_retention=0.0)).gather
    with pytest.raises(ValueError, match="min_retention"):
        SelectionConfig(min_retention=1.0)


def test_retention_is_relative_to_the_window_and_averaged_across_windows() -> None:
    """The outer-step loss travels with the evaluation; the rating averages each window's relative
    retention (the plain mean of the first four windows), so one low window does not leave an honest
    peer out and a peer that overshoots window after window is."""
    hotkeys = ("a", "b", "c", "d")
    state = RatingState({h: rating(h, u, 1.0) for u, h in enumerate(hotkeys)}, 4)

    def window(steps: dict[str, float]) -> list[PeerWindow]:
        return stepped(hotkeys, steps)

    relative = relative_retentions(window({"a": 4.5, "b": 4.4, "c": 4.6, "d": 3.0}))
    assert relative["b"] == pytest.approx(4.4 / 4.45) and relative["d"] == pytest.approx(3.0 / 4.45)
    assert relative_retentions(window({"a": 4.5, "b": 4.4, "c": 4.6, "d": 3.0})[:2]) == {}
    cfg = RankingConfig()
    low = {"a": 4.5, "b": 4.4, "c": 4.6, "d": 3.7}  # d at 0.83 of the median: averaged 0.94 once
    usual = {"a": 4.5, "b": 4.4, "c": 4.6, "d": 4.5}
    once = state
    for w, steps in enumerate((usual, usual, low), start=5):
        once = rate_window(once, window(steps), w, cfg, CopyCheck([]))
    assert set(select_window(once, window(low), 8, cfg).gather) == set(hotkeys)
    again = rate_window(once, window(low), 8, cfg, CopyCheck([]))  # twice in a row: out
    assert set(select_window(again, window(low), 9, cfg).gather) == {"a", "b", "c"}  # 0.92
    assert again.peers["d"].retention_windows == 4


def test_a_peer_that_starts_overshooting_late_is_caught_by_the_moving_average() -> None:
    """After the first 1/alpha windows the average moves with weight alpha (0.25): twenty honest
    windows do not shield a peer that then overshoots (a plain mean would need seven windows)."""
    hotkeys = ("a", "b", "c", "d")
    state = RatingState({h: rating(h, u, 1.0) for u, h in enumerate(hotkeys)}, 0)
    cfg = RankingConfig()

    def window(d: float) -> list[PeerWindow]:
        return stepped(hotkeys, {"a": 4.5, "b": 4.4, "c": 4.6, "d": d})

    for w in range(1, 21):
        state = rate_window(state, window(4.5), w, cfg, CopyCheck([]))
    assert state.peers["d"].retention == pytest.approx(1.0, abs=0.02)
    for w in (21, 22):  # 0.8 of the median: the average 0.95, then 0.91
        state = rate_window(state, window(3.56), w, cfg, CopyCheck([]))
    assert "d" not in select_window(state, window(3.56), 23, cfg).gather


def test_smaller_updates_do_not_set_the_retention_reference() -> None:
    """A smaller step along an update is more linear: identities sending honest updates halved would
    lift the median retention and push honest peers under the floor. The median is taken over the
    full-size updates only (at least `FULL_SIZE` × the clip reference)."""

    def with_retention(p: PeerWindow, ratio: float) -> PeerWindow:
        assert p.evaluation is not None  # held-out gain 0.05 at β; ratio × that at 5 β
        return replace(
            p, evaluation=replace(p.evaluation, loss_rand_step=p.evaluation.loss_rand_before - ratio * 0.05)
        )

    honest = [with_retention(sized(f"h{i}", i, 1.0), r) for i, r in enumerate((4.3, 4.4, 4.5, 4.2))]
    halved = [with_retention(sized(f"s{i}", 10 + i, 0.5), 4.8) for i in range(5)]
    reference = {"w": 8.0}  # the norm of 64 values of 1.0
    relative = relative_retentions([*honest, *halved], reference)
    assert relative["h3"] == pytest.approx(4.2 / 4.35) and relative["s0"] == pytest.approx(4.8 / 4.35)
    assert relative_retentions([*honest, *halved])["h3"] == pytest.approx(4.2 / 4.8)  # would be out
    assert relative_retentions([*honest[:2], *halved], reference) == {}  # fewer than three full-size


def test_one_wild_window_does_not_hold_an_honest_peer_out() -> None:
    """Late in a long run held-out gains sit near 0 and one window's retention can read −44 … +12
    of the median: each window enters the average clipped to 1 ± `retention_clip`, so a single wild
    window leaves the peer in; a window whose median retention is under `MIN_TYPICAL_RETENTION` (the
    probe step past the loss's curvature for the typical update) is not compared at all."""
    hotkeys = ("a", "b", "c", "d")
    state = RatingState({h: rating(h, u, 1.0) for u, h in enumerate(hotkeys)}, 0)
    cfg = RankingConfig()

    def window(steps: dict[str, float]) -> list[PeerWindow]:
        return stepped(hotkeys, steps)

    usual = {"a": 4.5, "b": 4.4, "c": 4.6, "d": 4.5}
    for w in range(1, 9):
        state = rate_window(state, window(usual), w, cfg, CopyCheck([]))
    wild = {"a": 4.5, "b": 4.4, "c": 4.6, "d": -22.0}  # d at −5 of the median
    # (almost) unclipped, the same window leaves d out, and takes windows to recover from
    loose = replace(cfg, rating=replace(cfg.rating, retention_clip=0.999))
    assert (
        "d"
        not in select_window(
            rate_window(state, window(wild), 9, loose, CopyCheck([])), window(usual), 10, cfg
        ).gather
    )
    state = rate_window(state, window(wild), 9, cfg, CopyCheck([]))
    assert state.peers["d"].retention == pytest.approx(0.75 * 0.25 + 0.75 * 1.0, abs=0.01)
    assert "d" in select_window(state, window(usual), 10, cfg).gather
    # a window where the typical update loses its gain at the probe step is not compared
    broken = {"a": 0.4, "b": 0.3, "c": 0.5, "d": -11.0}
    assert relative_retentions(window(broken)) == {}
    before = state.peers["d"].retention
    assert rate_window(state, window(broken), 10, cfg, CopyCheck([])).peers["d"].retention == before
    with pytest.raises(ValueError, match="retention_clip"):
        RatingConfig(retention_clip=0.0)


def test_the_page_test_reads_no_evidence_when_its_t_is_undefined() -> None:
    """A peer cannot leave the page test out by making t undefined (pages without spread): that
    window reads t = 0. Only an evaluation without page losses (stored before them) has none."""
    flat = PageLosses((5.0, 5.0), (4.9, 4.9), (5.0, 5.0), (4.95, 4.95))
    spread = PageLosses((5.0, 5.0), (4.8, 4.9), (5.0, 5.0), (4.99, 4.97))
    peers = []
    for u, (h, pages) in enumerate((("flat", flat), ("spread", spread), ("legacy", None))):
        p = peer(h, u)
        assert p.evaluation is not None
        peers.append(replace(p, evaluation=replace(p.evaluation, pages=pages)))
    measured = peers[1].evaluation
    assert measured is not None
    peers.append(replace(peer("invalid", 3, status="invalid"), evaluation=replace(measured, uid=3)))
    own_t = {o.hotkey: o.own_t for o in outcomes_of(peers)}
    assert own_t == {"flat": 0.0, "spread": page_t(spread), "legacy": None, "invalid": None}
    assert own_t["spread"] is not None and own_t["spread"] > 0
