"""Who plays the window's rating match: a peer whose held-out gain at β overstates its work (the
selection's own reasons to leave it out) is rated on its own evidence, never against the others."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import SecretBytes

from scoring.eval_plan import EvalConfig
from scoring.links import LinkConfig
from scoring.persistence import PersistenceConfig
from scoring.ranking import PeerOutcome, PeerRating, RatingConfig, RatingState, Status, update_ratings
from scoring.uniqueness import CopyCheck
from tests.test_selection import rating, sized, stepped
from validator.chain.protocol import WindowConfig
from validator.round.check_config import CheckConfig
from validator.round.config import RoundConfig
from validator.round.drift import Drift
from validator.round.norms import clip_reference, proven_peers
from validator.round.outcomes import PeerWindow
from validator.round.pipeline import WindowContext, rate_and_select
from validator.round.rating import RankingConfig, outside_match, rate_window, select_window, twins_of
from validator.round.window import WindowSeed

CFG = RatingConfig()
HONEST = {"h1": 1.0, "h2": 0.98, "h3": 1.0, "h4": 0.97}


def ok(hotkey: str, uid: int, score: float, matched: bool = True) -> PeerOutcome:
    return PeerOutcome(hotkey, uid, Status.OK, score, 1, own_gain=score * 2, matched=matched)


def test_an_unmatched_peer_neither_moves_nor_moves_the_others() -> None:
    """Its μ and σ stay; the others' match is the one they would play without it; its evidence (the
    proof's evaluations and margins) still counts, and `last_matched` says when it last played."""
    honest = [ok("a", 0, 0.004), ok("b", 1, 0.002), ok("c", 2, 0.003)]
    alone = update_ratings(RatingState(), 1, honest, CFG)
    beside = update_ratings(RatingState(), 1, [*honest, ok("s", 3, 0.05, matched=False)], CFG)
    for h in ("a", "b", "c"):
        assert (beside.peers[h].mu, beside.peers[h].sigma) == (alone.peers[h].mu, alone.peers[h].sigma)
        assert beside.peers[h].last_matched == 1
    s = beside.peers["s"]
    assert (s.mu, s.sigma, s.last_matched) == (CFG.mu, CFG.sigma, None)
    assert (s.evaluations, s.positives, s.margin_sum) == (1, 1, 1.0)
    # matched the window before, not this one: the record keeps the last window it played
    again = update_ratings(beside, 2, [*honest, ok("s", 3, 0.05)], CFG)
    third = update_ratings(again, 3, [*honest, ok("s", 3, 0.05, matched=False)], CFG)
    assert third.peers["s"].last_matched == 2 and third.peers["s"].mu == again.peers["s"].mu
    # with it in the match, its large gain wins and the honest peers' μ is lower
    played = update_ratings(RatingState(), 1, [*honest, ok("s", 3, 0.05)], CFG)
    assert all(played.peers[h].mu < alone.peers[h].mu for h in ("a", "b", "c"))


def honest_and(extra: dict[str, float]) -> tuple[list[PeerWindow], RatingState, dict[str, float]]:
    """Four full proven peers and `extra` (hotkey: scale), their window and clip reference."""
    scales = HONEST | extra
    peers = [sized(h, u, s) for u, (h, s) in enumerate(scales.items())]
    state = RatingState({h: rating(h, u, 1.0) for u, h in enumerate(scales)}, 4)
    return peers, state, clip_reference(peers, CheckConfig(), proven_peers(state, CFG))


def test_an_inflated_update_stays_out_of_the_match() -> None:
    """×1.7 is past the band (the selection leaves it out), ×1.2 is inside it, and so are weak ones."""
    peers, state, reference = honest_and({"big": 1.7, "edge": 1.2, "weak": 0.3})
    cfg = RankingConfig()
    assert outside_match(state, peers, 5, cfg, CopyCheck([]), reference) == {"big"}
    assert outside_match(state, peers, 5, cfg, CopyCheck([])) == set()  # nothing to measure a norm against
    after = rate_window(state, peers, 5, cfg, CopyCheck([]), reference)
    assert (after.peers["big"].mu, after.peers["big"].sigma) == (25.0, 8.0)
    assert after.peers["edge"].last_matched == 5 and after.peers["big"].last_matched is None
    # a gain under the selection's floor (a quarter of the window's median) overstates nothing: such
    # a peer plays and loses, inflated or not
    for weak_gain in (-0.01, 0.001):
        low = [
            replace(p, evaluation=replace(p.evaluation, score=weak_gain))
            if p.hotkey == "big" and p.evaluation
            else p
            for p in peers
        ]
        assert outside_match(state, low, 5, cfg, CopyCheck([]), reference) == set()
    # invalid or unevaluated peers are not "outside": they never were in it
    gone = [replace(p, status="invalid", update=None) if p.hotkey == "big" else p for p in peers]
    assert outside_match(state, gone, 5, cfg, CopyCheck([]), reference) == set()


def test_a_peer_under_min_retention_stays_out_with_this_windows_value() -> None:
    """The retention average with this window's value counted, as the selection reads it after the
    window: `rate_window` folds the window's evidence in before it decides who plays."""
    hotkeys = ("a", "b", "c", "d")
    steps = {"a": 4.5, "b": 4.4, "c": 4.6, "d": 3.7}  # d at 0.83 of the window's median
    cfg = RankingConfig()

    def rated(d_before: float) -> tuple[RatingState, set[str]]:
        peers = {h: rating(h, u, 1.0, retention=1.0, retention_windows=4) for u, h in enumerate(hotkeys)}
        state = RatingState({**peers, "d": replace(peers["d"], retention=d_before)}, 4)
        after = rate_window(state, stepped(hotkeys, steps), 5, cfg, CopyCheck([]))
        return after, set(select_window(after, stepped(hotkeys, steps), 5, cfg).gather)

    after, gathered = rated(1.0)  # 0.75 × 1.0 + 0.25 × 0.83 = 0.96: in the match and aggregated
    assert after.peers["d"].last_matched == 5 and "d" in gathered
    after, gathered = rated(0.95)  # 0.92 with this window's: out of both
    assert after.peers["d"].last_matched is None and "d" not in gathered
    assert (after.peers["d"].mu, after.peers["d"].final) == (25.0, 0.0)
    assert all(after.peers[h].last_matched == 5 for h in "abc")


def test_linked_and_drifting_peers_stay_out() -> None:
    """Three linked peers all stay out; a linked pair stays in whatever its upload order (the
    selection keeps one of it: the later side was left out of the match, and a frontrunner made its
    victim that side). A drifting peer stays out only with the persistence gate on, as the
    selection does."""
    peers, state, reference = honest_and({"x": 1.0, "y": 1.0, "z": 1.0})
    alarm = LinkConfig().alarm
    ring = {"x": {"y": alarm, "z": alarm}, "y": {"z": alarm}}
    linked = RatingState({h: replace(r, links=ring.get(h, {})) for h, r in state.peers.items()}, 4)
    cfg = RankingConfig()
    assert outside_match(linked, peers, 5, cfg, CopyCheck([]), reference) == {"x", "y", "z"}
    pair = RatingState(
        {h: replace(r, links={"h2": alarm} if h == "h1" else {}) for h, r in state.peers.items()}, 4
    )
    assert outside_match(pair, peers, 5, cfg, CopyCheck([]), reference) == set()
    ordered = CopyCheck([], first={("h1", "h2"): "h2"})
    assert outside_match(pair, peers, 5, cfg, ordered, reference) == set()
    # evidence that reaches the alarm with this window's resemblance: out of this window's match, as
    # the selection, which reads the links after it, leaves them out of this window's aggregate
    near = {"x": {"y": 0.07, "z": 0.07}, "y": {"x": 0.07, "z": 0.07}, "z": {"x": 0.07, "y": 0.07}}
    before = RatingState({h: replace(r, links=near.get(h, {})) for h, r in state.peers.items()}, 4)
    compared = tuple(p.hotkey for p in peers)
    alike = CopyCheck([], compared, {("x", "y"): 0.1, ("x", "z"): 0.1, ("y", "z"): 0.1})
    for copies, out in ((CopyCheck([], compared), set()), (alike, {"x", "y", "z"})):
        after = rate_window(before, peers, 5, cfg, copies, reference)
        assert {h for h, r in after.peers.items() if r.last_matched != 5} == out
        assert out.isdisjoint(
            select_window(after, peers, 5, cfg, twins_of(after, copies, cfg), reference).gather
        )
    drifting = RatingState({h: replace(r, drift=1.0) if h == "x" else r for h, r in state.peers.items()}, 4)
    shown = replace(cfg, persistence=PersistenceConfig(gate=False))
    assert outside_match(drifting, peers, 5, shown, CopyCheck([]), reference) == set()
    assert outside_match(drifting, peers, 5, cfg, CopyCheck([]), reference) == {"x"}  # the gate is on


@pytest.mark.parametrize("scale", [1.7, 4.0])
def test_an_inflated_peer_no_longer_tops_the_leaderboard(scale: float) -> None:
    """Over five windows an inflated peer with the best gain each time stays at its first rating
    (ordinal 0), under the honest peers that beat the others; matched, it would have led the board."""
    peers, state, reference = honest_and({"big": scale})
    proven = {
        h: PeerRating(h, r.uid, 25.0, 25.0 / 3, evaluations=3, positives=3, margin_sum=3.0)
        for h, r in state.peers.items()
    }
    fresh = RatingState(proven, 4)
    gains = {"big": 0.03, "h1": 0.01, "h2": 0.011, "h3": 0.012, "h4": 0.013}
    scored = [
        replace(p, evaluation=replace(p.evaluation, score=g, own_gain=2 * g))  # training proven each time
        for p in peers
        if p.evaluation and (g := gains[p.hotkey])
    ]
    kept, matched = fresh, fresh
    for w in range(5, 10):
        kept = rate_window(kept, scored, w, RankingConfig(), CopyCheck([]), reference)
        matched = rate_window(matched, scored, w, RankingConfig(), CopyCheck([]))  # no norm to judge
    board = [r.hotkey for r in sorted(kept.peers.values(), key=lambda r: (-r.final, -r.ordinal, r.uid))]
    assert board[:2] == ["h4", "h3"] and kept.peers["big"].ordinal == pytest.approx(0.0, abs=1e-9)
    assert max(matched.peers.values(), key=lambda r: r.ordinal).hotkey == "big"
    assert kept.peers["big"].final == 0.0 < matched.peers["big"].final  # proven, but never a final score
    assert all(kept.peers[h].mu > matched.peers[h].mu for h in ("h2", "h3", "h4"))


def test_a_peer_linked_to_absent_sybils_still_plays() -> None:
    """Two sybils that resembled a victim for long enough to link it, then went quiet (or sent junk):
    the selection forms groups among this window's candidates only, so the victim is aggregated, and
    it must play the match too (kept out, its final score would be 0 and its pay with it)."""
    peers, state, reference = honest_and({"victim": 1.0})
    alarm = LinkConfig().alarm
    ratings = {**state.peers, "s1": rating("s1", 8, 1.0), "s2": rating("s2", 9, 1.0)}
    ring = {"victim": {"s1": alarm, "s2": alarm}, "s1": {"s2": alarm}}
    linked = RatingState({h: replace(r, links=ring.get(h, {})) for h, r in ratings.items()}, 4)
    cfg = RankingConfig()
    assert outside_match(linked, peers, 5, cfg, CopyCheck([]), reference) == set()
    after = rate_window(linked, peers, 5, cfg, CopyCheck([]), reference)
    assert after.peers["victim"].last_matched == 5
    kin = twins_of(after, CopyCheck([]), cfg)
    assert "victim" in select_window(after, peers, 5, cfg, kin, reference).gather


def test_peers_that_do_not_count_cannot_widen_the_band() -> None:
    """The band is the selection's, drawn over the peers it admits: three unproven identities at ×1.6
    do not carry a proven ×1.4 update back into the match (a band over every gaining peer did); being
    unproven, they play no match either."""
    peers, state, _ = honest_and({"big": 1.4, "u1": 1.6, "u2": 1.6, "u3": 1.6})
    fresh = {"evaluations": 0, "positives": 0, "margin_sum": 0.0}
    unproven = RatingState({h: replace(r, **fresh) if h[0] == "u" else r for h, r in state.peers.items()}, 4)  # type: ignore[arg-type]
    reference = clip_reference(peers, CheckConfig(), proven_peers(unproven, CFG))
    cfg = RankingConfig()
    assert outside_match(unproven, peers, 5, cfg, CopyCheck([]), reference) == {"big", "u1", "u2", "u3"}
    assert "big" not in select_window(unproven, peers, 5, cfg, reference=reference).gather


def test_a_peer_plays_no_match_until_it_has_proven_its_training() -> None:
    """An unproven peer is not aggregated, and it is not an opponent either, whatever its update: its
    wins there (a colluder before its links form, an inflated update before there is a band) would
    stay in its μ, and its beaten opponents' losses in theirs. Its evidence is folded in, and it plays
    from the window its proof holds."""
    peers, state, reference = honest_and({"big": 1.7, "fair": 1.0})
    unproven = {"evaluations": 0, "positives": 0, "margin_sum": 0.0}
    newcomers = RatingState(
        {h: replace(r, **unproven) if h in ("big", "fair") else r for h, r in state.peers.items()},  # type: ignore[arg-type]
        4,
    )
    assert outside_match(newcomers, peers, 5, RankingConfig(), CopyCheck([]), reference) == {"big", "fair"}
    after = rate_window(newcomers, peers, 5, RankingConfig(), CopyCheck([]), reference)
    for h in ("big", "fair"):
        assert after.peers[h].last_matched is None and after.peers[h].evaluations == 1
        assert (after.peers[h].mu, after.peers[h].sigma) == (state.peers[h].mu, state.peers[h].sigma)
    assert all(after.peers[h].last_matched == 5 for h in HONEST)
    # a fresh network: nobody is proven and nobody plays until three evaluations prove the training;
    # then the best gain wins (no band yet on the first proven window: nobody was admitted before)
    gains = {"h1": 0.01, "h2": 0.011, "h3": 0.012, "h4": 0.013, "fair": 0.012, "big": 0.03}
    scored = [
        replace(p, evaluation=replace(p.evaluation, score=g, own_gain=2 * g))
        for p in peers
        if p.evaluation and (g := gains[p.hotkey])
    ]
    fresh = RatingState({}, 0)
    for w in range(1, 5):
        fresh = rate_window(fresh, scored, w, RankingConfig(), CopyCheck([]))
        played = {h for h, r in fresh.peers.items() if r.last_matched == w}
        assert played == (set() if w < CFG.proof_min_evaluations else set(gains))
        assert all(r.mu == CFG.mu for r in fresh.peers.values()) == (w < CFG.proof_min_evaluations)
    assert max(fresh.peers.values(), key=lambda r: r.mu).hotkey == "big"


def test_a_banned_peer_plays_no_match_until_its_ban_ends() -> None:
    """A red-team run: a banned peer that proved its training again inside its ban (its rating is
    reset when the ban starts) won every match of the ban with an inflated update, so honest μ fell
    and it came out of the ban at the top of the leaderboard. It is not aggregated while banned, so
    it is no opponent either, whatever its update; its evidence is still folded in."""
    peers, state, reference = honest_and({"big": 1.7, "fair": 1.0})
    gains = {"big": 0.05, "fair": 0.012}
    peers = [
        replace(p, evaluation=replace(p.evaluation, score=gains[p.hotkey], own_gain=2 * gains[p.hotkey]))
        if p.hotkey in gains and p.evaluation
        else p
        for p in peers
    ]
    banned = RatingState({h: replace(r, ban_until=7) if h in gains else r for h, r in state.peers.items()}, 4)
    cfg = RankingConfig()
    assert outside_match(banned, peers, 5, cfg, CopyCheck([]), reference) == {"big", "fair"}
    after = rate_window(banned, peers, 5, cfg, CopyCheck([]), reference)
    without = rate_window(
        RatingState({h: r for h, r in state.peers.items() if h in HONEST}, 4),
        [p for p in peers if p.hotkey in HONEST], 5, cfg, CopyCheck([]), reference,
    )  # fmt: skip
    for h in gains:
        assert after.peers[h].last_matched is None and after.peers[h].final == 0.0
        assert (after.peers[h].mu, after.peers[h].sigma) == (state.peers[h].mu, state.peers[h].sigma)
        assert after.peers[h].evaluations == state.peers[h].evaluations + 1
    assert {h: after.peers[h].mu for h in HONEST} == {h: without.peers[h].mu for h in HONEST}
    # from the window its ban ends it plays like anyone: the fair update does, the inflated one is
    # left out for its norm
    assert outside_match(banned, peers, 7, cfg, CopyCheck([]), reference) == {"big"}


def test_drift_that_reaches_the_alarm_this_window_keeps_the_peer_out_of_that_windows_match() -> None:
    """With the persistence gate on, the window's drift evidence is folded in before the match, as
    the selection reads it: a peer whose similarity this window carries it past the alarm is out of
    both (folded in after rating, it played the match the selection then left it out of)."""
    peers, state, reference = honest_and({"x": 1.0})
    gated = replace(RankingConfig(), persistence=PersistenceConfig(gate=True))
    near = gated.persistence.alarm - gated.persistence.step_cap / 2
    before = RatingState({h: replace(r, drift=near) if h == "x" else r for h, r in state.peers.items()}, 4)
    cfg = RoundConfig(CheckConfig(), EvalConfig(), gated, WindowConfig(), SecretBytes(b"secret"))
    ctx = WindowContext(5, "base", {}, WindowSeed("0" * 16), cfg)
    for drift, out in ((Drift(), False), (Drift(similarity={"x": 0.5}), True)):
        after, selection = rate_and_select(ctx, peers, CopyCheck([]), reference, before, drift)
        assert (after.peers["x"].last_matched != 5, "x" not in selection.gather) == (out, out)
        assert all(after.peers[h].last_matched == 5 for h in HONEST)
